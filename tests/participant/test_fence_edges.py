"""Edges of envckpt.participant.fence the mutation campaign found untested.

The latest attempt never goes down (on admission or restore), and a call that
leaves without having been admitted leaves nothing in flight.
"""

from __future__ import annotations

from envckpt.episodes import EnvironmentEpisode
from envckpt.participant.fence import AttemptFence


def test_admitting_an_earlier_attempt_never_lowers_the_latest() -> None:
    """After attempt 3 was admitted, attempt 1 arriving does not revive attempt 2."""
    fence = AttemptFence()
    fence.admitted(EnvironmentEpisode("r", 3))
    fence.admitted(EnvironmentEpisode("r", 1))
    assert not fence.is_current(EnvironmentEpisode("r", 2))
    assert fence.refusal(EnvironmentEpisode("r", 2)) is not None


def test_a_call_leaving_without_admission_leaves_nothing_in_flight() -> None:
    """``left`` of an attempt never admitted (or already gone) is a no-op."""
    fence = AttemptFence()
    fence.left(EnvironmentEpisode("r", 0))
    assert not fence.has_in_flight and fence.in_flight() == frozenset()
    fence.admitted(EnvironmentEpisode("r", 0))
    fence.left(EnvironmentEpisode("r", 0))
    fence.left(EnvironmentEpisode("r", 0))
    assert not fence.has_in_flight


def test_a_restore_of_an_older_attempt_never_lowers_the_latest() -> None:
    """Attempt 5 ran here; installing the next of saved attempt 0 leaves attempt 4 superseded."""
    fence = AttemptFence()
    fence.admitted(EnvironmentEpisode("r", 5))
    fence.installed([EnvironmentEpisode("r", 1)], [EnvironmentEpisode("r", 0)])
    assert not fence.is_current(EnvironmentEpisode("r", 4))
    assert fence.is_current(EnvironmentEpisode("r", 5))
