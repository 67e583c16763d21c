"""Tests for envckpt.participant.readiness: the report prepare and status answer with."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from envckpt.episodes import EnvironmentEpisode
from envckpt.participant.readiness import MAX_BLOCKERS_REPORTED, readiness_report
from envckpt.protocol import Mode

from helpers.examples import examples

episodes = st.builds(EnvironmentEpisode, st.sampled_from(("a", "b", "c", "d")), st.integers(0, 3))
episode_sets = st.frozensets(episodes, max_size=8)


def keys(episodes: frozenset[EnvironmentEpisode]) -> list[str]:
    return sorted(episode.capture_key for episode in episodes)


@settings(max_examples=examples(200), deadline=None)
@given(
    mode=st.sampled_from([Mode.EXPORT_RESTORE, Mode.STATELESS]),
    live=episode_sets,
    in_flight=episode_sets,
)
def test_a_saving_participant_waits_for_every_call_in_flight(
    mode: Mode, live: frozenset[EnvironmentEpisode], in_flight: frozenset[EnvironmentEpisode]
) -> None:
    """Ready iff nothing is in flight; the blockers are the calls in flight; no restarts."""
    report = readiness_report(mode, live, in_flight)
    held = live | in_flight
    assert report == {
        "ready": not in_flight,
        "blockers": keys(in_flight),
        "blocker_count": len(in_flight),
        "counts": {
            "live": len(held),
            "in_flight": len(in_flight),
            "parked": len(held - in_flight),
            "restarts": 0,
        },
        "restarts": [],
    }


@settings(max_examples=examples(200), deadline=None)
@given(live=episode_sets, in_flight=episode_sets)
def test_a_restart_only_participant_never_waits_and_restarts_everything_it_holds(
    live: frozenset[EnvironmentEpisode], in_flight: frozenset[EnvironmentEpisode]
) -> None:
    """restart_only: always ready, no blockers, every held or running episode a restart."""
    report = readiness_report(Mode.RESTART_ONLY, live, in_flight)
    held = live | in_flight
    assert report["ready"] is True
    assert report["blockers"] == [] and report["blocker_count"] == 0
    assert report["restarts"] == keys(held)
    assert report["counts"] == {
        "live": len(held),
        "in_flight": len(in_flight),
        "parked": len(held - in_flight),
        "restarts": len(held),
    }


def test_the_blocker_list_is_capped_but_the_count_is_not() -> None:
    """Beyond MAX_BLOCKERS_REPORTED, the list keeps the first keys and the count says all."""
    running = frozenset(EnvironmentEpisode(f"r{i:04d}", 0) for i in range(250))
    report = readiness_report(Mode.EXPORT_RESTORE, frozenset(), running)
    assert report["blocker_count"] == 250
    assert report["blockers"] == keys(running)[:MAX_BLOCKERS_REPORTED]
    assert report["ready"] is False
