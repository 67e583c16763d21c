"""Stateful property tests of the engine: facade and adapters under faults and crashes.

A ``RuleBasedStateMachine`` drives 2-3 Gym instances (dict-backed ``Deployment``
participants on one ``FakeClock``, an ``InMemoryInventory`` as the ledger)
through random sequences of rollout work, snapshots, injected faults, trainer
failures, crashes with restore, and illegal control calls, and compares every
outcome with a small reference model of which rollouts are live, which
snapshots are published and what each of them holds.

    ENVCKPT_HYPOTHESIS_PROFILE=thorough pytest tests/test_engine_stateful.py

Rules are sync; each example owns an ``asyncio.Runner`` that runs the async
engine calls, and a temporary directory for its snapshots.

The model's one policy choice: a crash restores the newest published snapshot
of the crashed run (falling back to older ones only when a newer one is
corrupt), and once a run restored, the snapshots before it are never restored
again, so a rollback can never continue an attempt a second time.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import shutil
import sys
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

import pytest
import structlog
from hypothesis import HealthCheck, event, settings
from hypothesis import Phase as HypothesisPhase
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from envckpt.clock import FakeClock
from envckpt.coordination.faults import FAULT_KINDS
from envckpt.episodes import EnvironmentEpisode
from envckpt.errors import (
    CoordinationError,
    CorruptCheckpoint,
    GymCheckpointUnavailable,
    IllegalTransition,
    SnapshotNotReady,
)
from envckpt.facade.checkpoint import CheckpointTimeouts, GymEnvironmentCheckpoint
from envckpt.facade.instances import LocalInstance
from envckpt.facade.manifest import MANIFEST_NAME, read_manifest
from envckpt.gym import adapter as gym_adapter
from envckpt.gym.adapter import GymCheckpointAdapter
from envckpt.gym.instance import GymCheckpointInstance
from envckpt.inventory import InMemoryInventory
from envckpt.machines.tables import INSTANCE_LIFECYCLE

from helpers.dict_deployment import Deployment, LoopbackHttp
from helpers.examples import examples
from helpers.facade_world import LiveCut
from model_check.oracle import operation_legal
from model_check.plant import plant_commit_from_preparing

settings.register_profile(
    "ci",  # make test runs a quarter of the examples; make verify runs "thorough"
    max_examples=examples(75),
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "thorough",
    max_examples=500,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
PROFILE_NAME = os.environ.get("ENVCKPT_HYPOTHESIS_PROFILE", "ci")
PROFILE = settings.get_profile(PROFILE_NAME)
# The thorough profile takes minutes; lift the suite's default per-test timeout for it.
pytestmark = [pytest.mark.timeout(3600)] if PROFILE_NAME == "thorough" else []

T = TypeVar("T")

SERVERS = ("policy", "agent", "tools")
RESTART_ONLY_KINDS = (
    ("policy", "model", "export_restore"),
    ("agent", "agent", "export_restore"),
    ("tools", "resources", "restart_only"),
)
# Routes a snapshot may touch (status only on the first discovery of a process).
SNAPSHOT_ROUTES = ("status", "retire", "prepare", "commit", "renew", "resume")
RESTORE_ROUTES = ("status", "restore", "retire", "resume")
# Faults whose firing must make the operation fail; resume is retried instead
# and a failed renew only logs (the lease still holds).
DISRUPTING = frozenset({"unreachable", "slow", "drop_reply", "error", "crash_before_publish"})
FORGIVING_ROUTES = frozenset({"resume", "renew"})
RENEW_SECONDS = 60.0
RESUME_ATTEMPTS = 3
TIMEOUTS = CheckpointTimeouts(
    prepare_seconds=10, renew_interval_seconds=RENEW_SECONDS, resume_attempts=RESUME_ATTEMPTS
)
HANG_SECONDS = 20.0
# Every lifecycle trigger the adapter exposes (discover is a no-op once done).
ADAPTER_TRIGGERS = ("prepare", "commit", "renew", "resume", "retire", "forget", "restore")


def _illegal_triggers(state: str) -> list[str]:
    """The adapter triggers the reference model forbids in lifecycle ``state``."""
    return [t for t in ADAPTER_TRIGGERS if not operation_legal(str(state), t)]


def _late_deliveries() -> set[asyncio.Task[Any]]:
    # Only these: a deployment may run long-lived tasks (HTTP servers) on the loop.
    return {
        task
        for task in asyncio.all_tasks()
        if getattr(task.get_coro(), "__qualname__", "") == "InProcessTransport._deliver"
    }


async def _drain() -> None:
    """Let the late requests of ``slow`` faults land within the step that sent them."""
    late = _late_deliveries()
    while late:
        _, pending = await asyncio.wait(late, timeout=HANG_SECONDS)
        assert not pending, f"late requests still running after {HANG_SECONDS} s: {pending}"
        late = _late_deliveries()


class TrainerFailure(Exception):
    """The trainer's own code raised inside a snapshot or restored context."""


@dataclass(frozen=True)
class FaultSpec:
    """One fault to inject on one instance's server and route."""

    instance: int
    kind: str
    server: str
    route: str
    times: int = 1


@st.composite
def snapshot_faults(draw: st.DrawFn) -> FaultSpec:
    """A fault for the next snapshot; resume faults may outlast the retries."""
    kind = draw(st.sampled_from(FAULT_KINDS))
    if kind in ("crash_before_publish", "corrupt_records"):
        route = "commit"
    else:
        route = draw(st.sampled_from(SNAPSHOT_ROUTES))
    times = draw(st.sampled_from((1, RESUME_ATTEMPTS))) if route == "resume" else 1
    return FaultSpec(
        instance=draw(st.integers(0, 2)),
        kind=kind,
        server=draw(st.sampled_from(SERVERS)),
        route=route,
        times=times,
    )


restore_faults = st.builds(
    FaultSpec,
    instance=st.integers(0, 2),
    kind=st.sampled_from(("unreachable", "slow", "drop_reply", "error")),
    server=st.sampled_from(SERVERS),
    route=st.sampled_from(RESTORE_ROUTES),
)


@dataclass(frozen=True)
class Rollout:
    """The model's view of one unfinished rollout: its current attempt and turn."""

    rollout_id: str
    instance: GymCheckpointInstance
    attempt: int
    turn: int
    staging: tuple[str, ...]

    @property
    def episode(self) -> EnvironmentEpisode:
        return EnvironmentEpisode(self.rollout_id, self.attempt)


@dataclass
class Published:
    """A snapshot the trainer published, and what the model says it holds."""

    path: Path
    checkpoint_id: str
    exported: dict[str, Rollout]
    restarts: dict[str, Rollout]
    corrupt: bool


@dataclass
class Outcome:
    """What one snapshot or restore attempt did: the error it raised and the faults that fired."""

    error: BaseException | None = None
    fired: list[tuple[str, str, str]] = field(default_factory=list)

    def disrupted(self) -> bool:
        return any(
            kind in DISRUPTING and route not in FORGIVING_ROUTES for kind, _, route in self.fired
        )


class EngineMachine(RuleBasedStateMachine):
    """Random rollout work, snapshots, faults, crashes and illegal calls against a model."""

    def __init__(self) -> None:
        super().__init__()
        self.runner = asyncio.Runner()
        self.root = Path(tempfile.mkdtemp(prefix="envckpt-stateful-"))
        self.logs = structlog.testing.capture_logs()
        self.logs.__enter__()
        self.clock = FakeClock()
        self.instances: list[GymCheckpointInstance] = []
        self.restart_only: GymCheckpointInstance | None = None
        self.deployments: dict[GymCheckpointInstance, Deployment] = {}
        self.adapters: dict[GymCheckpointInstance, GymCheckpointAdapter] = {}
        self.inventory = InMemoryInventory()
        self.facade: GymEnvironmentCheckpoint | None = None
        # Reference model.
        self.live: dict[str, Rollout] = {}
        self.pending_drops: list[Rollout] = []
        self.retired_drops: list[Rollout] = []
        self.published: list[Published] = []
        self.failed_dirs: list[Path] = []
        # (rollout_id, saved attempt, source checkpoint id) of every restore.
        self.continued: list[tuple[str, int, str]] = []
        # Attempts that restart from their task: reported restarts, drops, crash losses.
        self.restarted: set[tuple[str, int]] = set()
        # Instances whose last resume failed every retry (the facade resumes them next).
        self.unresumed: set[GymCheckpointInstance] = set()
        self.ids = itertools.count()
        self.dirs = itertools.count()

    def teardown(self) -> None:
        """Close the event loop, stop capturing logs and delete the snapshot root."""
        try:
            self.runner.run(LoopbackHttp.close_all())
            self.runner.close()
        finally:
            self.logs.__exit__(None, None, None)
            shutil.rmtree(self.root, ignore_errors=True)

    # ------------------------------------------------------------ plumbing

    def run(self, factory: Callable[[], Awaitable[T]]) -> T:
        async def main() -> T:
            # Time is fake, so a call that needs real seconds is a hang: fail it.
            try:
                return await asyncio.wait_for(factory(), HANG_SECONDS)
            finally:
                await _drain()

        return self.runner.run(main())

    def _build(self, deployments: dict[GymCheckpointInstance, Deployment]) -> None:
        self.deployments = deployments
        self.adapters = {
            instance: GymCheckpointAdapter(instance=instance, coordination=d.coordinator)
            for instance, d in deployments.items()
        }
        self.facade = GymEnvironmentCheckpoint(
            [LocalInstance(adapter) for adapter in self.adapters.values()],
            self.inventory,
            clock=self.clock,
            timeouts=TIMEOUTS,
        )
        self.unresumed = set()

    def _fresh_processes(self, live: dict[str, Rollout]) -> None:
        """Replace every process by a fresh one; the ledger holds ``live``."""
        self.inventory = InMemoryInventory()
        for rollout in live.values():
            self.inventory.add(rollout.instance.instance_id, rollout.episode)
        self._build({i: d.fresh() for i, d in self.deployments.items()})

    def _cores(self) -> list[Any]:
        return [core for d in self.deployments.values() for core in d.cores.values()]

    def _phases(self) -> list[str]:
        return [core.phase for core in self._cores()]

    def _requests(self) -> int:
        return sum(d.transport.requests for d in self.deployments.values())

    def _hook_states(self) -> dict[tuple[GymCheckpointInstance, str], dict[Any, Any]]:
        return {
            (i, name): {e: dict(s) for e, s in hooks.state.items()}
            for i, d in self.deployments.items()
            for name, hooks in d.hooks.items()
        }

    def _inject(self, fault: FaultSpec) -> None:
        instance = self.instances[fault.instance % len(self.instances)]
        self.deployments[instance].faults.add(
            fault.kind, server=fault.server, route=fault.route, times=fault.times
        )

    def _collect_fired(self) -> list[tuple[str, str, str]]:
        fired = []
        for d in self.deployments.values():
            fired.extend(d.faults.fired)
            d.faults.fired.clear()
            d.faults.clear()
        return fired

    def _settle(self, outcome: Outcome) -> None:
        """Every participant is idle again; only a failed resume may need the lease."""
        resume_failed = any(
            route == "resume" and kind in DISRUPTING for kind, _, route in outcome.fired
        )
        self.unresumed = {
            instance
            for instance, adapter in self.adapters.items()
            if INSTANCE_LIFECYCLE.destination(adapter.state, "resume") is not None
        }
        # An instance still holding a checkpoint open in the coordinator's view
        # means every retry of its resume failed.
        assert resume_failed or not self.unresumed, (self.unresumed, outcome.fired)
        stuck = [core for core in self._cores() if core.phase != "idle"]
        if not stuck:
            return
        assert resume_failed, (
            f"participants left open without a resume fault: {[c.server_name for c in stuck]}"
        )
        lease = max(core.lease_expires_at for core in stuck)
        self.clock.advance(lease - self.clock.now() + 1)
        for core in stuck:
            status = self.run(core.status)
            assert status["phase"] == "idle", (core.server_name, status)

    def _sync_drops(self) -> None:
        """Drops the inventory no longer lists were retired everywhere."""
        still = []
        for rollout in self.pending_drops:
            if rollout.episode in self.inventory.dropped_attempts(rollout.instance.instance_id):
                still.append(rollout)
            else:
                self.retired_drops.append(rollout)
        self.pending_drops = still

    # ----------------------------------------------------------------- rules

    @initialize(count=st.integers(2, 3), with_restart_only=st.booleans())
    def build(self, count: int, with_restart_only: bool) -> None:
        """Build 2-3 instances, the last one optionally with a restart-only participant."""
        self.instances = [GymCheckpointInstance("shard", i) for i in range(count)]
        deployments = {}
        for instance in self.instances:
            deployments[instance] = Deployment(clock=self.clock)
        if with_restart_only:
            self.restart_only = self.instances[-1]
            deployments[self.restart_only] = Deployment(clock=self.clock, kinds=RESTART_ONLY_KINDS)
        self._build(deployments)

    @precondition(lambda self: len(self.live) < 6)
    @rule(data=st.data())
    def start_rollout(self, data: st.DataObject) -> None:
        """Start a new rollout on a random instance: run its first turn and dispatch it."""
        instance = data.draw(st.sampled_from(self.instances))
        rollout_id = f"r{next(self.ids)}"
        episode = EnvironmentEpisode(rollout_id, 0)
        self.run(lambda: self.deployments[instance].start(episode, turn=1))
        self.inventory.add(instance.instance_id, episode)
        self.live[rollout_id] = Rollout(rollout_id, instance, 0, 1, (f"{episode.capture_key}/t0",))

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def advance_turn(self, data: st.DataObject) -> None:
        """Run one more turn of a live rollout in every participant of its instance."""
        rollout = self.live[data.draw(st.sampled_from(sorted(self.live)))]
        episode = rollout.episode
        deployment = self.deployments[rollout.instance]

        async def turn() -> None:
            for name, hooks in deployment.hooks.items():
                async with deployment.cores[name].admit(episode):
                    state = hooks.state[episode]
                    assert state["turn"] == rollout.turn
                    state["turn"] = rollout.turn + 1
                    if hooks.kind == "model":
                        state["staging"] = [
                            *state["staging"],
                            f"{episode.capture_key}/t{rollout.turn}",
                        ]

        self.run(turn)
        self.live[rollout.rollout_id] = replace(
            rollout,
            turn=rollout.turn + 1,
            staging=(*rollout.staging, f"{episode.capture_key}/t{rollout.turn}"),
        )

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def finish_rollout(self, data: st.DataObject) -> None:
        """Run a rollout's last turn, free its state everywhere and drop it from the ledger."""
        rollout = self.live.pop(data.draw(st.sampled_from(sorted(self.live))))
        episode = rollout.episode
        deployment = self.deployments[rollout.instance]

        async def last_turn() -> None:
            for name, hooks in deployment.hooks.items():
                async with deployment.cores[name].admit(episode):
                    del hooks.state[episode]

        self.run(last_turn)
        self.inventory.finish(rollout.instance.instance_id, episode)

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def drop_rollout(self, data: st.DataObject) -> None:
        """The trainer gives up on a rollout's attempt; the next snapshot must retire it."""
        rollout = self.live.pop(data.draw(st.sampled_from(sorted(self.live))))
        self.inventory.drop(rollout.instance.instance_id, rollout.episode)
        self.pending_drops.append(rollout)
        self.restarted.add((rollout.rollout_id, rollout.attempt))

    @rule(fault=snapshot_faults())
    def inject_fault(self, fault: FaultSpec) -> None:
        """Arm a fault on one server and route of one instance for the next snapshot."""
        self._inject(fault)

    @rule(
        trainer_raise=st.sampled_from((None, "before_cut", "after_cut")),
        nested=st.booleans(),
        renew=st.booleans(),
    )
    def snapshot(self, trainer_raise: str | None, nested: bool, renew: bool) -> None:
        """Take a snapshot into a new directory; publish it only if everything succeeded."""
        self._snapshot(hold=None, trainer_raise=trainer_raise, nested=nested, renew=renew)

    @rule(fault=snapshot_faults(), trainer_raise=st.sampled_from((None, None, "after_cut")))
    def snapshot_under_fault(self, fault: FaultSpec, trainer_raise: str | None) -> None:
        """Arm one fault and take a snapshot at once: it fails, or publishes what it should."""
        self._inject(fault)
        self._snapshot(hold=None, trainer_raise=trainer_raise, nested=False, renew=True)

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def snapshot_with_turn_in_flight(self, data: st.DataObject) -> None:
        """A turn in flight on an agent blocks prepare: SnapshotNotReady, nothing kept."""
        rollout = self.live[data.draw(st.sampled_from(sorted(self.live)))]
        self._snapshot(hold=rollout, trainer_raise=None, nested=False, renew=False)

    def _snapshot(
        self, *, hold: Rollout | None, trainer_raise: str | None, nested: bool, renew: bool
    ) -> None:
        """One snapshot as the trainer takes it, then its outcome checked against the model."""
        assert self.facade is not None
        facade = self.facade
        path = self.root / f"snap-{next(self.dirs)}"
        expected_exported = {
            rid: r for rid, r in self.live.items() if r.instance != self.restart_only
        }
        expected_restarts = {
            rid: r for rid, r in self.live.items() if r.instance == self.restart_only
        }
        outcome = Outcome()
        published: Published | None = None

        async def take() -> None:
            nonlocal published
            async with facade.snapshot(path) as snap:
                assert snap is not None
                if renew:
                    await self._renew_once()
                if nested:
                    before = self._requests()
                    with pytest.raises(IllegalTransition):
                        async with facade.snapshot(self.root / f"snap-{next(self.dirs)}"):
                            pytest.fail("a second snapshot must not open")
                    assert self._requests() == before
                if trainer_raise == "before_cut":
                    raise TrainerFailure("before the cut")
                await snap.check_against_cut(LiveCut())
                with pytest.raises(IllegalTransition):
                    await snap.check_against_cut(LiveCut())
                if trainer_raise == "after_cut":
                    raise TrainerFailure("after the cut")
                # Publish (rl-recovery step 5) before leaving the context.
                published = Published(
                    path=path,
                    checkpoint_id=snap.checkpoint_id,
                    exported=expected_exported,
                    restarts=expected_restarts,
                    corrupt=False,
                )

        async def held() -> None:
            assert hold is not None
            agent = self.deployments[hold.instance].cores["agent"]
            async with agent.admit(hold.episode):
                await take()

        try:
            self.run(held if hold is not None else take)
        except (GymCheckpointUnavailable, CorruptCheckpoint) as error:
            outcome.error = error
        except TrainerFailure as error:
            assert trainer_raise is not None
            outcome.error = error
        outcome.fired = self._collect_fired()
        event(f"snapshot: {type(outcome.error).__name__ if outcome.error else 'published'}")
        for kind, _, route in outcome.fired:
            event(f"snapshot fault fired: {kind} on {route}")
        self._sync_drops()
        self._check_snapshot_outcome(outcome, hold=hold, trainer_raise=trainer_raise)
        if published is not None:
            published.corrupt = any(kind == "corrupt_records" for kind, _, _ in outcome.fired)
            self._check_published(published)
            self.published.append(published)
            if outcome.error is not None:
                # Only the resume after publishing failed; the snapshot stays valid.
                assert isinstance(outcome.error, GymCheckpointUnavailable), outcome.error
                assert outcome.error.operation == "resume", outcome.error
        else:
            assert outcome.error is not None
            if isinstance(outcome.error, TrainerFailure):
                # The trainer deletes its unpublished directory (rl-recovery step 7).
                shutil.rmtree(path, ignore_errors=True)
            self.failed_dirs.append(path)
        self._settle(outcome)

    async def _renew_once(self) -> None:
        """Let the background renewer run once; every lease it reached moves forward."""
        leases = {id(core): core.lease_expires_at for core in self._cores()}
        self.clock.advance(RENEW_SECONDS)
        for _ in range(100):
            await asyncio.sleep(0)
        refused = {
            (instance, server)
            for instance, d in self.deployments.items()
            for kind, server, route in d.faults.fired
            if route == "renew" and kind != "drop_reply"
        }
        for instance, deployment in self.deployments.items():
            for name, core in deployment.cores.items():
                if (instance, name) not in refused:
                    assert core.lease_expires_at > leases[id(core)], (instance, name)

    def _check_snapshot_outcome(
        self, outcome: Outcome, *, hold: Rollout | None, trainer_raise: str | None
    ) -> None:
        """A snapshot fails iff a hold, a trainer error or a fault says so (or its last resume)."""
        error = outcome.error
        must_fail = hold is not None or trainer_raise is not None or outcome.disrupted()
        if must_fail:
            assert error is not None, f"snapshot succeeded despite {outcome.fired} / hold={hold}"
        elif error is not None:
            # Only a resume that failed every retry may raise, after publishing.
            assert isinstance(error, GymCheckpointUnavailable), error
            assert error.operation == "resume", error
            assert any(
                route == "resume" and kind in DISRUPTING for kind, _, route in outcome.fired
            ), error
        if hold is not None and trainer_raise is None and not outcome.fired:
            assert isinstance(error, SnapshotNotReady), error
            assert set(error.blockers) == {hold.instance.instance_id}
            assert error.blockers[hold.instance.instance_id] == {
                "agent": (hold.episode.capture_key,)
            }

    def _check_published(self, published: Published) -> None:
        """The manifest on disk holds exactly every live rollout or reports it restarted."""
        manifest = read_manifest(published.path)
        assert manifest.checkpoint_id == published.checkpoint_id
        assert set(manifest.instances) == {i.instance_id for i in self.instances}
        for instance in self.instances:
            record = manifest.instances[instance.instance_id]
            assert set(record.episodes) == {
                r.episode for r in published.exported.values() if r.instance == instance
            }
            assert set(record.restarts) == {
                r.episode for r in published.restarts.values() if r.instance == instance
            }
            assert set(record.staging_keys) == {
                key
                for r in published.exported.values()
                if r.instance == instance
                for key in r.staging
            }
        for rollout in published.restarts.values():
            self.restarted.add((rollout.rollout_id, rollout.attempt))

    @rule(
        fault=st.none() | restore_faults,
        raise_inside=st.booleans(),
    )
    def crash_and_restore(self, fault: FaultSpec | None, raise_inside: bool) -> None:
        """Kill every process, then restore the newest published snapshot into fresh ones."""
        candidates = list(reversed(self.published))
        lost = dict(self.live)
        # Snapshots of the crashed run can be restored at most once: a newer run
        # must never roll back onto (and continue again) what it already continued.
        self.published = []
        self.pending_drops = []
        self.retired_drops = []
        restored: Published | None = None
        first = True
        for candidate in candidates:
            while True:
                self._fresh_processes({**candidate.exported, **candidate.restarts})
                attempt_fault = fault if first else None
                attempt_raise = raise_inside and first
                first = False
                result = self._restore(candidate, attempt_fault, attempt_raise)
                if result == "restored":
                    restored = candidate
                    break
                if result == "corrupt":
                    break
            if restored is not None:
                break
        if restored is None:
            # Nothing restorable: every rollout restarts from its task.
            self._fresh_processes({})
            self.live = {}
        else:
            self.live = {
                rid: replace(r, attempt=r.attempt + 1) for rid, r in restored.exported.items()
            }
            # The ledger continues exactly the restored attempts, named by their
            # replacement attempt, and abandons the rest (rl-recovery, restore 3).
            self.inventory.live.clear()
            for rollout in self.live.values():
                self.inventory.add(rollout.instance.instance_id, rollout.episode)
        for rollout in lost.values():
            if rollout.rollout_id not in self.live:
                self.restarted.add((rollout.rollout_id, rollout.attempt))

    def _restore(self, candidate: Published, fault: FaultSpec | None, raise_inside: bool) -> str:
        """One restore attempt: 'restored', 'corrupt' (try an older one) or 'retry'."""
        assert self.facade is not None
        facade = self.facade
        if fault is not None:
            self._inject(fault)
        outcome = Outcome()
        expected = {
            (r.instance.instance_id, rid, r.attempt) for rid, r in candidate.exported.items()
        }
        expected_keys = {key for r in candidate.exported.values() for key in r.staging}
        continued: frozenset[tuple[str, str, int]] = frozenset()

        async def restore() -> None:
            nonlocal continued
            async with facade.restored(candidate.path) as rollouts:
                continued = frozenset(rollouts.continued_attempts)
                assert continued == expected
                assert set(rollouts.staging_keys) == expected_keys
                assert set(self._phases()) <= {"restored"}
                self._check_installed(candidate)
                if raise_inside:
                    raise TrainerFailure("ledger refused the restore")

        try:
            self.run(restore)
        except (GymCheckpointUnavailable, CorruptCheckpoint) as error:
            outcome.error = error
        except TrainerFailure as error:
            assert raise_inside
            outcome.error = error
        outcome.fired = self._collect_fired()
        event(f"restore: {type(outcome.error).__name__ if outcome.error else 'restored'}")
        for kind, _, route in outcome.fired:
            event(f"restore fault fired: {kind} on {route}")
        if outcome.error is None:
            assert not candidate.corrupt, "a snapshot with corrupt records was restored"
            assert not outcome.disrupted(), f"restore succeeded despite {outcome.fired}"
            for _, rollout_id, attempt in continued:
                self.continued.append((rollout_id, attempt, candidate.checkpoint_id))
            self._settle(outcome)
            assert all(a.state == "resumed" for a in self.adapters.values())
            self._check_installed(candidate)
            return "restored"
        # A failed restore is all-or-nothing: nothing installed anywhere.
        assert candidate.corrupt or raise_inside or outcome.disrupted(), outcome.error
        self._settle(outcome)
        installed = {k: v for k, v in self._hook_states().items() if v}
        assert not installed, f"a failed restore left state behind: {installed}"
        if candidate.corrupt and not raise_inside and not outcome.fired:
            assert isinstance(outcome.error, CorruptCheckpoint), outcome.error
            return "corrupt"
        return "retry"

    def _check_installed(self, candidate: Published) -> None:
        """Every participant holds exactly the restored attempts, at the saved turn."""
        for instance, deployment in self.deployments.items():
            mine = {r for r in candidate.exported.values() if r.instance == instance}
            for name, hooks in deployment.hooks.items():
                got = {episode: state["turn"] for episode, state in hooks.state.items()}
                assert got == {r.episode.next_attempt(): r.turn for r in mine}, (name, got)
                if hooks.kind == "model":
                    for rollout in mine:
                        state = hooks.state[rollout.episode.next_attempt()]
                        assert tuple(state["staging"]) == rollout.staging

    @rule(data=st.data())
    def illegal_adapter_call(self, data: st.DataObject) -> None:
        """A refused trigger raises IllegalTransition, sends nothing and changes nothing."""
        instance = data.draw(st.sampled_from(self.instances))
        adapter = self.adapters[instance]
        illegal = _illegal_triggers(adapter.state)
        if not illegal:
            return
        self._expect_refused(adapter, data.draw(st.sampled_from(illegal)))

    def _preparable(self) -> list[Rollout]:
        """Live rollouts on an instance that may prepare (once discovered), no fault armed."""
        if any(d.faults.faults for d in self.deployments.values()):
            return []
        return [
            rollout
            for rollout in self.live.values()
            if self.adapters[rollout.instance].state == "undiscovered"
            or operation_legal(str(self.adapters[rollout.instance].state), "prepare")
        ]

    @precondition(lambda self: self._preparable())
    @rule(data=st.data())
    def illegal_calls_while_preparing(self, data: st.DataObject) -> None:
        """Left preparing by a turn in flight, an instance refuses every call the oracle forbids.

        Between the other rules no instance is ever left preparing (a snapshot
        ends resumed or failed), so this is where ``commit`` from ``preparing``
        is tried: a table row allowing it fails here.
        """
        rollout = data.draw(st.sampled_from(self._preparable()))
        adapter = self.adapters[rollout.instance]
        self.run(adapter.discover)  # a no-op once the first snapshot discovered it
        # The turn stays in flight across steps: entered here, left below.
        turn = self.deployments[rollout.instance].cores["agent"].admit(rollout.episode)
        self.run(turn.__aenter__)
        try:
            checkpoint_id = f"probe-{next(self.ids)}"
            deadline = self.clock.now() + 60
            blocked = self.run(lambda: adapter.prepare(checkpoint_id, deadline_ts=deadline))
            assert blocked.blockers() == {"agent": (rollout.episode.capture_key,)}
            assert adapter.state == "preparing"
            for trigger in data.draw(st.permutations(_illegal_triggers("preparing"))):
                self._expect_refused(adapter, trigger)
            self.run(lambda: adapter.resume(checkpoint_id, deadline_ts=self.clock.now() + 60))
        finally:
            self.run(lambda: turn.__aexit__(None, None, None))
        assert adapter.state == "resumed"

    def _expect_refused(self, adapter: GymCheckpointAdapter, trigger: str) -> None:
        """``trigger`` raises IllegalTransition in the adapter's state, sending nothing."""
        state = adapter.state
        deadline = self.clock.now() + 60
        episode = EnvironmentEpisode("illegal", 0)
        calls: dict[str, Callable[[], Awaitable[Any]]] = {
            "prepare": lambda: adapter.prepare("illegal", deadline_ts=deadline),
            "commit": lambda: adapter.commit(
                "illegal", self.root / "illegal", [episode], deadline_ts=deadline
            ),
            "renew": lambda: adapter.renew("illegal", deadline_ts=deadline),
            "resume": lambda: adapter.resume("illegal", deadline_ts=deadline),
            "retire": lambda: adapter.retire("illegal", [episode], deadline_ts=deadline),
            "forget": lambda: adapter.forget("illegal", ["illegal"], deadline_ts=deadline),
            "restore": lambda: adapter.restore(
                "illegal",
                self.root / "illegal",
                [episode],
                participants=(),
                source_checkpoint_id="illegal",
                deadline_ts=deadline,
            ),
        }
        before = (self._requests(), self._phases(), self._hook_states())
        # Illegal by the reference model (docs/protocol.md), not by the engine's own table.
        accepted = f"{trigger} in {state}: illegal by the reference model, yet the engine"
        try:
            self.run(calls[trigger])
        except IllegalTransition as refused:
            assert (refused.trigger, refused.state) == (trigger, state)
        except Exception as error:
            raise AssertionError(f"{accepted} sent it and raised {error!r}") from error
        else:
            raise AssertionError(f"{accepted} carried it out")
        assert adapter.state == state
        assert (self._requests(), self._phases(), self._hook_states()) == before

    @precondition(
        lambda self: (
            self.published
            and any(a.state not in ("undiscovered", "discovered") for a in self.adapters.values())
        )
    )
    @rule()
    def restore_into_running_deployment(self) -> None:
        """Restoring when any process already ran is refused before anything is sent."""
        assert self.facade is not None
        facade = self.facade
        path = self.published[-1].path
        before = (self._requests(), self._phases(), self._hook_states())
        states = {i: a.state for i, a in self.adapters.items()}

        async def restore() -> None:
            async with facade.restored(path):
                pytest.fail("a used deployment must not restore")

        with pytest.raises(IllegalTransition):
            self.run(restore)
        assert (self._requests(), self._phases(), self._hook_states()) == before
        assert {i: a.state for i, a in self.adapters.items()} == states

    @precondition(
        lambda self: self.published and not any(d.faults.faults for d in self.deployments.values())
    )
    @rule(data=st.data())
    def stale_prepare_is_fenced(self, data: st.DataObject) -> None:
        """A late prepare naming a finished snapshot's id is refused and changes nothing."""
        published = data.draw(st.sampled_from(self.published))
        instance = data.draw(st.sampled_from(self.instances))
        deployment = self.deployments[instance]
        participants = self.adapters[instance].participants
        before = (self._phases(), self._hook_states())
        with pytest.raises(CoordinationError) as info:
            self.run(
                lambda: deployment.coordinator.prepare(
                    participants, published.checkpoint_id, deadline_ts=self.clock.now() + 60
                )
            )
        assert info.value.failures
        assert all(t.startswith("stale_checkpoint") for t in info.value.failures.values())
        assert (self._phases(), self._hook_states()) == before
        assert not any(hooks.admission_closed for hooks in deployment.hooks.values())

    @precondition(
        lambda self: (
            self.retired_drops
            and all(a.state in ("discovered", "resumed") for a in self.adapters.values())
        )
    )
    @rule(data=st.data())
    def forget_retired_rollout(self, data: st.DataObject) -> None:
        """Forgetting a retired rollout clears its retire marks on its instance."""
        assert self.facade is not None
        facade = self.facade
        rollout = data.draw(st.sampled_from(self.retired_drops))
        self.run(lambda: facade.forget({rollout.instance.instance_id: [rollout.rollout_id]}))
        self.retired_drops = [r for r in self.retired_drops if r.rollout_id != rollout.rollout_id]
        for core in self.deployments[rollout.instance].cores.values():
            assert core.fence.mark(rollout.rollout_id) is None

    # ------------------------------------------------------------ invariants

    @invariant()
    def adapter_states_are_lifecycle_states(self) -> None:
        """Every instance adapter is in one of the lifecycle table's states."""
        for adapter in self.adapters.values():
            assert adapter.state in INSTANCE_LIFECYCLE.states

    @invariant()
    def participants_are_idle(self) -> None:
        """Between steps no participant holds a checkpoint open."""
        assert set(self._phases()) <= {"idle"}

    @invariant()
    def no_attempt_continued_twice(self) -> None:
        """Each (rollout, attempt) is continued by at most one restore, from one snapshot."""
        seen: dict[tuple[str, int], str] = {}
        for rollout_id, attempt, source in self.continued:
            assert (rollout_id, attempt) not in seen, (rollout_id, attempt, source, seen)
            seen[(rollout_id, attempt)] = source
        latest: dict[str, int] = {}
        for rollout_id, attempt, _ in self.continued:
            # A later restore only ever continues a later attempt of the same rollout.
            assert attempt > latest.get(rollout_id, -1), (rollout_id, attempt, latest)
            latest[rollout_id] = attempt

    @invariant()
    def world_matches_model(self) -> None:
        """The ledger and every participant hold exactly the model's live rollouts and turns."""
        live_by_instance: dict[str, set[EnvironmentEpisode]] = {}
        for rollout in self.live.values():
            live_by_instance.setdefault(rollout.instance.instance_id, set()).add(rollout.episode)
        assert {k: v for k, v in self.inventory.live.items() if v} == live_by_instance
        for instance, deployment in self.deployments.items():
            mine = {r.episode: r for r in self.live.values() if r.instance == instance}
            pending = {r.episode for r in self.pending_drops if r.instance == instance}
            for name, hooks in deployment.hooks.items():
                assert set(hooks.state) - pending == set(mine), (instance, name, hooks.state)
                for episode, rollout in mine.items():
                    assert hooks.state[episode]["turn"] == rollout.turn
                    if hooks.kind == "model":
                        assert tuple(hooks.state[episode]["staging"]) == rollout.staging

    @invariant()
    def retired_attempts_are_fenced(self) -> None:
        """A dropped attempt the inventory saw retired is gone and refused everywhere."""
        for rollout in self.retired_drops:
            deployment = self.deployments[rollout.instance]
            for core in deployment.cores.values():
                mark = core.fence.mark(rollout.rollout_id)
                assert mark is not None and mark >= rollout.attempt, (core.server_name, mark)
                assert not core.fence.is_current(rollout.episode)
            for hooks in deployment.hooks.values():
                assert rollout.episode not in hooks.state

    @invariant()
    def failed_snapshots_are_not_restorable(self) -> None:
        """A failed or unpublished snapshot has no gym_checkpoint.json and restores nothing."""
        if self.facade is None or not self.failed_dirs:
            return
        facade = self.facade
        before = (self._requests(), self._phases(), self._hook_states())
        for path in self.failed_dirs:
            assert not (path / MANIFEST_NAME).exists(), path

            async def restore(path: Path = path) -> None:
                async with facade.restored(path):
                    pytest.fail("a failed snapshot must not restore")

            with pytest.raises(CorruptCheckpoint):
                self.run(restore)
        assert (self._requests(), self._phases(), self._hook_states()) == before

    @invariant()
    def published_snapshots_are_intact(self) -> None:
        """Every published snapshot of this run still has its manifest."""
        for published in self.published:
            assert (published.path / MANIFEST_NAME).exists()


TestEngineStateful = EngineMachine.TestCase
TestEngineStateful.settings = PROFILE


# Regressions the machine found: each was a bug before the engine fixed it.


def _one_instance(
    clock: FakeClock, deployment: Deployment, inventory: InMemoryInventory | None = None
) -> GymEnvironmentCheckpoint:
    adapter = GymCheckpointAdapter(
        instance=GymCheckpointInstance("shard", 0), coordination=deployment.coordinator
    )
    return GymEnvironmentCheckpoint(
        [LocalInstance(adapter)], inventory or InMemoryInventory(), clock=clock, timeouts=TIMEOUTS
    )


async def test_snapshot_after_a_failed_resume_is_retryable(tmp_path: Path) -> None:
    """After a resume that failed every retry (participants self-resume), a snapshot works."""
    clock = FakeClock()
    deployment = Deployment(clock=clock)
    facade = _one_instance(clock, deployment)
    deployment.faults.add("unreachable", server="agent", route="resume", times=RESUME_ATTEMPTS)
    with pytest.raises(GymCheckpointUnavailable):
        async with facade.snapshot(tmp_path / "one") as snap:
            assert snap is not None
            await snap.check_against_cut(LiveCut())
    clock.advance(10_000)  # past the lease: the agent resumes itself
    assert (await deployment.cores["agent"].status())["phase"] == "idle"
    async with facade.snapshot(tmp_path / "two") as snap:
        assert snap is not None


async def test_failed_cleanup_retire_still_drops_the_restore(tmp_path: Path) -> None:
    """An exception in the restored context drops the restore even if one retire fails once."""
    clock = FakeClock()
    deployment = Deployment(clock=clock)
    episode = EnvironmentEpisode("r1", 0)
    await deployment.start(episode, turn=2)
    inventory = InMemoryInventory()
    inventory.add("shard/replica-0", episode)
    facade = _one_instance(clock, deployment, inventory)
    async with facade.snapshot(tmp_path) as snap:
        assert snap is not None
        await snap.check_against_cut(LiveCut())
    after = deployment.fresh()
    after.faults.add("unreachable", server="agent", route="retire")
    with pytest.raises(TrainerFailure):
        async with _one_instance(clock, after).restored(tmp_path):
            raise TrainerFailure("ledger refused the restore")
    assert all(hooks.state == {} for hooks in after.hooks.values())


# ------------------------------------------------ the same machine over real HTTP
#
# Only the deployments differ: their participants are served by uvicorn on
# 127.0.0.1 (ephemeral ports) through the FastAPI routes, and the coordinator
# reaches them with httpx, while the same fault plan is applied. A reduced
# profile keeps it to well under a minute.

REDUCED = settings(
    max_examples=examples(int(os.environ.get("ENVCKPT_HTTP_EXAMPLES", "20"))),
    stateful_step_count=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@dataclass
class HttpDeployment(Deployment):
    """A ``Deployment`` whose control calls cross uvicorn, FastAPI and httpx."""

    http: bool = True


def test_engine_machine_over_http(monkeypatch: pytest.MonkeyPatch) -> None:
    """Random snapshots, faults, crashes and restores keep every invariant over HTTP."""
    monkeypatch.setattr(sys.modules[__name__], "Deployment", HttpDeployment)
    before = LoopbackHttp.delivered
    run_state_machine_as_test(EngineMachine, settings=REDUCED)
    assert LoopbackHttp.delivered > before  # the calls really crossed HTTP


# ------------------------------------------ a planted bug the machine must find
#
# Issue 23's bug (a): a lifecycle row letting ``commit`` start from
# ``preparing``. The machine judges legality by the reference model, not the
# table, so the planted row fails the run (no shrinking: the first failure
# is enough); with the table restored a short run passes again.

PLANTED = settings(
    max_examples=300,
    stateful_step_count=12,
    deadline=None,
    phases=(HypothesisPhase.reuse, HypothesisPhase.generate),
    report_multiple_bugs=False,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
RESTORED = settings(PLANTED, max_examples=10)


def test_the_machine_finds_commit_allowed_from_preparing() -> None:
    """Planted, the row fails the run with its symptom; restored, the run passes."""
    with pytest.MonkeyPatch.context() as patch:
        plant_commit_from_preparing(patch)
        assert gym_adapter._LIFECYCLE.table is not INSTANCE_LIFECYCLE
        with pytest.raises(AssertionError, match="commit in preparing: illegal by the reference"):
            run_state_machine_as_test(EngineMachine, settings=PLANTED)
    assert gym_adapter._LIFECYCLE.table is INSTANCE_LIFECYCLE
    run_state_machine_as_test(EngineMachine, settings=RESTORED)
