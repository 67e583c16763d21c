"""The repository's ``bench`` package, for tests that call a benchmark in process.

``tests`` is on the test path, so ``bench`` may first resolve to
``tests/bench`` (a namespace package); the repository's own ``bench`` is a
regular package beside ``envckpt``::

    routes = repository_bench("routes")
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

REPO_ROOT = Path(__file__).resolve().parents[2]


def repository_bench(name: str) -> ModuleType:
    """The module ``bench.<name>`` of the repository."""
    package = sys.modules.get("bench")
    if package is None or getattr(package, "__file__", None) is None:
        sys.modules.pop("bench", None)
        if str(REPO_ROOT) not in sys.path:
            sys.path.insert(0, str(REPO_ROOT))
    return importlib.import_module(f"bench.{name}")
