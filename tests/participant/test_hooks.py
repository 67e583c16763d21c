"""Tests for envckpt.participant.hooks: the SessionHooks base and NoState."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envckpt.clock import FakeClock
from envckpt.episodes import EnvironmentEpisode
from envckpt.participant.core import ParticipantCore
from envckpt.participant.hooks import NoState, SessionHooks, StateHooks

from helpers.examples import examples
from helpers.participant_doubles import ep


class Counters(SessionHooks[int]):
    """The docstring's example kind: one integer per episode."""

    state_type = int

    def save_state(self, state: int) -> dict[str, Any]:
        return {"count": state}

    def load_state(self, episode: EnvironmentEpisode, state: Mapping[str, Any]) -> int:
        count = state.get("count")
        if type(count) is not int:
            raise ValueError(f"{episode.capture_key}: no integer count")
        return count


def test_both_bases_satisfy_the_state_hooks_protocol() -> None:
    """A SessionHooks kind and NoState can be handed to the core as StateHooks."""
    hooks: list[StateHooks] = [Counters(), NoState()]
    assert all(hook.live_episodes() == frozenset() for hook in hooks)


def test_export_saves_the_held_episodes_in_scope_in_episode_order() -> None:
    """Export yields (episode, record) for held episodes in scope only, sorted."""
    hooks = Counters()
    hooks.states = {ep("b"): 2, ep("a", 1): 1, ep("c"): 3}
    exported = list(hooks.export(frozenset({ep("c"), ep("a", 1), ep("zz")})))
    assert exported == [(ep("a", 1), {"count": 1}), (ep("c"), {"count": 3})]


def test_validate_reads_a_saved_state_back_and_refuses_a_bad_one() -> None:
    """validate is load_state: the parsed state, or ValueError."""
    hooks = Counters()
    assert hooks.validate(ep("a"), {"count": 4}) == 4
    with pytest.raises(ValueError, match="no integer count"):
        hooks.validate(ep("a"), {"count": "4"})


def test_install_puts_validated_states_in_place() -> None:
    """Installed states are held (and exported) as the given attempts."""
    hooks = Counters()
    hooks.install([(ep("a", 1), 5), (ep("b", 2), 6)])
    assert hooks.states == {ep("a", 1): 5, ep("b", 2): 6}
    assert hooks.live_episodes() == {ep("a", 1), ep("b", 2)}


def test_install_is_all_or_nothing_on_a_state_of_the_wrong_type() -> None:
    """One unvalidated state refuses the whole install (TypeError); nothing is installed."""
    hooks = Counters()
    hooks.states = {ep("held"): 1}
    with pytest.raises(TypeError, match="expected a validated int, got dict"):
        hooks.install([(ep("a", 1), 5), (ep("b", 1), {"count": 6}), (ep("c", 1), 7)])
    assert hooks.states == {ep("held"): 1}


def test_the_default_state_type_accepts_any_state() -> None:
    """A kind that does not name its state_type installs whatever it validated."""
    hooks: SessionHooks[object] = SessionHooks()
    hooks.install([(ep("a"), {"x": 1}), (ep("b"), "text")])
    assert hooks.live_episodes() == {ep("a"), ep("b")}


def test_an_unfinished_kind_says_what_it_lacks() -> None:
    """save_state and load_state must be provided by the kind."""
    hooks: SessionHooks[object] = SessionHooks()
    with pytest.raises(NotImplementedError):
        hooks.save_state(1)
    with pytest.raises(NotImplementedError):
        hooks.validate(ep("a"), {})


held_episodes = st.frozensets(
    st.builds(ep, st.sampled_from(("a", "b", "c")), st.integers(0, 3)), max_size=8
)


def kept_after_retiring(
    held: frozenset[EnvironmentEpisode], retired: frozenset[EnvironmentEpisode]
) -> set[EnvironmentEpisode]:
    """The held episodes above every retired attempt of their rollout: what a retire keeps."""
    return {
        h
        for h in held
        if not any(r.rollout_id == h.rollout_id and h.attempt <= r.attempt for r in retired)
    }


@settings(max_examples=examples(200), deadline=None)
@given(held=held_episodes, retired=held_episodes)
async def test_retire_drops_the_attempt_and_every_earlier_one(
    held: frozenset[EnvironmentEpisode], retired: frozenset[EnvironmentEpisode]
) -> None:
    """After retire, exactly the held episodes above every retired attempt of their rollout stay."""
    hooks = Counters()
    hooks.states = {episode: episode.attempt for episode in held}
    await hooks.retire(tuple(retired))
    assert hooks.live_episodes() == kept_after_retiring(held, retired)


async def test_the_session_defaults_hold_nothing_of_their_own() -> None:
    """Admission, commit extras, forget and release do nothing and keep the states."""
    hooks = Counters()
    hooks.states = {ep("a"): 1}
    await hooks.close_admission()
    await hooks.open_admission()
    assert hooks.commit_extras((ep("a"),)) == {}
    hooks.forget(["a"])
    hooks.release_exported()
    assert hooks.states == {ep("a"): 1}


async def test_no_state_exports_nothing_and_restores_nothing() -> None:
    """NoState holds no records: export is empty, validate refuses, install is a no-op."""
    hooks = NoState()
    hooks.live.update({ep("a"), ep("b", 1)})
    assert list(hooks.export(frozenset(hooks.live))) == []
    with pytest.raises(ValueError, match="saves no state"):
        hooks.validate(ep("a"), {})
    hooks.install([(ep("c", 1), object())])
    assert hooks.live_episodes() == {ep("a"), ep("b", 1)}
    assert hooks.commit_extras((ep("a"),)) == {}
    await hooks.close_admission()
    await hooks.open_admission()
    hooks.forget(["a"])
    hooks.release_exported()
    assert hooks.live_episodes() == {ep("a"), ep("b", 1)}


@settings(max_examples=examples(200), deadline=None)
@given(held=held_episodes, retired=held_episodes)
async def test_no_state_retire_forgets_the_attempt_and_every_earlier_one(
    held: frozenset[EnvironmentEpisode], retired: frozenset[EnvironmentEpisode]
) -> None:
    """NoState retires like a session kind, so a restart_only participant stops reporting them."""
    hooks = NoState()
    hooks.live.update(held)
    live_set = hooks.live
    await hooks.retire(tuple(retired))
    assert hooks.live_episodes() == kept_after_retiring(held, retired)
    assert hooks.live is live_set  # the server keeps filling the same set


async def test_a_restart_only_participant_stops_reporting_a_retired_rollout() -> None:
    """Retiring attempt 1 frees the live attempt 0 too: it is no restart of the next prepare."""
    clock = FakeClock()
    hooks = NoState()
    core = ParticipantCore(
        server_name="judge-tools", kind="resources", mode="restart_only", hooks=hooks, clock=clock
    )
    hooks.live.update({ep("a"), ep("b")})
    await core.retire("c0", deadline_ts=clock.now() + 30, episode_ids=[ep("a", 1)])
    reply = await core.prepare("c1", deadline_ts=clock.now() + 30)
    assert reply["report"]["restarts"] == ["b"]
