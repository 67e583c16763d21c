"""Tests for envckpt.trainer.barrier."""

from __future__ import annotations

import asyncio
import pickle

import pytest

from envckpt.clock import FakeClock
from envckpt.errors import DeadlineExceeded
from envckpt.interfaces import MutationCut
from envckpt.inventory import InMemoryInventory, SnapshotContents
from envckpt.trainer.barrier import (
    BarrierStats,
    Cut,
    CutExpired,
    DataPlaneBarrier,
    NestedSection,
    SectionKind,
)


async def settle() -> None:
    """Let every runnable task run until it blocks."""
    for _ in range(10):
        await asyncio.sleep(0)


async def hold_mutation(barrier: DataPlaneBarrier, release: asyncio.Event) -> None:
    async with barrier.mutation():
        await release.wait()


@pytest.mark.parametrize("started", ["before-the-section", "inside-the-section"])
async def test_mutation_waits_while_checkpoint_open(started: str) -> None:
    """A mutation requested during a checkpoint section enters only after it ends, whether
    its task was running before or was started inside the section (another task: it waits,
    it is not refused)."""
    barrier = DataPlaneBarrier()
    requested, entered = asyncio.Event(), asyncio.Event()

    async def mutate() -> None:
        await requested.wait()
        async with barrier.mutation():
            entered.set()

    early = asyncio.create_task(mutate()) if started == "before-the-section" else None
    async with barrier.checkpoint():
        task = early or asyncio.create_task(mutate())
        requested.set()
        await settle()
        assert not entered.is_set()
    await asyncio.wait_for(task, 5)
    assert entered.is_set()


async def test_checkpoint_waits_for_active_mutations() -> None:
    """A checkpoint section opens only after every active mutation has finished."""
    barrier = DataPlaneBarrier()
    release = asyncio.Event()
    holders = [asyncio.create_task(hold_mutation(barrier, release)) for _ in range(3)]
    await settle()
    assert barrier.active_mutations == 3
    entered = asyncio.Event()

    async def snapshot() -> None:
        async with barrier.checkpoint():
            assert barrier.active_mutations == 0
            entered.set()

    task = asyncio.create_task(snapshot())
    await settle()
    assert not entered.is_set()
    release.set()
    await asyncio.wait_for(asyncio.gather(task, *holders), 5)
    assert entered.is_set()


@pytest.mark.parametrize("kind", [SectionKind.MUTATION, SectionKind.CHECKPOINT])
async def test_cut_expires_when_section_ends(kind: SectionKind) -> None:
    """A cut is live inside its section and require_live raises CutExpired after it."""
    barrier = DataPlaneBarrier()
    section = barrier.mutation() if kind is SectionKind.MUTATION else barrier.checkpoint()
    async with section as cut:
        assert cut.kind is kind
        assert cut.live
        cut.require_live()
    assert not cut.live
    with pytest.raises(CutExpired) as info:
        cut.require_live()
    assert info.value.kind == kind.value


async def test_cut_expires_when_section_raises() -> None:
    """A section left by an exception still expires its cut and lets others in."""
    barrier = DataPlaneBarrier()
    with pytest.raises(RuntimeError):
        async with barrier.mutation() as cut:
            raise RuntimeError("boom")
    assert not cut.live
    assert barrier.active_mutations == 0
    async with barrier.checkpoint() as checkpoint_cut:
        checkpoint_cut.require_live()


@pytest.mark.parametrize(
    ("outer", "inner"),
    [
        (SectionKind.MUTATION, SectionKind.MUTATION),
        (SectionKind.MUTATION, SectionKind.CHECKPOINT),
        (SectionKind.CHECKPOINT, SectionKind.MUTATION),
        (SectionKind.CHECKPOINT, SectionKind.CHECKPOINT),
    ],
)
async def test_nested_sections_raise_at_once(outer: SectionKind, inner: SectionKind) -> None:
    """Entering any section while holding one of the same barrier raises NestedSection."""
    barrier = DataPlaneBarrier()

    def section(kind: SectionKind):  # type: ignore[no-untyped-def]
        return barrier.mutation() if kind is SectionKind.MUTATION else barrier.checkpoint()

    async with section(outer) as cut:
        with pytest.raises(NestedSection) as info:
            async with asyncio.timeout(5), section(inner):
                pass
        assert info.value.held == outer.value
        assert info.value.requested == inner.value
        cut.require_live()
    async with section(inner):
        pass  # the refused attempt left nothing behind


async def test_task_started_inside_a_mutation_may_mutate_alongside() -> None:
    """A task started inside a mutation section may hold its own mutation section meanwhile."""
    barrier = DataPlaneBarrier()

    async def child() -> bool:
        async with barrier.mutation() as cut:
            return cut.live

    async with barrier.mutation():
        assert await asyncio.wait_for(asyncio.create_task(child()), 5)
        assert barrier.active_mutations == 1


async def test_sections_of_different_barriers_may_nest() -> None:
    """Nesting is refused per barrier; sections of two barriers may be held together."""
    first, second = DataPlaneBarrier(), DataPlaneBarrier()
    async with first.checkpoint() as a, second.mutation() as b:
        a.require_live()
        b.require_live()


async def test_dead_cut_refuses_a_mutation() -> None:
    """A consumer that checks the cut refuses work done with an expired one."""
    barrier = DataPlaneBarrier()
    inventory = InMemoryInventory()
    contents = SnapshotContents("ckpt-1", exported={}, restarts={}, staging_keys={})
    async with barrier.checkpoint() as cut:
        await inventory.verify_against_cut(cut, contents)
    with pytest.raises(CutExpired):
        await inventory.verify_against_cut(cut, contents)


async def test_stats_count_sections_and_waits() -> None:
    """Stats count sections, mutations that waited, and seconds waited on the clock."""
    clock = FakeClock()
    barrier = DataPlaneBarrier(clock=clock)
    assert barrier.stats == BarrierStats()
    release = asyncio.Event()
    holder = asyncio.create_task(hold_mutation(barrier, release))
    await settle()

    async def snapshot() -> None:
        async with barrier.checkpoint():
            await settle()
            clock.advance(1.5)  # the waiting mutation waits this long too

    checkpoint = asyncio.create_task(snapshot())
    await settle()
    waiting_mutation = asyncio.create_task(hold_mutation(barrier, asyncio.Event()))
    await settle()
    clock.advance(2.5)
    release.set()
    await asyncio.wait_for(asyncio.gather(holder, checkpoint), 5)
    await settle()
    waiting_mutation.cancel()
    await asyncio.gather(waiting_mutation, return_exceptions=True)
    stats = barrier.stats
    assert stats.checkpoint_sections == 1
    assert stats.checkpoint_wait_seconds == pytest.approx(2.5)
    assert stats.mutation_sections == 2
    assert stats.mutation_waits == 1
    assert stats.mutation_wait_seconds == pytest.approx(4.0)


async def test_checkpoint_is_not_starved_by_a_stream_of_mutations() -> None:
    """Once a checkpoint waits, new mutations queue behind it, so it enters when the old drain."""
    barrier = DataPlaneBarrier()
    order: list[str] = []
    stop = asyncio.Event()

    async def worker(name: str) -> None:
        # Overlapping mutations: without priority there would always be one active.
        while not stop.is_set():
            async with barrier.mutation():
                order.append(name)
                await asyncio.sleep(0)
                await asyncio.sleep(0)

    workers = [asyncio.create_task(worker(f"w{i}")) for i in range(4)]
    await settle()

    async def snapshot() -> None:
        order.append("request")
        async with barrier.checkpoint():
            order.append("checkpoint")
            assert barrier.active_mutations == 0

    await asyncio.wait_for(snapshot(), 5)
    stop.set()
    await asyncio.wait_for(asyncio.gather(*workers), 5)
    # Mutations already active when the request came finished; none entered after it.
    request = order.index("request")
    assert order[request + 1] == "checkpoint"
    assert barrier.stats.mutation_waits >= 1


async def test_new_mutation_queues_behind_a_waiting_checkpoint() -> None:
    """A mutation requested after a checkpoint request runs after that checkpoint."""
    barrier = DataPlaneBarrier()
    order: list[str] = []
    release = asyncio.Event()
    first = asyncio.create_task(hold_mutation(barrier, release))
    await settle()

    async def snapshot() -> None:
        async with barrier.checkpoint():
            order.append("checkpoint")

    async def late_mutation() -> None:
        async with barrier.mutation():
            order.append("late mutation")

    checkpoint = asyncio.create_task(snapshot())
    await settle()
    assert barrier.checkpoints_waiting == 1
    late = asyncio.create_task(late_mutation())
    await settle()
    assert order == []
    release.set()
    await asyncio.wait_for(asyncio.gather(first, checkpoint, late), 5)
    assert order == ["checkpoint", "late mutation"]


async def test_checkpoint_deadline_releases_waiting_mutations() -> None:
    """A checkpoint past its deadline raises DeadlineExceeded and lets queued mutations in."""
    clock = FakeClock()
    barrier = DataPlaneBarrier(clock=clock)
    release = asyncio.Event()
    holder = asyncio.create_task(hold_mutation(barrier, release))
    await settle()
    queued_done = asyncio.Event()

    async def queued() -> None:
        async with barrier.mutation():
            queued_done.set()

    async def snapshot() -> None:
        async with barrier.checkpoint(deadline_ts=clock.now() + 0.05):
            pass

    checkpoint = asyncio.create_task(snapshot())
    await settle()
    waiter = asyncio.create_task(queued())
    with pytest.raises(DeadlineExceeded):
        await asyncio.wait_for(checkpoint, 5)
    await asyncio.wait_for(queued_done.wait(), 5)
    assert barrier.checkpoints_waiting == 0
    assert not barrier.checkpoint_active
    release.set()
    await asyncio.gather(holder, waiter)


async def test_cancelled_checkpoint_request_releases_waiting_mutations() -> None:
    """Cancelling a waiting checkpoint request lets the mutations queued behind it run."""
    barrier = DataPlaneBarrier()
    release = asyncio.Event()
    holder = asyncio.create_task(hold_mutation(barrier, release))
    await settle()

    async def snapshot() -> None:
        async with barrier.checkpoint():
            pass

    checkpoint = asyncio.create_task(snapshot())
    await settle()
    done = asyncio.Event()

    async def queued() -> None:
        async with barrier.mutation():
            done.set()

    waiter = asyncio.create_task(queued())
    await settle()
    assert not done.is_set()
    checkpoint.cancel()
    await asyncio.gather(checkpoint, return_exceptions=True)
    await asyncio.wait_for(done.wait(), 5)
    release.set()
    await asyncio.gather(holder, waiter)


async def test_checkpoints_run_one_at_a_time() -> None:
    """Two checkpoint requests never hold the section together."""
    barrier = DataPlaneBarrier()
    inside = 0
    peak = 0

    async def snapshot() -> None:
        nonlocal inside, peak
        async with barrier.checkpoint():
            inside += 1
            peak = max(peak, inside)
            await settle()
            inside -= 1

    await asyncio.wait_for(asyncio.gather(snapshot(), snapshot(), snapshot()), 5)
    assert peak == 1
    assert barrier.stats.checkpoint_sections == 3


def test_cut_satisfies_the_mutation_cut_protocol() -> None:
    """A barrier cut can be passed wherever envckpt.interfaces.MutationCut is expected."""
    cut: MutationCut = Cut(SectionKind.CHECKPOINT)
    cut.require_live()


@pytest.mark.parametrize(
    "error",
    [
        CutExpired("expired", kind="checkpoint"),
        NestedSection("nested", held="mutation", requested="checkpoint"),
    ],
)
def test_errors_survive_pickle(error: Exception) -> None:
    """Barrier errors round-trip through pickle with every field."""
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error)
    assert vars(copy) == vars(error)
    assert str(copy) == str(error)
