"""How many hypothesis examples a test with its own ``max_examples`` runs.

``make test`` runs a quarter of a test's count (at least 10); ``make verify``
(``ENVCKPT_HYPOTHESIS_PROFILE=thorough``) runs the full count::

    @settings(max_examples=examples(200), deadline=None)
"""

from __future__ import annotations

import os

PROFILE_VARIABLE = "ENVCKPT_HYPOTHESIS_PROFILE"
THOROUGH = "thorough"
FLOOR = 10


def thorough() -> bool:
    """Whether this run asked for the thorough (full count) profile."""
    return os.environ.get(PROFILE_VARIABLE) == THOROUGH


def examples(count: int) -> int:
    """``count`` under the thorough profile; otherwise a quarter of it, at least 10
    (never more than ``count``)."""
    if count < 1:
        raise ValueError(f"an example count is at least 1, got {count}")
    if thorough():
        return count
    return min(count, max(FLOOR, count // 4))
