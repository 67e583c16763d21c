"""The end-to-end invariants, checked at every state the explorer reaches.

* no attempt is continued twice (each saved attempt by at most one restore,
  later restores only later attempts), and on every participant at most one
  attempt of a rollout may act;
* a failed snapshot is never restorable (its directory has no
  ``gym_checkpoint.json``); a published one keeps it;
* every rollout the run works on is held by every participant of its
  instance at the trainer's turn (so a snapshot exports it at its saved turn,
  checked when it is published, or reports it restarted, and a restore
  installs exactly that turn, checked when it lands);
* an illegal call changes nothing: every lifecycle trigger the adapter's
  state refuses, control calls a participant's phase refuses, and a turn of
  an attempt a restore superseded are each refused with nothing sent and no
  state changed;
* once the trainer is done and nothing is pending, every participant is
  idle with admission open.

    problems = check(world)       # [] when every invariant holds
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from envckpt.episodes import EnvironmentEpisode
from envckpt.errors import IllegalTransition, ParticipantError
from envckpt.facade.manifest import MANIFEST_NAME
from envckpt.participant import edge
from envckpt.protocol import Phase

from model_check.digest import describe
from model_check.oracle import OPERATIONS, operation_legal
from model_check.world import TOKEN, Generation, World

ADAPTER_TRIGGERS = OPERATIONS
ILLEGAL_ID = "illegal-call"


def check(world: World) -> list[str]:
    problems = list(world.violations) + list(world.oracle_problems)
    problems += _phases_as_the_oracle_says(world.gen)
    problems += _continued_once(world)
    problems += _snapshot_files(world)
    problems += _held_as_the_trainer_says(world)
    if _settled(world):
        problems += _all_idle(world.gen)
    if not problems:
        problems += _illegal_calls_change_nothing(world)
    return problems


def _phases_as_the_oracle_says(gen: Generation) -> list[str]:
    problems = []
    for iid, cores in gen.cores.items():
        observer = gen.observers[gen.labels[iid]]
        observer.tick()
        problems += observer.compare_phases(cores)
    return problems


def _continued_once(world: World) -> list[str]:
    problems = []
    seen: dict[tuple[str, int], str] = {}
    latest: dict[str, int] = {}
    for rollout_id, attempt, source in world.model.continued:
        if (rollout_id, attempt) in seen:
            problems.append(f"{rollout_id} attempt {attempt} continued twice ({source})")
        if attempt <= latest.get(rollout_id, -1):
            problems.append(
                f"{rollout_id}: a restore continued attempt {attempt} after a later one"
            )
        seen[(rollout_id, attempt)] = source
        latest[rollout_id] = attempt
    gen = world.gen
    for iid, name, core in gen.all_cores():
        acting: dict[str, set[int]] = {}
        for episode in gen.hooks[iid][name].states:
            if core.fence.is_current(episode):
                acting.setdefault(episode.rollout_id, set()).add(episode.attempt)
        for rollout_id, attempts in acting.items():
            if len(attempts) > 1:
                problems.append(
                    f"{iid}/{name}: attempts {sorted(attempts)} of {rollout_id} may act"
                )
    return problems


def _snapshot_files(world: World) -> list[str]:
    problems = []
    for path in world.model.failed:
        if (path / MANIFEST_NAME).exists():
            problems.append(f"failed snapshot {path.name} has {MANIFEST_NAME}: it is restorable")
    for published in world.model.published:
        if not (published.path / MANIFEST_NAME).exists():
            problems.append(f"published snapshot {published.path.name} lost {MANIFEST_NAME}")
    return problems


def _held_as_the_trainer_says(world: World) -> list[str]:
    problems = []
    gen = world.gen
    for rollout_id in sorted(gen.running):
        rollout = world.model.rollouts.get(rollout_id)
        if rollout is None:
            continue
        for name, hooks in gen.hooks[rollout.instance].items():
            state = hooks.states.get(rollout.episode)
            turn = None if state is None else state.get("turn")
            if turn != rollout.turn:
                problems.append(
                    f"{rollout.instance}/{name} holds {rollout.episode.capture_key} at turn "
                    f"{turn}, the trainer has turn {rollout.turn}"
                )
    return problems


def _settled(world: World) -> bool:
    gen = world.gen
    waiting = [i for i in gen.gates.items if not i.label.startswith("end ")]
    leases = [core for _, _, core in gen.all_cores() if core.lease_expires_at is not None]
    return gen.done and not waiting and not gen.clock.timers() and not leases


def _all_idle(gen: Generation) -> list[str]:
    return [
        f"{iid}/{name} ends {core.phase}, admission "
        f"{'open' if core.hooks.admission_open else 'closed'}"  # type: ignore[attr-defined]
        for iid, name, core in gen.all_cores()
        if core.phase is not Phase.IDLE or not core.hooks.admission_open  # type: ignore[attr-defined]
    ]


def _illegal_calls_change_nothing(world: World) -> list[str]:
    gen = world.gen
    before = describe(world)
    requests = gen.requests()
    problems = []
    for call, what in _illegal_calls(world, gen):
        try:
            # A refused call raises at once; one that was wrongly sent waits at
            # a gate the explorer never opens: a second is plenty to tell.
            outcome = world.loop.run_until_complete(asyncio.wait_for(call(), timeout=1.0))
        except TimeoutError:
            problems.append(f"oracle: {what} was sent and waits for a reply")
            continue
        except IllegalTransition:
            continue
        except ParticipantError as refusal:
            if what.startswith("turn"):
                continue
            problems.append(f"{what}: raised {refusal.code} instead of answering")
            continue
        if isinstance(outcome, tuple) and outcome[0] != 200:
            continue
        problems.append(f"oracle: {what} was accepted: {outcome!r}")
    if gen.requests() != requests:
        problems.append("an illegal call sent a request")
    after = describe(world)
    if after != before:
        changed = [b[0] for b, a in zip(before, after, strict=True) if a != b]
        problems.append(f"illegal calls changed the state: {changed}")
    return problems


Call = Callable[[], Awaitable[Any]]


def _illegal_calls(world: World, gen: Generation) -> list[tuple[Call, str]]:
    calls: list[tuple[Call, str]] = []
    deadline = gen.clock.now() + 60
    episode = EnvironmentEpisode("illegal", 0)
    root = world.root / "illegal"
    for iid, adapter in gen.adapters.items():
        state = adapter.state
        for trigger in ADAPTER_TRIGGERS:
            # Judged by the reference model, not the engine's own table.
            if operation_legal(str(state), trigger):
                continue
            calls.append(
                (
                    _adapter_call(adapter, trigger, deadline, episode, root),
                    f"{iid} {trigger} in {state}",
                )
            )
    for iid, name, core in gen.all_cores():
        wire = [episode.to_wire()]
        bodies = {"commit": {"checkpoint_dir": str(root), "episode_ids": wire}}
        if core.checkpoint_id is None:
            bodies["renew"] = {}
        else:
            bodies["prepare"] = {}
            bodies["restore"] = {"checkpoint_dir": str(root), "episode_ids": wire}
        for route, extra in bodies.items():
            body = {"checkpoint_id": ILLEGAL_ID, "deadline_ts": deadline, **extra}
            calls.append(
                (
                    lambda core=core, route=route, body=body: edge.handle(
                        core, "POST", route, body, authorization=f"Bearer {TOKEN}", token=TOKEN
                    ),
                    f"{iid}/{name} {route} in {core.phase}",
                )
            )
    for rollout_id in sorted(gen.running):
        rollout = world.model.rollouts[rollout_id]
        if rollout_id in gen.in_flight:
            continue
        agent = gen.cores[rollout.instance]["agent"]
        if agent.phase is not Phase.IDLE:
            what = f"turn of {rollout.episode.capture_key} while {agent.phase}"
            calls.append((lambda agent=agent, e=rollout.episode: _admit(agent, e), what))
        if rollout.attempt == 0:
            continue
        stale = EnvironmentEpisode(rollout_id, rollout.attempt - 1)
        for name, core in gen.cores[rollout.instance].items():
            calls.append(
                (
                    lambda core=core, stale=stale: _admit(core, stale),
                    f"turn of {stale.capture_key} on {name}",
                )
            )
    return calls


async def _admit(core: Any, episode: EnvironmentEpisode) -> None:
    async with core.admit(episode):
        pass


def _adapter_call(
    adapter: Any, trigger: str, deadline: float, episode: EnvironmentEpisode, root: Any
) -> Call:
    calls: dict[str, Call] = {
        "prepare": lambda: adapter.prepare(ILLEGAL_ID, deadline_ts=deadline),
        "commit": lambda: adapter.commit(ILLEGAL_ID, root, [episode], deadline_ts=deadline),
        "renew": lambda: adapter.renew(ILLEGAL_ID, deadline_ts=deadline),
        "resume": lambda: adapter.resume(ILLEGAL_ID, deadline_ts=deadline),
        "retire": lambda: adapter.retire(ILLEGAL_ID, [episode], deadline_ts=deadline),
        "forget": lambda: adapter.forget(ILLEGAL_ID, ["illegal"], deadline_ts=deadline),
        "restore": lambda: adapter.restore(
            ILLEGAL_ID,
            root,
            [episode],
            participants=(),
            source_checkpoint_id="x",
            deadline_ts=deadline,
        ),
    }
    return calls[trigger]
