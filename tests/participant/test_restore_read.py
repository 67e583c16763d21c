"""Tests for envckpt.participant.restore_read: verify everything, then install in batches."""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from envckpt.episodes import EnvironmentEpisode
from envckpt.errors import ParticipantError
from envckpt.participant import restore_read, store
from envckpt.participant.restore_read import install_in_batches, verify_in_thread
from envckpt.participant.scope_table import ScopeTable

from helpers.participant_doubles import JsonStateHooks, ep

EPISODES = tuple(ep(f"r{index:03d}") for index in range(40))


def _checkpoint(root: Path, *, episodes: Sequence[EnvironmentEpisode] = EPISODES) -> None:
    """A published checkpoint of ``episodes`` (turn 3, a few hundred bytes each)."""
    lines = (store.envelope_line(episode, {"turn": 3, "pad": "x" * 200}) for episode in episodes)
    store.write_checkpoint(root, kind="agent", instance="agent", checkpoint_id="c1", lines=lines)


class CountingHooks(JsonStateHooks):
    """Records every install call and the thread each validate ran on."""

    def __init__(self) -> None:
        super().__init__("agent")
        self.batches: list[int] = []
        self.validated_on: set[str] = set()
        self.fail_install_at: int | None = None

    def validate(self, episode: EnvironmentEpisode, state: Mapping[str, Any]) -> object:
        self.validated_on.add(threading.current_thread().name)
        return super().validate(episode, state)

    def install(self, restored: Sequence[tuple[EnvironmentEpisode, object]]) -> None:
        self.batches.append(len(restored))
        if self.fail_install_at == len(self.batches):
            raise RuntimeError("install failed")
        super().install(restored)


async def _verify(
    root: Path, hooks: JsonStateHooks, scope: Sequence[EnvironmentEpisode] = EPISODES
) -> restore_read.VerifiedCheckpoint:
    return await verify_in_thread(
        root, hooks=hooks, kind="agent", instance="agent", scope=ScopeTable.of(scope)
    )


async def test_every_in_scope_state_is_installed_as_its_next_attempt_in_batches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Out-of-scope records are skipped; batches hold about BATCH_BYTES of records."""
    monkeypatch.setattr(restore_read, "BATCH_BYTES", 2000)
    _checkpoint(tmp_path)
    hooks = CountingHooks()
    scope = EPISODES[:30]
    source = await _verify(tmp_path, hooks, scope)
    assert source.checkpoint_id == "c1"
    assert hooks.installed == []  # the first pass installs nothing
    installed = await install_in_batches(source, hooks)
    assert installed == bytearray([1]) * 30
    assert source.scope.next_attempts(installed) == [episode.next_attempt() for episode in scope]
    assert sorted(hooks.states) == source.scope.next_attempts(installed)
    assert len(hooks.batches) > 3 and sum(hooks.batches) == 30
    assert max(hooks.batches) <= 2000 // 200 + 1


async def test_both_passes_run_on_the_restores_own_thread(tmp_path: Path) -> None:
    """Every validate of both passes runs on one thread of the restore, never the loop's."""
    _checkpoint(tmp_path)
    hooks = CountingHooks()
    await install_in_batches(await _verify(tmp_path, hooks), hooks)
    assert len(hooks.validated_on) == 1
    assert next(iter(hooks.validated_on)).startswith("envckpt-restore")


@pytest.mark.parametrize(
    "damage", ["bad state", "duplicate", "duplicate outside the scope", "flipped byte"]
)
async def test_a_refusal_in_the_first_pass_installs_nothing(tmp_path: Path, damage: str) -> None:
    """A state the hooks refuse, two records of one episode or a wrong digest, even at the
    very end of the file: invalid_checkpoint_state, and install is never called."""
    scope = (*EPISODES, ep("zz"))
    if damage == "duplicate":
        _checkpoint(tmp_path, episodes=(*EPISODES, EPISODES[0]))
    elif damage == "duplicate outside the scope":
        # Only in-scope records are installed, but a file with two records
        # of any one episode is not a checkpoint.
        _checkpoint(tmp_path, episodes=(*EPISODES, EPISODES[0]))
        scope = EPISODES[1:]
    elif damage == "bad state":
        lines = [store.envelope_line(e, {"turn": 3}) for e in EPISODES]
        lines.append(store.envelope_line(ep("zz"), {"turn": "three"}))
        store.write_checkpoint(
            tmp_path, kind="agent", instance="agent", checkpoint_id="c1", lines=lines
        )
    else:
        _checkpoint(tmp_path)
        manifest = store.read_manifest(tmp_path, kind="agent", instance="agent")
        path = store.records_path(tmp_path, manifest)
        data = bytearray(path.read_bytes())
        data[-10] ^= 0x01
        path.write_bytes(bytes(data))
    hooks = CountingHooks()
    with pytest.raises(ParticipantError) as caught:
        await _verify(tmp_path, hooks, scope)
    assert caught.value.code == "invalid_checkpoint_state"
    assert "two records" in str(caught.value) or not damage.startswith("duplicate")
    assert hooks.batches == []


async def test_a_file_changed_after_the_first_pass_is_refused_unread(tmp_path: Path) -> None:
    """The second pass refuses a records file that is not the one verified: nothing installed."""
    _checkpoint(tmp_path)
    hooks = CountingHooks()
    source = await _verify(tmp_path, hooks)
    manifest = store.read_manifest(tmp_path, kind="agent", instance="agent")
    os.utime(store.records_path(tmp_path, manifest), ns=(1, 1))
    with pytest.raises(ParticipantError, match="changed since it was verified") as caught:
        await install_in_batches(source, hooks)
    assert caught.value.code == "invalid_checkpoint_state"
    assert hooks.batches == [] and hooks.states == {}


async def test_a_failure_part_way_frees_what_was_installed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A state refused only on the second read, after some batches: those are retired
    through the hooks, and the refusal is invalid_checkpoint_state."""
    monkeypatch.setattr(restore_read, "BATCH_BYTES", 2000)
    _checkpoint(tmp_path)
    hooks = CountingHooks()
    source = await _verify(tmp_path, hooks)
    seen = 0
    real = hooks.validate

    def flaky(episode: EnvironmentEpisode, state: Mapping[str, Any]) -> object:
        nonlocal seen
        seen += 1
        if seen == 25:
            raise ValueError("not deterministic after all")
        return real(episode, state)

    monkeypatch.setattr(hooks, "validate", flaky)
    with pytest.raises(ParticipantError, match="not deterministic") as caught:
        await install_in_batches(source, hooks)
    assert caught.value.code == "invalid_checkpoint_state"
    assert len(hooks.batches) >= 2
    assert hooks.retired and set(hooks.retired[-1]) == set(hooks.installed)
    assert hooks.states == {}


async def test_an_install_error_goes_on_as_it_is_after_freeing_the_batches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kind's install raising is not a checkpoint problem: its error is raised as it is,
    once every episode of the batches so far (the failing one included) is retired."""
    monkeypatch.setattr(restore_read, "BATCH_BYTES", 2000)
    _checkpoint(tmp_path)
    hooks = CountingHooks()
    hooks.fail_install_at = 2
    source = await _verify(tmp_path, hooks)
    with pytest.raises(RuntimeError, match="install failed"):
        await install_in_batches(source, hooks)
    first, second = hooks.batches[0], hooks.batches[1]
    assert len(hooks.retired[-1]) == first + second
    assert hooks.states == {}


async def test_a_scope_episode_without_a_record_is_not_installed(tmp_path: Path) -> None:
    """The reply's source: a byte per scope position, 0 for an episode the file lacks."""
    _checkpoint(tmp_path, episodes=EPISODES[:3])
    hooks = CountingHooks()
    source = await _verify(tmp_path, hooks, (EPISODES[2], ep("missing"), EPISODES[0]))
    installed = await install_in_batches(source, hooks)
    # Table order: missing, r000, r002.
    assert installed == bytearray([0, 1, 1])
    assert sorted(hooks.states) == [EPISODES[0].next_attempt(), EPISODES[2].next_attempt()]


async def test_installed_attempts_share_the_scopes_rollout_id_strings(tmp_path: Path) -> None:
    """No string decoded from a record outlives it: each installed attempt names the
    scope table's own rollout id (one string per rollout, however many records)."""
    _checkpoint(tmp_path)
    hooks = CountingHooks()
    source = await _verify(tmp_path, hooks)
    await install_in_batches(source, hooks)
    table_ids = {id(rollout_id) for rollout_id in source.scope.rollout_ids}
    assert len(hooks.states) == len(EPISODES)
    assert all(id(episode.rollout_id) in table_ids for episode in hooks.states)
