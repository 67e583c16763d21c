"""Stateful tests for envckpt.participant.core: random control sequences against a model.

One ``ParticipantCore`` (export_restore, JSON dict hooks, FakeClock) is driven
by random turns, prepares, commits, resumes, retires and forgets (also under
finished ids and past their deadline), clock jumps, restores into a fresh
core and restores into the same, used one; a small reference model predicts
every reply and refusal code, the phase, the open id, the lease, the marks,
the held state and the fenced ids.

Model calls (``model_calls``): generations admitted and left running, under a
policy drawn per example (``ModelCoreMachine``; the plain machine waits). A
prepare refuses the ones still generating (at once, or half-way to its
deadline) unless the policy waits; a refused generation records no state and
its caller gets ``admission_closed`` ("model call refused"), and the model
predicts which were refused and when the prepare got ready.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections import OrderedDict
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from envckpt.clock import FakeClock
from envckpt.episodes import EnvironmentEpisode
from envckpt.errors import ParticipantError
from envckpt.machines.tables import PARTICIPANT_PHASES
from envckpt.participant import store
from envckpt.participant.core import ParticipantCore
from envckpt.participant.model_calls import (
    ModelCallPolicy,
    ModelCalls,
    deliver,
    is_refused_call,
)
from envckpt.participant.open_checkpoint import FINISHED_IDS_KEPT

from helpers.examples import examples
from helpers.participant_doubles import START, JsonStateHooks, Turn, run_until

T = TypeVar("T")

GRACE = 100.0
ROLLOUTS = st.sampled_from(["r1", "r2", "r3"])
ATTEMPTS = st.integers(min_value=0, max_value=3)
# 0: a fresh id; 1-5: the open id when there is one; else an id used before.
PICKS = st.integers(min_value=0, max_value=9)
# Retire and forget: now and then with a deadline that has passed.
LATE = st.integers(min_value=0, max_value=5).map(lambda n: n == 0)


class Model:
    """What the participant should look like, by protocol.md section 4."""

    def __init__(self) -> None:
        self.phase = "idle"
        self.open_id: str | None = None
        self.lease: float | None = None
        self.finished: OrderedDict[str, None] = OrderedDict()
        self.marks: dict[str, int] = {}
        self.latest: dict[str, int] = {}
        self.states: dict[EnvironmentEpisode, int] = {}
        self.in_flight: list[EnvironmentEpisode] = []
        # The in-flight calls that are model generations a prepare may refuse.
        self.generating: list[EnvironmentEpisode] = []
        self.refused = 0
        self.prepare_reply: dict[str, Any] | None = None
        self.write: tuple[str, str, dict[str, Any]] | None = None
        # restored: (directory, scope capture keys) and the reply a replay returns.
        self.restore: tuple[tuple[str, tuple[str, ...]], dict[str, Any]] | None = None

    def finish(self, checkpoint_id: str) -> None:
        self.finished[checkpoint_id] = None
        while len(self.finished) > FINISHED_IDS_KEPT:
            self.finished.popitem(last=False)

    def abort(self) -> None:
        assert self.open_id is not None
        self.finish(self.open_id)
        self.phase, self.open_id, self.lease = "idle", None, None
        self.prepare_reply = None
        self.write = None
        self.restore = None

    def expire(self, now: float) -> None:
        if self.phase != "idle" and self.lease is not None and now > self.lease:
            self.abort()

    def arm(self, deadline_ts: float) -> None:
        candidate = deadline_ts + GRACE
        self.lease = candidate if self.lease is None else max(self.lease, candidate)

    def admission_error(self, episode: EnvironmentEpisode) -> str | None:
        mark = self.marks.get(episode.rollout_id)
        if mark is not None and episode.attempt <= mark:
            return "stale_attempt"
        latest = self.latest.get(episode.rollout_id)
        if latest is not None and episode.attempt < latest:
            return "stale_attempt"
        if self.phase != "idle":
            return "admission_closed"
        return None

    def admit(self, episode: EnvironmentEpisode) -> None:
        self.latest[episode.rollout_id] = max(
            episode.attempt, self.latest.get(episode.rollout_id, 0)
        )

    def live_rollouts(self) -> set[str]:
        return {e.rollout_id for e in self.states} | {e.rollout_id for e in self.in_flight}

    def retire(self, episode: EnvironmentEpisode) -> None:
        """Mark ``episode``'s rollout and drop it and its earlier attempts."""
        rollout = episode.rollout_id
        self.marks[rollout] = max(self.marks.get(rollout, -1), episode.attempt)

        def gone(e: EnvironmentEpisode) -> bool:
            return e.rollout_id == rollout and e.attempt <= episode.attempt

        self.states = {e: t for e, t in self.states.items() if not gone(e)}
        self.in_flight = [e for e in self.in_flight if not gone(e)]
        self.generating = [e for e in self.generating if not gone(e)]

    def holds_newer(self, saved: EnvironmentEpisode) -> bool:
        """This process holds the attempt a restore of ``saved`` installs, or a newer one."""
        held = [*self.states, *self.in_flight]
        return any(e.rollout_id == saved.rollout_id and e.attempt > saved.attempt for e in held)

    def current(self, episode: EnvironmentEpisode) -> bool:
        mark = self.marks.get(episode.rollout_id, -1)
        return mark < episode.attempt >= self.latest.get(episode.rollout_id, episode.attempt)

    def cleanup_error(self, checkpoint_id: str, late: bool) -> str | None:
        """Retire and forget: a finished id is fine (cleanup calls)."""
        if self.phase in ("preparing", "prepared", "committed"):
            return "invalid_phase"
        if self.phase == "restored" and checkpoint_id != self.open_id:
            return "checkpoint_conflict"
        return "deadline_exceeded" if late else None


class Generation:
    """One admitted model call left generating until ``release``; it records its turn when done."""

    def __init__(self, core: ParticipantCore, hooks: JsonStateHooks, episode: EnvironmentEpisode):
        self.core, self.hooks, self.episode = core, hooks, episode
        self.generating = asyncio.Event()
        self.release = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    @classmethod
    async def start(
        cls, core: ParticipantCore, hooks: JsonStateHooks, episode: EnvironmentEpisode
    ) -> Generation:
        generation = cls(core, hooks, episode)
        generation.task = asyncio.create_task(generation._run())
        await run_until(generation.task, generation.generating)
        return generation

    async def _decode(self) -> None:
        self.generating.set()
        await self.release.wait()
        deliver()

    async def _run(self) -> None:
        assert self.core.model_calls is not None
        async with self.core.admit(self.episode):
            await self.core.model_calls.generate(self.episode, self._decode())
            if self.core.fence.is_current(self.episode):  # a retired one records nothing
                state = self.hooks.states.get(self.episode, {"turn": 0})
                self.hooks.put(self.episode, state["turn"] + 1)


async def _join(task: asyncio.Task[None]) -> None:
    await task


class CoreMachine(RuleBasedStateMachine):
    """Drives one participant core; every rule is sync on a per-example runner."""

    def __init__(self) -> None:
        super().__init__()
        self.runner = asyncio.Runner()
        self.root = Path(tempfile.mkdtemp(prefix="envckpt-core-stateful-"))
        self.clock = FakeClock(START)
        self.model = Model()
        self.used_ids: list[str] = []
        self.minted = 0
        self.turns: list[Turn] = []
        self.generations: list[Generation] = []
        self.published: list[tuple[Path, str, list[dict[str, Any]]]] = []
        self.policy = ModelCallPolicy.WAIT
        self._new_core()

    def _new_core(self) -> None:
        self.hooks = JsonStateHooks("agent")
        self.hooks.on_retire.append(self._stop_retired_turns)
        self.core = ParticipantCore(
            server_name="agent",
            kind="agent",
            hooks=self.hooks,
            clock=self.clock,
            lease_grace=GRACE,
            model_calls=ModelCalls(self.policy),
        )

    def teardown(self) -> None:
        try:
            for turn in [*self.turns, *self.generations]:
                turn.release.set()
            self.runner.run(asyncio.sleep(0))
        finally:
            self.runner.close()
            shutil.rmtree(self.root, ignore_errors=True)

    # ---------------------------------------------------------------- helpers

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return self.runner.run(coroutine)

    def mint(self, prefix: str = "c") -> str:
        self.minted += 1
        checkpoint_id = f"{prefix}{self.minted}"
        self.used_ids.append(checkpoint_id)
        return checkpoint_id

    def choose_id(self, pick: int) -> str:
        if 1 <= pick <= 5 and self.model.open_id is not None:
            return self.model.open_id
        if pick <= 5 or not self.used_ids:
            return self.mint()
        return self.used_ids[pick % len(self.used_ids)]

    def observe(self) -> tuple[Any, ...]:
        return (
            self.core.phase,
            self.core.checkpoint_id,
            self.core.lease_expires_at,
            {r: self.core.fence.mark(r) for r in ("r1", "r2", "r3")},
        )

    def settle(self) -> None:
        """Apply lease expiry on both sides, so a refusal can be checked for no effect."""
        self.run(self.core.expire_if_due())
        self.model.expire(self.clock.now())

    def call(self, expected_code: str | None, coroutine: Coroutine[Any, Any, T]) -> T | None:
        """Run a control call; require the predicted refusal, and no effect if refused."""
        before = self.observe()
        event(f"{coroutine.__qualname__} in {before[0]}: {expected_code or 'accepted'}")
        try:
            result = self.run(coroutine)
        except ParticipantError as error:
            assert error.code == expected_code, (error, expected_code)
            assert self.observe() == before, "a refused call changed the participant"
            return None
        assert expected_code is None, f"expected {expected_code}, got {result!r}"
        return result

    def admit(
        self, rule: str, episode: EnvironmentEpisode, call: Coroutine[Any, Any, T]
    ) -> T | None:
        """Run an admission; require the predicted refusal code. None when refused."""
        self.settle()
        expected = self.model.admission_error(episode)
        event(f"{rule} in {self.model.phase}: {expected or 'accepted'}")
        try:
            admitted = self.run(call)
        except ParticipantError as error:
            assert error.code == expected
            return None
        assert expected is None, expected
        self.model.admit(episode)
        return admitted

    def first_reply(
        self,
        expected: str | None,
        coroutine: Coroutine[Any, Any, dict[str, Any]],
        *,
        replay: dict[str, Any] | None,
        lease_to: float | None,
    ) -> dict[str, Any] | None:
        """``self.call``, where an accepted call arms the lease to ``lease_to`` (if given) and a
        repeated one must return the recorded ``replay``: the reply when it is a first."""
        reply = self.call(expected, coroutine)
        if reply is None:
            return None
        if lease_to is not None:
            self.model.arm(lease_to)
        if replay is not None:
            assert reply == replay
            return None
        return reply

    def _stop_retired_turns(self, episodes: tuple[EnvironmentEpisode, ...]) -> None:
        for turn in [*self.turns, *self.generations]:
            if any(
                turn.episode.rollout_id == r.rollout_id and turn.episode.attempt <= r.attempt
                for r in episodes
            ):
                turn.release.set()

    def open_call(self, pick: int, *, seconds: float) -> tuple[str, float, str | None]:
        """Settle, then the id a checkpoint call names, its deadline ``seconds`` from now, and
        the refusal it gets if the id is finished."""
        self.settle()
        checkpoint_id = self.choose_id(pick)
        finished = checkpoint_id in self.model.finished
        return checkpoint_id, self.clock.now() + seconds, "stale_checkpoint" if finished else None

    def cleanup_call(self, pick: int, *, late: bool) -> tuple[str, float, str | None]:
        """Retire and forget: the id, a deadline (passed when ``late``), the predicted refusal."""
        checkpoint_id, deadline, _ = self.open_call(pick, seconds=-1 if late else 60)
        return checkpoint_id, deadline, self.model.cleanup_error(checkpoint_id, late)

    # ------------------------------------------------------------------ rules

    @rule(rollout=ROLLOUTS, attempt=ATTEMPTS)
    def run_turn(self, rollout: str, attempt: int) -> None:
        """One complete turn: admitted, state advanced, parked."""
        episode = EnvironmentEpisode(rollout, attempt)

        async def turn() -> EnvironmentEpisode:
            async with self.core.admit(episode):
                state = self.hooks.states.get(episode, {"turn": 0})
                self.hooks.put(episode, state["turn"] + 1)
            return episode  # not None: admit() returns None only when refused

        if self.admit("run_turn", episode, turn()) is None:
            return
        mark = self.core.fence.mark(rollout)
        assert mark is None or attempt > mark, "a retired attempt was admitted"
        self.model.states[episode] = self.model.states.get(episode, 0) + 1

    @rule(rollout=ROLLOUTS, attempt=ATTEMPTS)
    def start_turn(self, rollout: str, attempt: int) -> None:
        """Admit a call and keep it in flight (at most three at a time)."""
        if len(self.turns) >= 3:
            return
        episode = EnvironmentEpisode(rollout, attempt)
        turn = self.admit("start_turn", episode, Turn.start(self.core, episode))
        if turn is None:
            return
        self.turns.append(turn)
        self.model.in_flight.append(episode)

    @rule(index=st.integers(min_value=0, max_value=2))
    def finish_turn(self, index: int) -> None:
        """An in-flight call reaches its boundary."""
        if not self.turns:
            return
        turn = self.turns.pop(index % len(self.turns))
        self.run(turn.finish())
        self.model.in_flight.remove(turn.episode)

    @rule(pick=PICKS)
    def prepare(self, pick: int) -> None:
        checkpoint_id, deadline, expected = self.open_call(pick, seconds=10)
        model = self.model
        replay = None
        if expected is None and model.phase != "idle":
            if checkpoint_id != model.open_id:
                expected = "checkpoint_conflict"
            elif model.prepare_reply is not None:
                replay = model.prepare_reply  # prepared, or committed since
            elif model.phase != "preparing":
                expected = "invalid_phase"
        started = self.clock.now()
        reply = self.first_reply(
            expected,
            self.core.prepare(checkpoint_id, deadline_ts=deadline),
            replay=replay,
            lease_to=deadline,
        )
        if reply is None:
            return
        model.phase, model.open_id = "preparing", checkpoint_id
        self._collect_refused()
        if model.in_flight:
            assert reply["phase"] == "preparing"
            assert reply["report"]["blockers"] == sorted({e.capture_key for e in model.in_flight})
            assert self.clock.now() == deadline  # waited until the deadline
        else:
            assert reply["phase"] == "prepared"
            model.phase = "prepared"
            model.prepare_reply = reply
            refuse_at = ModelCalls(self.policy).refuse_at(started, deadline)
            # Ready once the last generation was refused (or at once, with none running).
            assert self.clock.now() in (started, refuse_at)

    def _collect_refused(self) -> None:
        """The policy refused every generation still running: they end, having recorded nothing."""
        model = self.model
        if self.policy is ModelCallPolicy.WAIT:
            return
        refused = [g for g in self.generations if g.episode in model.generating]
        for generation in refused:
            assert generation.task is not None
            try:
                self.run(_join(generation.task))
            except ParticipantError as error:
                assert is_refused_call(error), error
            else:
                raise AssertionError(f"{generation.episode} was not refused")
            self.generations.remove(generation)
            model.in_flight.remove(generation.episode)
            model.generating.remove(generation.episode)
            model.refused += 1
        event(f"prepare refused {len(refused)} generation(s) under {self.policy}")

    @rule(rollout=ROLLOUTS, attempt=ATTEMPTS)
    def start_generation(self, rollout: str, attempt: int) -> None:
        """Admit a model call and leave it generating (at most three at a time)."""
        if len(self.generations) >= 3:
            return
        episode = EnvironmentEpisode(rollout, attempt)
        generation = self.admit(
            "start_generation", episode, Generation.start(self.core, self.hooks, episode)
        )
        if generation is None:
            return
        self.generations.append(generation)
        self.model.in_flight.append(episode)
        self.model.generating.append(episode)

    @precondition(lambda self: bool(self.generations) and self.model.phase == "idle")
    @rule()
    def prepare_while_generating(self) -> None:
        """A new checkpoint finds generations running (the case the policy is for)."""
        self.prepare(pick=0)

    @rule(index=st.integers(min_value=0, max_value=2))
    def finish_generation(self, index: int) -> None:
        """A generation delivers: its turn is recorded, if its attempt may still act."""
        if not self.generations:
            return
        generation = self.generations.pop(index % len(self.generations))
        generation.release.set()
        assert generation.task is not None
        self.run(_join(generation.task))
        model = self.model
        model.in_flight.remove(generation.episode)
        model.generating.remove(generation.episode)
        if model.current(generation.episode):
            model.states[generation.episode] = model.states.get(generation.episode, 0) + 1

    @rule(pick=PICKS)
    def renew(self, pick: int) -> None:
        checkpoint_id, deadline, expected = self.open_call(pick, seconds=20)
        model = self.model
        if expected is None and model.phase == "idle":
            expected = "invalid_phase"
        elif expected is None and checkpoint_id != model.open_id:
            expected = "checkpoint_conflict"
        reply = self.call(expected, self.core.renew(checkpoint_id, deadline_ts=deadline))
        if reply is not None:
            model.arm(deadline)
            assert reply == {"lease_expires_at": model.lease}

    @rule(pick=PICKS, same_dir=st.booleans())
    def commit(self, pick: int, same_dir: bool) -> None:
        checkpoint_id, deadline, expected = self.open_call(pick, seconds=30)
        model = self.model
        if same_dir and model.write is not None:
            directory = model.write[1]
        else:
            directory = str(self.root / f"d{len(list(self.root.iterdir()))}-{self.minted}")
        replay = None
        if expected is None:
            if model.write is not None and model.write[0] == checkpoint_id:
                if model.write[1] != directory:
                    expected = "checkpoint_conflict"
                else:
                    replay = model.write[2]
            elif model.open_id is None:
                expected = "invalid_phase"
            elif checkpoint_id != model.open_id:
                expected = "checkpoint_conflict"
            elif model.phase != "prepared":
                expected = "invalid_phase"
        reply = self.first_reply(
            expected,
            self.core.commit(
                checkpoint_id, deadline_ts=deadline, checkpoint_dir=directory, episode_ids=None
            ),
            replay=replay,
            lease_to=deadline,
        )
        if reply is None:
            return
        # Only attempts that may still act are exported.
        exported = {e: turn for e, turn in model.states.items() if model.current(e)}
        records = [store.to_record(e, {"turn": turn}) for e, turn in sorted(exported.items())]
        assert reply["episode_ids"] == sorted(e.capture_key for e in exported)
        model.phase = "committed"
        model.write = (checkpoint_id, directory, reply)
        self.published.append((Path(directory), checkpoint_id, records))

    @precondition(lambda self: self.model.phase == "idle" and not self.model.in_flight)
    @rule()
    def publish_a_checkpoint(self) -> None:
        """prepare, commit and resume under a new id, so restores have commits to read."""
        self.prepare(pick=0)
        assert self.model.phase == "prepared"
        self.commit(pick=1, same_dir=False)
        assert self.model.phase == "committed"
        self.resume(pick=1)

    @rule(pick=PICKS)
    def resume(self, pick: int) -> None:
        self.settle()
        model = self.model
        checkpoint_id = self.choose_id(pick)
        expected = None
        idempotent = True
        if checkpoint_id in model.finished:
            pass
        elif model.phase == "idle":
            model.finish(checkpoint_id)
        elif checkpoint_id != model.open_id:
            expected = "checkpoint_conflict"
        else:
            idempotent = False
        reply = self.call(expected, self.core.resume(checkpoint_id, deadline_ts=self.clock.now()))
        if reply is None:
            return
        assert reply == {"phase": "idle", "idempotent": idempotent}
        if not idempotent:
            model.abort()
        assert self.hooks.admission_open == (model.phase == "idle")

    @rule(pick=PICKS, rollout=ROLLOUTS, attempt=ATTEMPTS, late=LATE)
    def retire(self, pick: int, rollout: str, attempt: int, late: bool) -> None:
        checkpoint_id, deadline, expected = self.cleanup_call(pick, late=late)
        model = self.model
        episode = EnvironmentEpisode(rollout, attempt)
        reply = self.call(
            expected, self.core.retire(checkpoint_id, deadline_ts=deadline, episode_ids=[episode])
        )
        if reply is None:
            return
        assert reply == {"retired": [episode.capture_key]}
        model.retire(episode)
        if model.phase == "restored":
            model.arm(deadline)
        self._finish_stopped_turns()

    def _finish_stopped_turns(self) -> None:
        """Collect the in-flight turns a retire stopped (their model entries are gone)."""
        stopped = [turn for turn in self.turns if turn.episode not in self.model.in_flight]
        for turn in stopped:
            self.run(turn.finish())
            self.turns.remove(turn)
        for generation in [g for g in self.generations if g.episode not in self.model.in_flight]:
            assert generation.task is not None
            # Released by the retire; a retired one records nothing.
            self.run(_join(generation.task))
            self.generations.remove(generation)

    @rule(pick=PICKS, rollout=ROLLOUTS, late=LATE)
    def forget(self, pick: int, rollout: str, late: bool) -> None:
        checkpoint_id, deadline, expected = self.cleanup_call(pick, late=late)
        model = self.model
        reply = self.call(
            expected, self.core.forget(checkpoint_id, deadline_ts=deadline, rollout_ids=[rollout])
        )
        if reply is None:
            return
        assert reply == {"forgotten": [rollout]}
        model.marks.pop(rollout, None)
        if rollout not in model.live_rollouts():
            # A rollout still holding state keeps its attempt current.
            model.latest.pop(rollout, None)
        if model.phase == "restored":
            model.arm(deadline)

    @rule(seconds=st.sampled_from([1.0, 30.0, 120.0]))
    def advance_clock(self, seconds: float) -> None:
        """Time passes; a lease may run out (seen by the next call)."""
        self.clock.advance(seconds)

    @rule()
    def restore_into_a_fresh_process(self) -> None:
        """The process dies; a fresh one restores the last published commit."""
        if not self.published:
            return
        event("restore into a fresh process")
        directory, source_id, records = self.published[-1]
        for turn in self.turns:
            self.run(turn.finish())
        self.turns.clear()
        for generation in self.generations:  # the old process: whatever they record is lost
            generation.release.set()
            assert generation.task is not None
            self.run(_join(generation.task))
        self.generations.clear()
        self._new_core()
        self.model = Model()
        saved = [store.from_record(record) for record in records]
        scope = [episode for episode, _ in saved]
        checkpoint_id = self.mint("rst")
        deadline = self.clock.now() + 30
        reply = self.run(
            self.core.restore(
                checkpoint_id,
                deadline_ts=deadline,
                checkpoint_dir=str(directory),
                episode_ids=scope,
            )
        )
        assert reply["source_checkpoint_id"] == source_id
        assert reply["restored"] == sorted(e.next_attempt().capture_key for e in scope)
        model = self.model
        model.phase, model.open_id = "restored", checkpoint_id
        model.arm(deadline)
        model.restore = ((str(directory), tuple(sorted(e.capture_key for e in scope))), reply)
        for episode, state in saved:
            model.states[episode.next_attempt()] = state["turn"]
            model.latest[episode.rollout_id] = episode.attempt + 1
        assert {e: s["turn"] for e, s in self.hooks.states.items()} == model.states

    @rule(pick=PICKS, chosen=st.lists(st.integers(min_value=0, max_value=11), max_size=3))
    def restore_here(self, pick: int, chosen: list[int]) -> None:
        """This same (used) process restores the last published commit, or a part of it."""
        if not self.published:
            return
        checkpoint_id, deadline, expected = self.open_call(pick, seconds=30)
        model = self.model
        directory, source_id, records = self.published[-1]
        saved = dict(store.from_record(record) for record in records)
        candidates = [*sorted(saved), EnvironmentEpisode("r3", 1)]  # r3-a1: perhaps no record
        picked: dict[str, EnvironmentEpisode] = {}
        for index in chosen:  # at most one attempt per rollout, as a coordinator sends
            episode = candidates[index % len(candidates)]
            picked.setdefault(episode.rollout_id, episode)
        scope = sorted(picked.values())
        args = (str(directory), tuple(sorted(e.capture_key for e in scope)))
        replay = None
        if expected is None and model.phase != "idle":
            if checkpoint_id != model.open_id:
                expected = "checkpoint_conflict"
            elif model.restore is None:
                expected = "invalid_phase"
            elif model.restore[0] != args:
                expected = "checkpoint_conflict"
            else:
                replay = model.restore[1]
        elif expected is None and any(model.holds_newer(e) for e in scope):
            expected = "stale_attempt"
        reply = self.first_reply(
            expected,
            self.core.restore(
                checkpoint_id, deadline_ts=deadline, checkpoint_dir=args[0], episode_ids=scope
            ),
            replay=replay,
            lease_to=None,  # a first restore arms it below; a replayed one leaves it
        )
        if reply is None:
            return
        # Older attempts of restored rollouts this process holds are retired first.
        for episode in [e for e in scope if e.rollout_id in model.live_rollouts()]:
            model.retire(episode)
        self._finish_stopped_turns()
        installed = [e for e in scope if e in saved]
        for episode in installed:
            model.states[episode.next_attempt()] = saved[episode]["turn"]
        for episode in scope:
            rollout = episode.rollout_id
            model.latest[rollout] = max(model.latest.get(rollout, 0), episode.attempt + 1)
        if any(not model.current(e.next_attempt()) for e in installed):
            event("restore installs an attempt retired or superseded here (inert)")
        assert reply["source_checkpoint_id"] == source_id
        assert reply["restored"] == sorted(e.next_attempt().capture_key for e in installed)
        model.phase, model.open_id = "restored", checkpoint_id
        model.arm(deadline)
        model.restore = (args, reply)

    @precondition(lambda self: bool(self.published) and self.model.phase == "idle")
    @rule()
    def restore_after_a_failed_restore(self) -> None:
        """Gym's all-or-nothing cleanup (the next attempts retired here), then a restore of
        the same checkpoint under a new id: installed, and those attempts stay refused."""
        _, _, records = self.published[-1]
        saved = [store.from_record(record)[0] for record in records]
        for episode in saved:
            self.retire(pick=0, rollout=episode.rollout_id, attempt=episode.attempt + 1, late=False)
        self.restore_here(pick=0, chosen=list(range(len(saved))))

    # ------------------------------------------------------------- invariants

    @invariant()
    def phase_is_a_table_state_and_matches_the_model(self) -> None:
        assert self.core.phase in PARTICIPANT_PHASES.states
        assert self.core.phase == self.model.phase
        assert self.core.checkpoint_id == self.model.open_id
        assert self.core.lease_expires_at == self.model.lease

    @invariant()
    def marks_and_fences_match_the_model(self) -> None:
        for rollout in ("r1", "r2", "r3"):
            assert self.core.fence.mark(rollout) == self.model.marks.get(rollout)
        assert list(self.core.finished) == list(self.model.finished)

    @invariant()
    def no_retired_attempt_is_in_flight(self) -> None:
        for episode in self.core.fence.in_flight():
            mark = self.core.fence.mark(episode.rollout_id)
            assert mark is None or episode.attempt > mark
        assert sorted(self.core.fence.in_flight()) == sorted(set(self.model.in_flight))

    @invariant()
    def state_matches_the_model(self) -> None:
        assert {e: s["turn"] for e, s in self.hooks.states.items()} == self.model.states

    @invariant()
    def refused_generations_match_the_model(self) -> None:
        assert self.core.model_calls is not None
        assert self.core.model_calls.refused == self.model.refused
        assert sorted(self.core.model_calls.generating()) == sorted(self.model.generating)

    @invariant()
    def published_commits_reread_intact(self) -> None:
        for directory, checkpoint_id, records in self.published[-3:]:
            manifest = store.read_manifest(
                directory, kind="agent", instance="agent", checkpoint_id=checkpoint_id
            )
            assert list(store.iter_records(directory, manifest)) == records


def _runs(max_examples: int) -> settings:
    """Forty steps a run, untimed: a step may wait out a prepare's deadline."""
    return settings(
        max_examples=examples(max_examples),
        stateful_step_count=40,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )


CoreMachine.TestCase.settings = _runs(120)
TestCoreStateful = CoreMachine.TestCase


class ModelCoreMachine(CoreMachine):
    """The same machine on a policy model's core, under a model-call policy drawn per example."""

    @initialize(policy=st.sampled_from(list(ModelCallPolicy)))
    def choose_policy(self, policy: ModelCallPolicy) -> None:
        self.policy = policy
        self._new_core()


ModelCoreMachine.TestCase.settings = _runs(60)
TestModelCoreStateful = ModelCoreMachine.TestCase
