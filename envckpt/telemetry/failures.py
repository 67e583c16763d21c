"""A failed snapshot's or restore's failures, counted by protocol error code.

A participant that refused names a code (``stale_attempt``,
``admission_closed``...); one that did not answer has none and counts as
``unreachable``; an error that is not about participants counts under its
type's name (``SnapshotNotReady``, ``OSError``)::

    failures_by_code(GymCheckpointUnavailable(..., failures={"a": "...", "b": "..."},
                                              codes={"a": "stale_attempt"}))
    # (("stale_attempt", 1), ("unreachable", 1))
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

UNREACHABLE = "unreachable"


def failures_by_code(error: BaseException) -> tuple[tuple[str, int], ...]:
    """Sorted ``(code, count)`` pairs for ``error`` (see the module docstring)."""
    failures = getattr(error, "failures", None)
    codes = getattr(error, "codes", None)
    if isinstance(failures, Mapping) and failures:
        known = codes if isinstance(codes, Mapping) else {}
        counted = Counter(str(known.get(server, UNREACHABLE)) for server in failures)
        return tuple(sorted(counted.items()))
    code = getattr(error, "code", None)
    if isinstance(code, str) and code:
        return ((code, 1),)
    return ((type(error).__name__, 1),)
