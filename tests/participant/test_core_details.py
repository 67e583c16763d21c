"""ParticipantCore details the protocol rules leave open: exact refusals, ids, leases, status.

Beside ``test_core.py`` (every rule of protocol.md 4): each refusal's words,
the checkpoint id on every phase transition, where a lease ends exactly, the
watchdog's interval, a retried write keeping its scope, cleanup that
survives a failing reopen, and a restore whose deadline passes while it reads.
"""

from __future__ import annotations

import asyncio
import gc
import sys
import tracemalloc
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from envckpt.clock import FakeClock
from envckpt.episodes import EnvironmentEpisode
from envckpt.errors import ParticipantError
from envckpt.participant import store
from envckpt.participant.core import DEFAULT_LEASE_GRACE_SECONDS, ParticipantCore
from envckpt.protocol import CAPABILITIES

from helpers.participant_doubles import START, JsonStateHooks, Turn, ep, run_turn

GRACE = DEFAULT_LEASE_GRACE_SECONDS


def make_core(
    clock: FakeClock, hooks: JsonStateHooks | None = None, **kwargs: Any
) -> ParticipantCore:
    return ParticipantCore(
        server_name="agent",
        kind="agent",
        hooks=hooks if hooks is not None else JsonStateHooks("agent"),
        clock=clock,
        **kwargs,
    )


async def refusal(call: Any) -> ParticipantError:
    with pytest.raises(ParticipantError) as caught:
        await call
    return caught.value


async def published(root: Path, clock: FakeClock, attempt: int = 0) -> str:
    """An agent checkpoint ``src-1`` of r1 (``attempt``, turn 3) in ``root``."""
    hooks = JsonStateHooks("agent")
    core = make_core(clock, hooks)
    await run_turn(core, hooks, ep("r1", attempt), turn=3)
    await core.prepare("src-1", deadline_ts=clock.now() + 30)
    await core.commit(
        "src-1", deadline_ts=clock.now() + 30, checkpoint_dir=str(root), episode_ids=None
    )
    await core.resume("src-1", deadline_ts=clock.now() + 30)
    return str(root)


def phases(logs: list[dict[str, Any]]) -> list[tuple[str, str, str | None]]:
    return [
        (e["trigger"], e["dest"], e["checkpoint_id"])
        for e in logs
        if e.get("machine") == "participant_phases"
    ]


# ---------------------------------------------------------------- construction, status


def test_an_unsafe_instance_name_is_refused_by_name() -> None:
    """The instance becomes a path component: a slash in it is refused, naming the field."""
    with pytest.raises(ValueError) as caught:
        make_core(FakeClock(START), instance="a/b")
    assert str(caught.value) == "instance must be one safe path component, got 'a/b'"
    core = make_core(FakeClock(START), gym_instance_id="shard/replica-0")
    assert core.gym_instance_id == "shard/replica-0"


async def test_status_names_the_server_its_traffic_and_capabilities(tmp_path: Path) -> None:
    """A fresh core has served nothing; a restore counts as traffic."""
    clock = FakeClock(START)
    source = await published(tmp_path, clock)
    core = make_core(clock)
    status = await core.status()
    assert status["server_name"] == "agent"
    assert status["served_traffic"] is False
    assert status["capabilities"] == list(CAPABILITIES)
    reply = await core.restore(
        "rst-1", deadline_ts=clock.now() + 30, checkpoint_dir=source, episode_ids=[ep("r1")]
    )
    assert reply == {
        "phase": "restored",
        "checkpoint_id": "rst-1",
        "source_checkpoint_id": "src-1",
        "restored": ["r1-a1"],
    }
    assert (await core.status())["served_traffic"] is True


# ------------------------------------------------------------ ids on every transition


async def test_every_phase_transition_names_its_checkpoint(tmp_path: Path) -> None:
    """prepare, ready, commit, resume, restore and expire each log the checkpoint id."""
    clock = FakeClock(START)
    source = await published(tmp_path / "src", clock)
    hooks = JsonStateHooks("agent")
    core = make_core(clock, hooks)
    await run_turn(core, hooks, ep("r9"), turn=1)
    with capture_logs() as logs:
        await core.prepare("c1", deadline_ts=clock.now() + 30)
        await core.commit(
            "c1",
            deadline_ts=clock.now() + 30,
            checkpoint_dir=str(tmp_path / "c1"),
            episode_ids=[ep("r9")],
        )
        await core.resume("c1", deadline_ts=clock.now() + 30)
        fresh = make_core(clock)
        await fresh.restore(
            "rst-1", deadline_ts=clock.now() + 30, checkpoint_dir=source, episode_ids=[ep("r1")]
        )
        clock.advance(30 + GRACE + 1)
        await fresh.expire_if_due()
    assert phases(logs) == [
        ("prepare", "preparing", "c1"),
        ("ready", "prepared", "c1"),
        ("commit", "committed", "c1"),
        ("resume", "idle", "c1"),
        ("restore", "restored", "rst-1"),
        ("expire", "idle", "rst-1"),
    ]
    expired = [e for e in logs if e["event"] == "lease expired; resuming"]
    assert [(e["log_level"], e["checkpoint_id"]) for e in expired] == [("warning", "rst-1")]


# ------------------------------------------------------------------------- leases


async def test_a_lease_ends_just_after_its_expiry_time() -> None:
    """At the lease's instant the checkpoint is still open; a moment later it is resumed."""
    clock = FakeClock(START)
    core = make_core(clock)
    await core.prepare("c1", deadline_ts=START + 10)
    lease = core.lease_expires_at
    assert lease == START + 10 + GRACE
    clock.advance(lease - clock.now())
    await core.expire_if_due()
    assert core.phase == "prepared"
    clock.advance(0.001)
    await core.expire_if_due()
    assert core.phase == "idle"


async def test_the_watchdog_checks_the_lease_every_second() -> None:
    """run_lease_watchdog wakes one (default) interval later and expires an overdue lease."""
    clock = FakeClock(START)
    core = make_core(clock)
    await core.prepare("c1", deadline_ts=START + 10)
    clock.advance(10 + GRACE + 5)  # overdue, and nobody has looked yet
    assert core.phase == "prepared"
    watchdog = asyncio.create_task(core.run_lease_watchdog())
    try:
        for _ in range(5):
            await asyncio.sleep(0)
        assert core.phase == "prepared"  # still asleep
        clock.advance(1.0)
        for _ in range(20):
            await asyncio.sleep(0)
        assert core.phase == "idle"
        assert not watchdog.done()
    finally:
        watchdog.cancel()
        with pytest.raises(asyncio.CancelledError):
            await watchdog


# --------------------------------------------------------------- refusals, word for word


async def test_renew_with_nothing_open_says_so() -> None:
    """A renew on an idle participant is invalid_phase: no checkpoint is open."""
    error = await refusal(make_core(FakeClock(START)).renew("c1", deadline_ts=START + 10))
    assert (error.code, error.detail) == ("invalid_phase", "no checkpoint is open to renew")


async def test_commit_and_restore_of_a_finished_id_are_stale(tmp_path: Path) -> None:
    """Once c1 has ended here, a commit or restore under c1 is stale_checkpoint."""
    clock = FakeClock(START)
    core = make_core(clock)
    await core.prepare("c1", deadline_ts=START + 10)
    await core.resume("c1", deadline_ts=START + 10)
    error = await refusal(
        core.commit("c1", deadline_ts=START + 10, checkpoint_dir=str(tmp_path), episode_ids=None)
    )
    assert error.code == "stale_checkpoint"
    error = await refusal(
        core.restore("c1", deadline_ts=START + 10, checkpoint_dir=str(tmp_path), episode_ids=[])
    )
    assert error.code == "stale_checkpoint"
    assert core.phase == "idle"


async def test_commit_refusals_say_what_to_do(tmp_path: Path) -> None:
    """Other arguments conflict; a commit out of time says to retry to collect the result."""
    clock = FakeClock(START)
    hooks = JsonStateHooks("agent")
    core = make_core(clock, hooks)
    await run_turn(core, hooks, ep("r1"), turn=2)
    await core.prepare("c1", deadline_ts=START + 30)
    error = await refusal(
        core.commit("c1", deadline_ts=START, checkpoint_dir=str(tmp_path), episode_ids=None)
    )
    assert (error.code, error.detail) == (
        "deadline_exceeded",
        "commit c1 is still writing; retry to collect its result",
    )
    reply = await core.commit(
        "c1", deadline_ts=START + 30, checkpoint_dir=str(tmp_path), episode_ids=None
    )
    assert reply["phase"] == "committed"
    error = await refusal(
        core.commit(
            "c1", deadline_ts=START + 30, checkpoint_dir=str(tmp_path / "x"), episode_ids=None
        )
    )
    assert (error.code, error.detail) == (
        "checkpoint_conflict",
        "commit c1 was already sent with another directory or scope",
    )


async def test_restore_refusals_name_the_restore(tmp_path: Path) -> None:
    """A restore under an open non-restore id, or past its deadline, says so."""
    clock = FakeClock(START)
    core = make_core(clock)
    await core.prepare("c1", deadline_ts=START + 30)
    error = await refusal(
        core.restore("c1", deadline_ts=START + 30, checkpoint_dir=str(tmp_path), episode_ids=[])
    )
    assert (error.code, error.detail) == ("invalid_phase", "restore is not legal in prepared")
    error = await refusal(
        make_core(clock).restore(
            "r1", deadline_ts=START - 1, checkpoint_dir=str(tmp_path), episode_ids=[]
        )
    )
    assert (error.code, error.detail) == ("deadline_exceeded", "restore deadline has passed")


class SlowReader(JsonStateHooks):
    """Loading saved state takes so long that the restore's deadline passes meanwhile."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__("agent")
        self.clock = clock

    def load_state(self, episode: EnvironmentEpisode, state: Any) -> dict[str, Any]:
        self.clock.advance(60)
        return super().load_state(episode, state)


async def test_a_restore_whose_deadline_passes_while_reading_installs_nothing(
    tmp_path: Path,
) -> None:
    """The deadline is checked again after the read: past it, nothing is installed."""
    clock = FakeClock(START)
    source = await published(tmp_path, clock)
    hooks = SlowReader(clock)
    core = make_core(clock, hooks)
    error = await refusal(
        core.restore(
            "rst-1", deadline_ts=clock.now() + 30, checkpoint_dir=source, episode_ids=[ep("r1")]
        )
    )
    assert (error.code, error.detail) == ("deadline_exceeded", "restore deadline has passed")
    assert hooks.states == {} and core.phase == "idle" and hooks.admission_open


@pytest.mark.parametrize("operation", ["prepare", "renew", "commit"])
async def test_checkpoint_calls_past_their_deadline_name_the_operation(
    operation: str, tmp_path: Path
) -> None:
    """prepare, renew and commit past their deadline: deadline_exceeded naming the call."""
    clock = FakeClock(START)
    core = make_core(clock)
    if operation != "prepare":
        await core.prepare("c1", deadline_ts=START + 30)
    late = START - 1
    calls = {
        "prepare": lambda: core.prepare("c1", deadline_ts=late),
        "renew": lambda: core.renew("c1", deadline_ts=late),
        "commit": lambda: core.commit(
            "c1", deadline_ts=late, checkpoint_dir=str(tmp_path), episode_ids=None
        ),
    }
    error = await refusal(calls[operation]())
    assert (error.code, error.detail) == ("deadline_exceeded", f"{operation} deadline has passed")


@pytest.mark.parametrize("operation", ["retire", "forget"])
async def test_cleanup_refusals_name_the_operation(operation: str) -> None:
    """retire and forget, while a checkpoint is open or past their deadline, say which."""
    clock = FakeClock(START)
    core = make_core(clock)

    def call(deadline: float) -> Any:
        if operation == "retire":
            return core.retire("c1", deadline_ts=deadline, episode_ids=[ep("r1")])
        return core.forget("c1", deadline_ts=deadline, rollout_ids=["r1"])

    error = await refusal(call(START - 1))
    assert (error.code, error.detail) == ("deadline_exceeded", f"{operation} deadline has passed")
    await core.prepare("c1", deadline_ts=START + 30)
    error = await refusal(call(START + 30))
    assert (error.code, error.detail) == (
        "invalid_phase",
        f"{operation} is refused while checkpoint c1 is open",
    )


# ---------------------------------------------------------------- writes and failures


async def test_a_retried_write_keeps_the_commit_scope(tmp_path: Path) -> None:
    """A write that failed is redone for the same scope, not for everything held."""
    clock = FakeClock(START)
    hooks = JsonStateHooks("agent")
    core = make_core(clock, hooks)
    await run_turn(core, hooks, ep("r1"), turn=2)
    await run_turn(core, hooks, ep("r2"), turn=4)
    await core.prepare("c1", deadline_ts=START + 30)

    def crash() -> None:
        core.before_publish.remove(crash)
        raise OSError("disk full")

    core.before_publish.append(crash)
    arguments: dict[str, Any] = {
        "deadline_ts": START + 30,
        "checkpoint_dir": str(tmp_path),
        "episode_ids": [ep("r1")],
    }
    assert (await refusal(core.commit("c1", **arguments))).code == "checkpoint_error"
    reply = await core.commit("c1", **arguments)
    assert reply["episode_ids"] == ["r1"]


class FailingReopen(JsonStateHooks):
    """Reopening admission fails; installing restored state can be made to fail too."""

    fail_install = False

    async def open_admission(self) -> None:
        self.calls.append("open")
        raise RuntimeError("cannot reopen")

    def install(self, restored: Sequence[tuple[EnvironmentEpisode, object]]) -> None:
        if self.fail_install:
            raise RuntimeError("cannot install")
        super().install(restored)


async def test_a_failing_reopen_never_hides_a_resume_or_a_restore_error(tmp_path: Path) -> None:
    """Resume still ends the checkpoint; a failed install still raises its own error."""
    clock = FakeClock(START)
    hooks = FailingReopen("agent")
    core = make_core(clock, hooks)
    await core.prepare("c1", deadline_ts=START + 30)
    assert await core.resume("c1", deadline_ts=START + 30) == {
        "phase": "idle",
        "idempotent": False,
    }
    assert core.phase == "idle" and hooks.calls[-1] == "open"
    source = await published(tmp_path, clock)
    hooks.fail_install = True
    with pytest.raises(RuntimeError, match="cannot install"):
        await core.restore(
            "rst-1", deadline_ts=START + 30, checkpoint_dir=source, episode_ids=[ep("r1")]
        )
    assert core.phase == "idle" and hooks.calls[-1] == "open"


async def test_a_restore_that_cannot_stop_an_older_call_fails_at_its_deadline(
    tmp_path: Path,
) -> None:
    """An older attempt still in flight is waited for until the deadline, then refused."""
    clock = FakeClock(START)
    source = await published(tmp_path, clock, attempt=1)
    hooks = JsonStateHooks("agent")
    core = make_core(clock, hooks)
    busy = await Turn.start(core, ep("r1"))  # never finishes before the deadline
    try:
        error = await refusal(
            core.restore(
                "rst-1", deadline_ts=START + 30, checkpoint_dir=source, episode_ids=[ep("r1", 1)]
            )
        )
        assert (error.code, error.detail) == (
            "deadline_exceeded",
            "retired work did not stop before the deadline",
        )
        assert ep("r1", 2) not in hooks.states and core.phase == "idle"
    finally:
        await busy.finish()


class CountingInstall(JsonStateHooks):
    """Installs nothing (counts it): what a restore then holds is the core's own."""

    def __init__(self) -> None:
        super().__init__("agent")
        self.count = 0

    def install(self, restored: Sequence[tuple[EnvironmentEpisode, object]]) -> None:
        self.count += len(restored)


async def test_a_restore_of_many_episodes_keeps_a_few_bytes_each_and_fences_every_one(
    tmp_path: Path,
) -> None:
    """3,000 restored episodes: the core keeps about their scope table and a flag byte each
    (no set, dict entry, episode or key string per episode), its replay answers the same,
    and after resume every saved attempt is refused as stale and every next one admitted."""
    scope = [ep(f"task-{index:05d}", index % 3) for index in range(3000)]
    lines = (store.envelope_line(episode, {"turn": 3}) for episode in scope)
    store.write_checkpoint(
        tmp_path, kind="agent", instance="agent", checkpoint_id="c1", lines=lines
    )
    clock = FakeClock(START)
    hooks = CountingInstall()
    core = make_core(clock, hooks)
    args = {"deadline_ts": START + 30, "checkpoint_dir": str(tmp_path), "episode_ids": scope}
    tracemalloc.start()
    try:
        reply = await core.restore("r1", **args)
        restored_keys = reply["restored"]
        del reply
        gc.collect()  # a few fixed-size cycles of the read: not per episode
        kept, _peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert hooks.count == len(scope)
    assert restored_keys == sorted(e.next_attempt().capture_key for e in scope)
    # The restored keys (about 72 bytes each) are the caller's; the table is 16 bytes an
    # episode, the flags 2 (about 20 measured). The old sets, dicts and episodes kept 180.
    key_bytes = sum(sys.getsizeof(key) + 8 for key in restored_keys)
    assert (kept - key_bytes) / len(scope) < 64
    assert (await core.restore("r1", **args))["restored"] == restored_keys
    await core.resume("r1", deadline_ts=START + 30)
    for episode in scope:
        for stale in range(episode.attempt + 1):
            with pytest.raises(ParticipantError) as caught:
                async with core.admit(ep(episode.rollout_id, stale)):
                    pass
            assert caught.value.code == "stale_attempt"
        async with core.admit(episode.next_attempt()):
            pass
