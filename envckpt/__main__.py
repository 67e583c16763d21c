"""``python -m envckpt`` runs the command-line tool."""

import sys

from envckpt.cli import main

sys.exit(main())
