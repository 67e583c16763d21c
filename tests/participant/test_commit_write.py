"""Tests for envckpt.participant.commit_write: one commit's export and write, or nothing."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from envckpt.episodes import EnvironmentEpisode
from envckpt.errors import ParticipantError
from envckpt.participant import store
from envckpt.participant.commit_write import (
    CommitWrite,
    Publisher,
    export_and_write,
    hand_over,
    write_here,
)
from envckpt.participant.json_state import NonFinite, UnencodableState
from envckpt.protocol import Kind

from helpers.participant_doubles import JsonStateHooks, ep


class RawStates(JsonStateHooks):
    """Exports each held state as it is, a list included."""

    def save_state(self, state: Any) -> Any:
        return state


def _start(
    write: CommitWrite,
    hooks: JsonStateHooks,
    directory: Path,
    *,
    scope: tuple[EnvironmentEpisode, ...] | None = None,
    before_publish: list[Callable[[], None]] | None = None,
    current: Any = None,
    non_finite: NonFinite = NonFinite.REFUSE,
    publish: Publisher = write_here,
) -> None:
    """Start ``write`` exporting the agent's held states to ``directory``."""
    write.start(
        export_and_write(
            write,
            hooks=hooks,
            kind=Kind.AGENT,
            instance="agent",
            checkpoint_dir=directory,
            scope=scope,
            current=current or frozenset,
            before_publish=before_publish or [],
            server="tools",
            non_finite=non_finite,
            publish=publish,
        )
    )


async def _write(
    hooks: JsonStateHooks,
    directory: Path,
    *,
    aborted: bool = False,
    **options: Any,
) -> dict[str, Any]:
    write = CommitWrite("c1", (str(directory), None, False))
    write.aborted = aborted
    _start(write, hooks, directory, **options)
    return await write.task


def _manifest_path(directory: Path) -> Path:
    return store.participant_dir(directory, "agent", "agent") / store.MANIFEST_NAME


async def test_the_reply_names_what_was_written(tmp_path: Path) -> None:
    """Records in Gym's envelope, a published manifest, and a reply naming both."""
    hooks = JsonStateHooks("agent")
    hooks.put(ep("r2"), turn=2)
    hooks.put(ep("r1", 1), turn=5, note="é")
    reply = await _write(hooks, tmp_path)
    assert reply["phase"] == "committed"
    assert reply["episode_ids"] == ["r1-a1", "r2"]
    assert reply["run_episode_ids"] == ["r1-a1", "r2"]
    manifest = store.read_manifest(tmp_path, kind="agent", instance="agent", checkpoint_id="c1")
    assert reply["manifest"] == manifest.to_json()
    records = list(store.iter_records(tmp_path, manifest))
    assert sorted(json.dumps(r["episode_id"], sort_keys=True) for r in records) == [
        '{"attempt": 0, "rollout_id": "r2"}',
        '{"attempt": 1, "rollout_id": "r1"}',
    ]
    assert {"episode_id": {"rollout_id": "r1", "attempt": 1}, "turn": 5, "note": "é"} in records


async def test_only_current_attempts_in_scope_are_exported(tmp_path: Path) -> None:
    """A scope limits the export, and an attempt that may no longer act is left out."""
    hooks = JsonStateHooks("agent")
    for name in ("r1", "r2", "r3"):
        hooks.put(ep(name))
    reply = await _write(
        hooks,
        tmp_path,
        scope=(ep("r1"), ep("r2")),
        current=lambda episodes: frozenset(e for e in episodes if e != ep("r2")),
    )
    assert reply["episode_ids"] == ["r1"]


@pytest.mark.parametrize("state", [{"episode_id": "mine", "turn": 1}, ["not", "an", "object"]])
async def test_a_state_the_envelope_cannot_hold_fails_before_any_file(
    tmp_path: Path, state: Any
) -> None:
    """checkpoint_error, and not even the participant directory is made."""
    hooks = RawStates("agent")
    hooks.put(ep("r1"))
    hooks.states[ep("r2")] = state
    with pytest.raises(ParticipantError) as caught:
        await _write(hooks, tmp_path)
    assert caught.value.code == "checkpoint_error"
    assert "export failed" in caught.value.detail
    assert not (tmp_path / "gym").exists()


async def test_a_nan_in_a_state_publishes_nothing_and_names_server_episode_and_key(
    tmp_path: Path,
) -> None:
    """NaN is refused while the lines are encoded: checkpoint_error naming the server, the
    episode, the session and the key; no manifest, no records file left."""
    hooks = RawStates("resources")
    hooks.states[ep("r0")] = {"session_id": "s0", "state": {"count": 1}}
    table = {"rows": [{"price": 1.5}, {"price": float("nan")}]}
    hooks.states[ep("r1", 2)] = {"session_id": "s1", "state": {"tables": table}}
    with pytest.raises(ParticipantError) as caught:
        await _write(hooks, tmp_path)
    error = caught.value
    assert error.code == "checkpoint_error"
    assert isinstance(error.__cause__, UnencodableState)
    assert (error.__cause__.server, error.__cause__.episode, error.__cause__.session) == (
        "tools",
        "r1-a2",
        "s1",
    )
    assert error.__cause__.key == "state.tables.rows[1].price"
    assert "tools" in error.detail and "r1-a2" in error.detail and "NaN" in error.detail
    directory = store.participant_dir(tmp_path, "agent", "agent")
    assert list(directory.iterdir()) == []


async def test_with_gyms_setting_nan_is_written_as_gym_writes_it_and_read_back(
    tmp_path: Path,
) -> None:
    """non_finite=gym: Python json's NaN and Infinity tokens on disk, floats again on reading."""
    hooks = RawStates("agent")
    hooks.states[ep("r1")] = {"reward": float("nan"), "bound": float("-inf"), "ok": 1.0}
    await _write(hooks, tmp_path, non_finite=NonFinite.GYM)
    directory = store.participant_dir(tmp_path, "agent", "agent")
    manifest = store.read_manifest(tmp_path, kind="agent", instance="agent")
    line = (directory / manifest.records_file).read_bytes()
    assert b'"reward":NaN' in line and b'"bound":-Infinity' in line
    assert json.loads(line)["ok"] == 1.0  # what Gym's own reader (json.loads) reads
    with pytest.raises(Exception, match="NaN"):  # the strict reader refuses it
        list(store.iter_records(tmp_path, manifest))
    (record,) = store.iter_records(tmp_path, manifest, allow_nan=True)
    assert record["reward"] != record["reward"] and record["bound"] == float("-inf")


async def test_a_write_stopped_before_its_manifest_is_stale_and_unpublished(
    tmp_path: Path,
) -> None:
    """Aborted before it ran, or while about to publish: stale_checkpoint, no manifest."""
    hooks = JsonStateHooks("agent")
    hooks.put(ep("r1"))
    with pytest.raises(ParticipantError) as caught:
        await _write(hooks, tmp_path, aborted=True)
    assert caught.value.code == "stale_checkpoint"
    assert not (tmp_path / "gym").exists()

    write = CommitWrite("c1", (str(tmp_path), None, False))

    def abort_now() -> None:
        write.aborted = True

    _start(write, hooks, tmp_path, before_publish=[abort_now])
    with pytest.raises(ParticipantError) as caught:
        await write.task
    assert caught.value.code == "stale_checkpoint"
    assert not _manifest_path(tmp_path).exists()
    assert write.failed()


async def test_the_lines_are_encoded_off_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Encoding happens in the writer's thread, so a large export never blocks the loop."""
    threads: list[bool] = []
    real = store.envelope_lines

    def spy(pairs: Any, *, allow_nan: bool = False) -> Any:
        for line in real(pairs, allow_nan=allow_nan):
            try:
                asyncio.get_running_loop()
                threads.append(False)
            except RuntimeError:
                threads.append(True)
            yield line

    monkeypatch.setattr(store, "envelope_lines", spy)
    hooks = JsonStateHooks("agent")
    hooks.put(ep("r1"))
    hooks.put(ep("r2"))
    await _write(hooks, tmp_path)
    assert threads == [True, True]


async def test_hand_over_writes_nothing_and_returns_the_encoded_records(tmp_path: Path) -> None:
    """A worker's share: [capture key, line] per exported episode, and no file at all."""
    hooks = JsonStateHooks("agent")
    hooks.states[ep("r2")] = {"n": 2}
    hooks.states[ep("r1", 1)] = {"n": 1}
    write = CommitWrite("c1", (str(tmp_path), None, False))
    _start(write, hooks, tmp_path, publish=hand_over)
    reply = await write.task
    assert "manifest" not in reply and reply["episode_ids"] == ["r1-a1", "r2"]
    assert [key for key, _ in reply["records"]] == ["r1-a1", "r2"]
    assert [json.loads(line)["episode_id"] for _, line in reply["records"]] == [
        {"rollout_id": "r1", "attempt": 1},
        {"rollout_id": "r2", "attempt": 0},
    ]
    assert list(tmp_path.iterdir()) == []


async def test_an_aborted_hand_over_is_stale() -> None:
    """A share whose commit was resumed meanwhile is refused like an unpublished write."""
    hooks = JsonStateHooks("agent")
    hooks.states[ep("r1")] = {"n": 1}
    write = CommitWrite("c1", ("/nowhere", None, False))

    def abort() -> None:
        write.aborted = True

    _start(write, hooks, Path("/nowhere"), before_publish=[abort], publish=hand_over)
    with pytest.raises(ParticipantError) as refused:
        await write.task
    assert refused.value.code == "stale_checkpoint"
