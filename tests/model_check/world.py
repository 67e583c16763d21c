"""One explored run: generations of processes, the trainer's program and the rollouts.

A ``World`` is rebuilt from scratch for every replayed path and driven one
explorer action at a time; after each action its event loop runs until
nothing can move without the explorer (every task waits at a gate or on the
clock), so the state between actions is well defined:

    world = World(config, root)
    world.boot()                            # processes, rollouts at turn 1, the trainer
    for action in path:
        world.apply(action)                 # "deliver i0/agent/prepare", "crash", ...
    world.actions()                         # what may happen next
    world.close()

A *generation* is one run of every process. A crash drops the generation
whole (no code of it runs again: its tasks stay parked at gates nobody
resolves) and starts a fresh one from what is on disk, whose trainer restores.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import shutil
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

from envckpt.coordination.coordinator import Coordinator
from envckpt.coordination.inprocess import InProcessTransport
from envckpt.errors import ParticipantError
from envckpt.facade import checkpoint as facade_checkpoint
from envckpt.facade.checkpoint import CheckpointTimeouts, GymEnvironmentCheckpoint
from envckpt.facade.instances import LocalInstance
from envckpt.gym.adapter import GymCheckpointAdapter
from envckpt.gym.instance import GymCheckpointInstance
from envckpt.participant import restore_read
from envckpt.participant.core import ParticipantCore
from envckpt.protocol import Phase

from helpers.dict_deployment import DictHooks
from model_check import trainer
from model_check.clock import ExplorerClock
from model_check.config import Config
from model_check.gates import DELAYED, DELIVER, GatedTransport, Gates, Pending
from model_check.observe import Observer
from model_check.trainer import Model, Rollout, Violation

TOKEN = "model-check-token"
# A turn calls the agent, which calls the model and the resources server.
TURN_ORDER = ("agent", "policy", "tools")
TIMEOUTS = CheckpointTimeouts(
    prepare_seconds=10,
    commit_seconds=20,
    control_seconds=10,
    restore_seconds=20,
    renew_interval_seconds=15,
    resume_attempts=2,
)
# A loop that has not settled after this many rounds is running away.
SETTLE_ROUNDS = 10_000

Program = Callable[["World", "Generation"], Coroutine[Any, Any, None]]


class Generation:
    """Every process of one run: participant cores, adapters, the facade."""

    def __init__(
        self, world: World, number: int, clock: ExplorerClock, *, partial: bool = False
    ) -> None:
        config = world.config
        self.number = number
        self.clock = clock
        self.gates = Gates()
        self.late: list[asyncio.Task[Any]] = []
        self.tasks: list[asyncio.Task[Any]] = []
        self.cores: dict[str, dict[str, ParticipantCore]] = {}
        self.hooks: dict[str, dict[str, DictHooks]] = {}
        self.transports: dict[str, GatedTransport] = {}
        self.adapters: dict[str, GymCheckpointAdapter] = {}
        self.labels: dict[str, str] = {}
        # Rollouts this run is working on (after a restore: the continued ones).
        self.running: set[str] = set()
        self.in_flight: dict[str, Pending] = {}
        self.done = False
        # The reference model of each instance's participants (``observe``).
        self.observers: dict[str, Observer] = {}
        for index in range(config.instances):
            instance = GymCheckpointInstance("shard", index)
            iid = instance.instance_id
            kinds = list(config.kinds)
            if index == config.restart_only_instance:
                name, kind, _ = kinds[-1]
                kinds[-1] = (name, kind, "restart_only")
            missing: tuple[str, ...] = ()
            if partial and index == 0:
                # A partial participant set: the last server of i0 is not deployed.
                missing = (kinds[-1][0],)
                kinds = kinds[:-1]
            hooks = {name: DictHooks(kind) for name, kind, _ in kinds}
            cores = {
                name: ParticipantCore(
                    server_name=name,
                    kind=kind,
                    mode=mode,
                    hooks=hooks[name],
                    clock=clock,
                    lease_grace=config.lease_grace,
                )
                for name, kind, mode in kinds
            }
            label = f"i{index}"
            observer = Observer(
                label=label,
                clock=clock,
                lease_grace=config.lease_grace,
                problems=world.oracle_problems,
                missing=missing,
            )
            self.observers[label] = observer
            inner = InProcessTransport(dict(cores), token=TOKEN, deliver=observer.deliver)
            transport = GatedTransport(
                inner,
                gates=self.gates,
                clock=clock,
                instance=label,
                late_tasks=self.late,
                ungated=config.ungated_routes,
            )
            self.labels[iid] = label
            self.hooks[iid] = hooks
            self.cores[iid] = cores
            self.transports[iid] = transport
            self.adapters[iid] = GymCheckpointAdapter(
                instance=instance, coordination=Coordinator(transport, clock=clock)
            )
        self.facade = GymEnvironmentCheckpoint(
            [LocalInstance(adapter) for adapter in self.adapters.values()],
            world.model.inventory(),
            clock=clock,
            timeouts=TIMEOUTS,
        )

    def all_cores(self) -> list[tuple[str, str, ParticipantCore]]:
        return [
            (iid, name, core) for iid, cores in self.cores.items() for name, core in cores.items()
        ]

    def requests(self) -> int:
        return sum(t.requests for t in self.transports.values())


class World:
    """One run of the configuration, driven action by action."""

    def __init__(self, config: Config, root: Path) -> None:
        self.config = config
        self.root = root
        self.loop = asyncio.new_event_loop()
        self.loop.set_exception_handler(lambda _loop, _context: None)
        self.model = Model()
        self.generations: list[Generation] = []
        self.crashes = 0
        self.faults_used = 0
        self.notes: list[str] = []
        self.violations: list[str] = []
        # Divergences of the engine from the reference model (``oracle``).
        self.oracle_problems: list[str] = []
        self._ids = itertools.count()
        self.restart_only_instance = (
            None
            if config.restart_only_instance is None
            else GymCheckpointInstance("shard", config.restart_only_instance).instance_id
        )

    # ----------------------------------------------------------- lifecycle

    @property
    def gen(self) -> Generation:
        return self.generations[-1]

    def boot(self) -> None:
        """The first run: processes, every rollout at turn 1, the trainer's program."""
        for rollout_id, index in self.config.rollouts:
            iid = GymCheckpointInstance("shard", index).instance_id
            episode_key = f"{rollout_id}/t0"
            self.model.rollouts[rollout_id] = Rollout(rollout_id, iid, 0, 1, (episode_key,))
        gen = self._new_generation(ExplorerClock(), trainer.first_run)
        for rollout in self.model.rollouts.values():
            for name, hooks in gen.hooks[rollout.instance].items():
                state: dict[str, Any] = {"turn": rollout.turn}
                if hooks.kind == "model":
                    state["staging"] = list(rollout.staging)
                self._run(self._admitted(gen, rollout, name, state))
            gen.running.add(rollout.rollout_id)
        self.settle()

    async def _admitted(
        self, gen: Generation, rollout: Rollout, name: str, state: dict[str, Any]
    ) -> None:
        async with gen.cores[rollout.instance][name].admit(rollout.episode):
            gen.hooks[rollout.instance][name].states[rollout.episode] = state

    def _new_generation(
        self, clock: ExplorerClock, program: Program, *, partial: bool = False
    ) -> Generation:
        gen = Generation(self, len(self.generations), clock, partial=partial)
        self.generations.append(gen)
        gen.tasks.append(self.loop.create_task(self._program(program, gen)))
        return gen

    async def _program(self, program: Program, gen: Generation) -> None:
        try:
            await program(self, gen)
        except Violation as violation:
            self.violations.append(str(violation))
        except Exception as error:  # anything unexpected is a finding too
            self.violations.append(f"the trainer raised {type(error).__name__}: {error}")
        finally:
            if gen is self.gen:
                gen.done = True

    def restart_processes(self, *, partial: bool = False) -> None:
        """Fresh processes of every server (nothing in memory survives), restoring again.

        ``partial``: the new deployment lacks a server that saved state.
        """
        old = self.gen
        old.gates.close()
        self._new_generation(ExplorerClock(old.clock.now()), trainer.after_crash, partial=partial)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.loop.close()
        shutil.rmtree(self.root, ignore_errors=True)

    # ------------------------------------------------------------ running

    def mint(self, hint: str) -> str:
        """Deterministic checkpoint ids, so replays are identical."""
        return f"{hint}-{next(self._ids)}"

    def _run(self, work: Awaitable[Any]) -> Any:
        return self.loop.run_until_complete(work)

    def settle(self) -> None:
        """Run the loop until every task waits for the explorer or the clock."""

        async def quiet() -> None:
            ready = self.loop._ready  # type: ignore[attr-defined]
            for _ in range(SETTLE_ROUNDS):
                await asyncio.sleep(0)
                if not ready:
                    return
            raise RuntimeError("the event loop never settled")

        self._run(quiet())

    async def step(self, gen: Generation, name: str) -> None:
        """A point where the trainer decides to go on: the explorer chooses when."""
        item = gen.gates.add(f"trainer {name}")
        await item.future

    def note(self, text: str) -> None:
        self.notes.append(text)

    # ------------------------------------------------------------ actions

    def actions(self) -> list[str]:
        """Every action enabled now, in a fixed order."""
        gen, config = self.gen, self.config
        found: list[str] = []
        waiting_requests = False
        may_fault = self.faults_used < config.fault_budget and (
            config.faults_after_crash or len(self.generations) == 1
        )
        for item in sorted(gen.gates.items, key=lambda i: (i.key, i.seq)):
            if item.key in found or f"deliver {item.key}" in found:
                continue
            if item.label.startswith(("trainer ", "end ")):
                found.append(item.key)
                continue
            waiting_requests = True
            found.append(f"deliver {item.key}")
            if item.late or not may_fault or item.label[:2] not in config.fault_instances:
                continue
            for kind in config.faults:
                if kind == "crash_before_publish" and item.route != "commit":
                    continue
                if kind == DELAYED and item.route != "prepare":
                    continue
                found.append(f"{kind} {item.key}")
        for rollout_id in sorted(gen.running):
            rollout = self.model.rollouts.get(rollout_id)
            if rollout is None or rollout_id in gen.in_flight:
                continue
            # A turn while the checkpoint is open is refused and changes nothing
            # (the invariants check that refusal): not worth a transition.
            agent = gen.cores[rollout.instance][TURN_ORDER[0]]
            if rollout.turn < config.max_turn and agent.phase is Phase.IDLE:
                found.append(f"begin {rollout_id}")
        waiting_trainer = any(i.label.startswith("trainer ") for i in gen.gates.items)
        if self._next_time() is not None and (
            config.time_anywhere or not (waiting_requests or waiting_trainer)
        ):
            found.append("tick")
        if self.crashes < config.crash_budget:
            found.append("crash")
            if config.partial_restore:
                found.append("crash partial")
        return found

    def apply(self, action: str) -> None:
        """Do ``action`` and run until the world is quiet again."""
        gen = self.gen
        verb, _, key = action.partition(" ")
        if action == "tick":
            self._tick()
        elif action in ("crash", "crash partial"):
            self.crashes += 1
            self.restart_processes(partial=action == "crash partial")
        elif verb == "begin":
            self._begin(gen, key)
        elif verb in ("trainer", "end"):
            item = gen.gates.find(action)
            assert item is not None, action
            gen.gates.resolve(item, DELIVER)
        elif verb == "deliver":
            item = gen.gates.find(key)
            assert item is not None, action
            gen.gates.resolve(item, DELIVER)
        else:
            item = gen.gates.find(key)
            assert item is not None and verb in self.config.faults, action
            self.faults_used += 1
            gen.gates.resolve(item, verb)
        self.settle()

    def crash_key(self) -> tuple[object, ...]:
        """What a crash's outcome depends on: disk, the trainer's model, the budgets.

        Memory is dropped whole, so two states that agree on these crash into
        the same state (the explorer runs that crash only once).
        """
        from model_check.digest import disk

        return (disk(self), self.model.digest(), self.crashes, self.faults_used)

    def _next_time(self) -> float | None:
        gen = self.gen
        times = list(gen.clock.timers())
        for _, _, core in gen.all_cores():
            if core.lease_expires_at is not None:
                times.append(core.lease_expires_at + 1.0)
        return min(times) if times else None

    def _tick(self) -> None:
        """Time passes to the next timer or lease expiry; the lease watchdogs run."""
        gen = self.gen
        when = self._next_time()
        assert when is not None
        gen.clock.advance_to(when)
        self.settle()

        async def watchdogs() -> None:
            for _, _, core in gen.all_cores():
                await core.expire_if_due()

        gen.tasks.append(self.loop.create_task(watchdogs()))

    def _begin(self, gen: Generation, rollout_id: str) -> None:
        gen.tasks.append(self.loop.create_task(self._turn(gen, rollout_id)))

    async def _turn(self, gen: Generation, rollout_id: str) -> None:
        """One turn in every participant of the rollout's instance; refused: nothing changes."""
        rollout = self.model.rollouts[rollout_id]
        cores = gen.cores[rollout.instance]
        try:
            async with contextlib.AsyncExitStack() as stack:
                for name in (n for n in TURN_ORDER if n in cores):
                    await stack.enter_async_context(cores[name].admit(rollout.episode))
                item = gen.gates.add(f"end {rollout_id}")
                gen.in_flight[rollout_id] = item
                try:
                    await item.future
                finally:
                    del gen.in_flight[rollout_id]
                self._advance(gen, rollout)
        except ParticipantError as refusal:
            self.note(f"turn of {rollout_id} refused: {refusal.code}")

    def _advance(self, gen: Generation, rollout: Rollout) -> None:
        key = f"{rollout.episode.capture_key}/t{rollout.turn}"
        for name, hooks in gen.hooks[rollout.instance].items():
            state = hooks.states.get(rollout.episode)
            if state is None or state["turn"] != rollout.turn:
                self.violations.append(
                    f"{rollout.episode.capture_key} ran a turn on {rollout.instance}/{name} "
                    f"holding {state}, the trainer expected turn {rollout.turn}"
                )
                return
            state["turn"] = rollout.turn + 1
            if hooks.kind == "model":
                state["staging"] = [*state["staging"], key]
        self.model.rollouts[rollout.rollout_id] = Rollout(
            rollout.rollout_id,
            rollout.instance,
            rollout.attempt,
            rollout.turn + 1,
            (*rollout.staging, key),
        )


@contextlib.contextmanager
def deterministic(world_of: Callable[[], World | None]) -> Any:
    """Inside: checkpoint ids come from the current world, thread work runs inline.

    Thread work is ``asyncio.to_thread`` (a commit's write) and the restore's
    own worker thread (``restore_read._on``): run there, a delivered restore
    would still be reading when the explorer looks at the state.
    """
    original_mint = facade_checkpoint.mint_checkpoint_id
    original_to_thread = asyncio.to_thread
    original_on = restore_read._on

    def mint(hint: str) -> str:
        world = world_of()
        return original_mint(hint) if world is None else world.mint(hint)

    async def inline(func: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        return func(*args, **kwargs)

    facade_checkpoint.mint_checkpoint_id = mint  # type: ignore[assignment]

    async def inline_on(_thread: Any, work: Callable[[], Any]) -> Any:
        return work()

    asyncio.to_thread = inline  # type: ignore[assignment]
    restore_read._on = inline_on  # type: ignore[assignment]
    try:
        yield
    finally:
        facade_checkpoint.mint_checkpoint_id = original_mint  # type: ignore[assignment]
        asyncio.to_thread = original_to_thread
        restore_read._on = original_on  # type: ignore[assignment]
