"""The trainer's side of an explored run: its program, and the model of what it knows.

The ``Model`` is what survives a crash (the trainer's published snapshots and
the rollouts it owes), and it is the reference the invariants compare the
processes with. The programs are the trainer's calls into the real facade,
with an explorer step (``world.step``) before each thing the trainer decides
to do, so rollout work, deliveries, faults and crashes interleave with them:

    first run:     step "snapshot" -> facade.snapshot -> step "cut" -> check_against_cut
                   -> step "publish" -> publish, leave (resume)
    after a crash: step "restore" -> facade.restored -> step "ledger" -> continue
                   the restored rollouts as attempt + 1, leave (resume)
                   [-> a snapshot of the restored run]

A failed restore restarts the processes and tries again (the trainer's next
start, with fresh Gym servers); a corrupt snapshot is skipped for an older one.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from envckpt.episodes import EnvironmentEpisode
from envckpt.errors import (
    CorruptCheckpoint,
    GymCheckpointUnavailable,
    IncompatibleCheckpoint,
)
from envckpt.facade.manifest import read_manifest
from envckpt.inventory import InMemoryInventory

if TYPE_CHECKING:
    from model_check.world import Generation, World

# What a snapshot or a restore may raise in a run with faults: anything else is a bug.
EXPECTED_ERRORS = (GymCheckpointUnavailable, CorruptCheckpoint, IncompatibleCheckpoint)


class Violation(AssertionError):
    """An end-to-end invariant does not hold."""


@dataclass(frozen=True)
class Rollout:
    """The trainer's view of one unfinished rollout: its current attempt and turn."""

    rollout_id: str
    instance: str
    attempt: int
    turn: int
    staging: tuple[str, ...]

    @property
    def episode(self) -> EnvironmentEpisode:
        return EnvironmentEpisode(self.rollout_id, self.attempt)


@dataclass(frozen=True)
class Published:
    """A snapshot the trainer published, and the rollouts it must hold."""

    path: Path
    checkpoint_id: str
    exported: tuple[Rollout, ...]
    restarts: tuple[Rollout, ...]


@dataclass
class Model:
    """What the trainer knows; it outlives every crash."""

    rollouts: dict[str, Rollout] = field(default_factory=dict)
    published: list[Published] = field(default_factory=list)
    failed: list[Path] = field(default_factory=list)
    refused: set[Path] = field(default_factory=set)
    # (rollout id, saved attempt, source checkpoint id) of every restore.
    continued: list[tuple[str, int, str]] = field(default_factory=list)
    restarted: set[tuple[str, int]] = field(default_factory=set)

    def inventory(self) -> InMemoryInventory:
        inventory = InMemoryInventory()
        for rollout in self.rollouts.values():
            inventory.add(rollout.instance, rollout.episode)
        return inventory

    def digest(self) -> tuple[object, ...]:
        return (
            tuple(sorted(self.rollouts.items())),
            tuple((str(p.path), p.checkpoint_id) for p in self.published),
            tuple(str(p) for p in self.failed),
            tuple(sorted(str(p) for p in self.refused)),
            tuple(self.continued),
            tuple(sorted(self.restarted)),
        )


async def first_run(world: World, gen: Generation) -> None:
    """The run before any crash: startup, then one snapshot."""
    if not await _started(world, gen):
        return  # the job does not start; nothing was opened anywhere
    await world.step(gen, "snapshot")
    await take_snapshot(world, gen, "a")


async def after_crash(world: World, gen: Generation) -> None:
    """A fresh start: restore the newest usable snapshot, or restart every rollout."""
    model = world.model
    if not await _started(world, gen):
        world.restart_processes()
        return
    candidates = [p for p in reversed(model.published) if p.path not in model.refused]
    if not candidates:
        for rollout in model.rollouts.values():
            model.restarted.add((rollout.rollout_id, rollout.attempt))
        model.rollouts.clear()
        gen.facade.inventory = model.inventory()
        return
    await world.step(gen, "restore")
    outcome = await restore(world, gen, candidates[0])
    if outcome != "restored":
        world.restart_processes()
        return
    if world.config.snapshot_after_restore:
        await world.step(gen, "snapshot")
        await take_snapshot(world, gen, "b")


async def _started(world: World, gen: Generation) -> bool:
    """The trainer's startup discovery (``check_startup``); False if it failed."""
    try:
        await gen.facade.check_startup()
    except GymCheckpointUnavailable as error:
        world.note(f"startup: {error.operation} failed")
        return False
    return True


class _Cut:
    def require_live(self) -> None:
        return None


async def take_snapshot(world: World, gen: Generation, name: str) -> None:
    """One snapshot as the trainer takes it; publish it only if everything succeeded."""
    model = world.model
    path = world.root / f"snap-{gen.number}-{name}"
    reached = published = False
    try:
        async with gen.facade.snapshot(path) as snap:
            assert snap is not None
            reached = True
            await world.step(gen, "cut")
            await snap.check_against_cut(_Cut())
            await world.step(gen, "publish")
            record = _published(world, gen, path, snap.checkpoint_id)
            model.published.append(record)
            published = True
    except EXPECTED_ERRORS as error:
        world.note(f"snapshot {name}: {type(error).__name__}")
        if published:
            # The snapshot stays valid.
            _only_the_resume_may_fail(error, "a published snapshot")
            return
        if reached:
            # The trainer deletes a directory it did not publish (rl-recovery step 7).
            shutil.rmtree(path, ignore_errors=True)
        model.failed.append(path)


def _only_the_resume_may_fail(error: BaseException, what: str) -> None:
    """Once its work is done, only the resume closing ``what``'s context may fail."""
    if not (isinstance(error, GymCheckpointUnavailable) and error.operation == "resume"):
        raise Violation(f"{what}'s context raised {error!r}") from error


def _published(world: World, gen: Generation, path: Path, checkpoint_id: str) -> Published:
    """The snapshot's manifest holds every live rollout at its turn, or reports a restart."""
    restart_only = world.restart_only_instance
    live = tuple(sorted(world.model.rollouts.values(), key=lambda r: r.rollout_id))
    exported = tuple(r for r in live if r.instance != restart_only)
    restarts = tuple(r for r in live if r.instance == restart_only)
    manifest = read_manifest(path)
    if manifest.checkpoint_id != checkpoint_id:
        raise Violation(f"{path}: manifest of {manifest.checkpoint_id}, not {checkpoint_id}")
    for iid, record in manifest.instances.items():
        mine = {r.episode for r in exported if r.instance == iid}
        if set(record.episodes) != mine:
            raise Violation(f"{path}: {iid} exported {record.episodes}, the ledger has {mine}")
        restarted = {r.episode for r in restarts if r.instance == iid}
        if set(record.restarts) != restarted:
            raise Violation(f"{path}: {iid} restarts {record.restarts}, expected {restarted}")
        keys = {k for r in exported if r.instance == iid for k in r.staging}
        if set(record.staging_keys) != keys:
            raise Violation(f"{path}: {iid} keeps rows {record.staging_keys}, expected {keys}")
    del gen
    return Published(path, checkpoint_id, exported, restarts)


async def restore(world: World, gen: Generation, candidate: Published) -> str:
    """One restore: "restored", "corrupt" (try an older one) or "retry" (fresh processes)."""
    model = world.model
    expected = {(r.instance, r.rollout_id, r.attempt) for r in candidate.exported}
    landed = False
    try:
        async with gen.facade.restored(candidate.path) as rollouts:
            if set(rollouts.continued_attempts) != expected:
                raise Violation(
                    f"restore continues {sorted(rollouts.continued_attempts)}, "
                    f"the snapshot holds {sorted(expected)}"
                )
            _check_installed(gen, candidate)
            await world.step(gen, "ledger")
            _continue(world, gen, candidate)
            landed = True
    except EXPECTED_ERRORS as error:
        world.note(f"restore: {type(error).__name__}")
        if landed:
            _only_the_resume_may_fail(error, "a landed restore")
            return "restored"
        _check_nothing_admissible(gen)
        if isinstance(error, CorruptCheckpoint) and world.faults_used == 0:
            model.refused.add(candidate.path)
            return "corrupt"
        return "retry"
    return "restored"


def _check_installed(gen: Generation, candidate: Published) -> None:
    """Every participant holds exactly the restored attempts, at their saved turn."""
    for iid, hooks_by_name in gen.hooks.items():
        mine = {r.episode.next_attempt(): r for r in candidate.exported if r.instance == iid}
        for name, hooks in hooks_by_name.items():
            got = {episode: state["turn"] for episode, state in hooks.states.items()}
            want = {episode: r.turn for episode, r in mine.items()}
            if got != want:
                raise Violation(f"{iid}/{name} restored {got}, the snapshot saved {want}")


def _check_nothing_admissible(gen: Generation) -> None:
    """After a failed restore no restored attempt may act anywhere."""
    for iid, cores in gen.cores.items():
        for name, core in cores.items():
            held = [e for e in gen.hooks[iid][name].states if core.fence.is_current(e)]
            if held:
                raise Violation(f"a failed restore left {held} admissible on {iid}/{name}")


def _continue(world: World, gen: Generation, candidate: Published) -> None:
    """The ledger continues the restored rollouts as attempt + 1; the rest restart."""
    model = world.model
    for rollout in model.rollouts.values():
        model.restarted.add((rollout.rollout_id, rollout.attempt))
    model.rollouts = {r.rollout_id: replace(r, attempt=r.attempt + 1) for r in candidate.exported}
    for rollout in candidate.exported:
        model.restarted.discard((rollout.rollout_id, rollout.attempt))
        model.continued.append((rollout.rollout_id, rollout.attempt, candidate.checkpoint_id))
    for rollout in candidate.restarts:
        model.restarted.add((rollout.rollout_id, rollout.attempt))
    # Snapshots of the crashed run are never restored again (no rollback past a restore).
    model.published = []
    gen.running = set(model.rollouts)
    gen.facade.inventory = model.inventory()
