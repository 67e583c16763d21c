"""Print an installed distribution's own requirements, one per line, extras left out.

The Makefile installs nemo-gym without its dependencies (pip, which alone can
ignore its ``Requires-Python``), then hands this list to uv beside the
project's own extras, so one resolver picks every version at once::

    python tools/requirements_of.py nemo-gym > .venv/nemo-gym-requirements.txt
"""

from __future__ import annotations

import sys
from importlib import metadata

from packaging.requirements import Requirement


def base_requirements(distribution: str) -> list[str]:
    """``distribution``'s requirements that hold without any extra."""
    kept = []
    for line in metadata.requires(distribution) or []:
        requirement = Requirement(line)
        if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
            kept.append(line)
    return kept


if __name__ == "__main__":
    print("\n".join(base_requirements(sys.argv[1])))
