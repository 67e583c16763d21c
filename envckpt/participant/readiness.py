"""A participant's readiness report: what prepare waits for and what restarts.

The report is the ``report`` of status and of every prepare reply
(protocol.md 3): ``ready``, ``blockers`` (capture keys in flight, capped),
``blocker_count``, ``counts`` and ``restarts``. A ``restart_only`` participant
saves nothing, so it never waits: every episode it holds is a restart.

    report = readiness_report(Mode.EXPORT_RESTORE, live=held, in_flight=running)
"""

from __future__ import annotations

from typing import Any

from envckpt.episodes import EnvironmentEpisode, capture_keys
from envckpt.protocol import Mode

MAX_BLOCKERS_REPORTED = 100


def readiness_report(
    mode: Mode,
    live: frozenset[EnvironmentEpisode],
    in_flight: frozenset[EnvironmentEpisode],
) -> dict[str, Any]:
    """The report for a participant holding ``live`` with ``in_flight`` calls running."""
    if in_flight:
        live = live | in_flight
        parked = len(live - in_flight)
    else:
        parked = len(live)  # the usual case at a boundary: no set is copied
    if mode is Mode.RESTART_ONLY:
        # Nothing is saved, so every live episode restarts; never wait.
        blockers: list[str] = []
        restarts = capture_keys(live)
    else:
        blockers = capture_keys(in_flight)
        restarts = []
    return {
        "ready": not blockers,
        "blockers": blockers[:MAX_BLOCKERS_REPORTED],
        "blocker_count": len(blockers),
        "counts": {
            "live": len(live),
            "in_flight": len(in_flight),
            "parked": parked,
            "restarts": len(restarts),
        },
        "restarts": restarts,
    }
