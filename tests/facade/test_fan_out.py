"""Tests for envckpt.facade.fan_out: concurrent calls, one aggregated error, task helpers."""

from __future__ import annotations

import asyncio

import pytest

from envckpt.errors import (
    CorruptCheckpoint,
    GymCheckpointUnavailable,
    IllegalTransition,
    ProtocolViolation,
    SnapshotNotReady,
)
from envckpt.facade.fan_out import FanOut, aggregate, stop, uncancellable
from envckpt.facade.instances import InstanceClient

from helpers.facade_world import A, B, FacadeWorld


def unavailable(instance: str) -> GymCheckpointUnavailable:
    return GymCheckpointUnavailable(f"{instance} down", operation="prepare")


class Halt(BaseException):
    """A BaseException that is not an Exception (like KeyboardInterrupt, but safe in a task)."""


# ------------------------------------------------------------------ aggregate


@pytest.mark.parametrize(
    "severe",
    [
        ProtocolViolation("bad reply"),
        CorruptCheckpoint("damaged", path="/x"),
        IllegalTransition(machine="m", instance="i", state="s", trigger="t"),
        ValueError("a bug"),
    ],
    ids=lambda e: type(e).__name__,
)
@pytest.mark.parametrize("position", ["first", "last"])
def test_a_non_retryable_error_wins_over_unavailability(severe: Exception, position: str) -> None:
    """Any error that is not unavailability is the result, wherever its instance sorts."""
    errors: dict[str, BaseException] = {
        "a/replica-0": unavailable("a"),
        "c/replica-0": unavailable("c"),
    }
    errors = (
        {"b/replica-0": severe, **errors}
        if position == "first"
        else {**errors, "b/replica-0": severe}
    )
    assert aggregate("commit", errors) is severe


def test_the_first_non_retryable_error_in_instance_order_wins() -> None:
    """Between two non-retryable errors the one of the earlier instance is kept (deterministic)."""
    first, second = ProtocolViolation("first"), CorruptCheckpoint("second")
    assert aggregate("commit", {"a/replica-0": first, "b/replica-0": second}) is first


def test_only_unavailability_aggregates_naming_every_instance() -> None:
    """All-unavailable failures become one GymCheckpointUnavailable with each instance's text."""
    blocked = SnapshotNotReady("blocked", blockers={"b": {"agent": ("r1",)}})
    error = aggregate("prepare", {"b/replica-0": blocked, "a/replica-0": unavailable("a")})
    assert type(error) is GymCheckpointUnavailable
    assert error.operation == "prepare"
    assert error.failures == {"a/replica-0": "a down", "b/replica-0": "blocked"}
    assert list(error.failures) == ["a/replica-0", "b/replica-0"]
    assert "prepare failed on 2 instance(s)" in str(error)


# -------------------------------------------------------------------- FanOut


async def test_collect_keys_results_and_errors_by_instance() -> None:
    """Each instance's result or error lands under its id; every instance is called."""
    world = FacadeWorld()
    fan_out = world.fan_out
    called: list[str] = []

    async def call(instance: InstanceClient) -> str:
        called.append(instance.instance_id)
        if instance.instance_id == B.instance_id:
            raise unavailable(instance.instance_id)
        return await instance.state()

    results, errors = await fan_out.collect(call)
    assert sorted(called) == sorted([A.instance_id, B.instance_id])
    assert results == {A.instance_id: "undiscovered"}
    assert set(errors) == {B.instance_id}
    assert isinstance(errors[B.instance_id], GymCheckpointUnavailable)


async def test_collect_times_each_instance_s_call_when_asked() -> None:
    """``seconds`` receives every instance's call time, failed calls included."""
    world = FacadeWorld()
    seconds: dict[str, float] = {}

    async def call(instance: InstanceClient) -> str:
        await asyncio.sleep(0.01)
        if instance.instance_id == B.instance_id:
            raise unavailable(instance.instance_id)
        return await instance.state()

    await world.fan_out.collect(call, seconds=seconds)
    assert set(seconds) == {A.instance_id, B.instance_id}
    assert all(value >= 0.009 for value in seconds.values())
    with pytest.raises(GymCheckpointUnavailable):
        await world.fan_out.require("prepare", call, seconds=seconds)


async def test_collect_calls_only_the_chosen_instances() -> None:
    """With ``instances`` given, only those are called."""
    world = FacadeWorld()
    chosen = [world.instances[B.instance_id]]
    results, errors = await world.fan_out.collect(lambda i: i.state(), chosen)
    assert results == {B.instance_id: "undiscovered"} and errors == {}


class CountedInstance:
    """Just an id and a state, counting how often its id is read."""

    reads = 0

    def __init__(self, instance_id: str) -> None:
        self._instance_id = instance_id

    @property
    def instance_id(self) -> str:
        CountedInstance.reads += 1
        return self._instance_id

    async def state(self) -> str:
        return f"state of {self._instance_id}"


async def test_collect_reads_each_instances_id_once_and_keeps_the_order_given() -> None:
    """Results come back in the order the instances were given; each id is read once."""
    chosen = [CountedInstance("b/replica-0"), CountedInstance("a/replica-0")]
    CountedInstance.reads = 0
    results, errors = await FanOut({}).collect(lambda i: i.state(), chosen)  # type: ignore[arg-type]
    assert list(results) == ["b/replica-0", "a/replica-0"] and errors == {}
    assert results["a/replica-0"] == "state of a/replica-0"
    assert CountedInstance.reads == 2


async def test_collect_runs_the_calls_concurrently() -> None:
    """Both calls are in flight at once (each waits for the other to start)."""
    world = FacadeWorld()
    started: set[str] = set()
    both = asyncio.Event()

    async def call(instance: InstanceClient) -> None:
        started.add(instance.instance_id)
        if len(started) == 2:
            both.set()
        await asyncio.wait_for(both.wait(), 5)

    _, errors = await world.fan_out.collect(call)
    assert errors == {}


@pytest.mark.parametrize("escape", [Halt, asyncio.CancelledError], ids=lambda e: e.__name__)
async def test_a_base_exception_passes_through_after_every_call_ended(
    escape: type[BaseException],
) -> None:
    """A BaseException that is not an Exception is raised, not collected; the others finish."""
    world = FacadeWorld()
    finished: list[str] = []

    async def call(instance: InstanceClient) -> None:
        if instance.instance_id == A.instance_id:
            raise escape()
        await asyncio.sleep(0.01)
        finished.append(instance.instance_id)

    with pytest.raises(escape):
        await world.fan_out.collect(call)
    assert finished == [B.instance_id]


async def test_require_returns_results_or_raises_the_aggregate() -> None:
    """require returns every result, or the aggregated error when any call failed."""
    world = FacadeWorld()
    states = await world.fan_out.require("state", lambda i: i.state())
    assert states == {A.instance_id: "undiscovered", B.instance_id: "undiscovered"}
    world.deployments[B].faults.add("unreachable", times=-1)
    with pytest.raises(GymCheckpointUnavailable) as info:
        await world.fan_out.require("discover", lambda i: i.discover())
    assert info.value.operation == "discover"
    assert set(info.value.failures) == {B.instance_id}
    # A's discover still ran: the fan-out does not stop at the first failure.
    assert await world.instances[A.instance_id].state() == "discovered"


def test_fan_out_keeps_its_own_copy_of_the_instances() -> None:
    """Changing the mapping it was built from does not change whom it calls."""
    world = FacadeWorld()
    mapping = dict(world.instances)
    fan_out = FanOut(mapping)
    mapping.clear()
    assert set(fan_out.instances) == {A.instance_id, B.instance_id}


# ---------------------------------------------------------------------- stop


async def test_stop_ignores_no_task_and_finished_tasks() -> None:
    """None and a finished task are left alone (a finished task's error is not raised)."""
    await stop(None)

    async def fails() -> None:
        raise RuntimeError("ended badly")

    task = asyncio.ensure_future(fails())
    await asyncio.wait({task})
    await stop(task)
    assert isinstance(task.exception(), RuntimeError)


async def test_stop_cancels_a_running_task_and_waits_for_its_end() -> None:
    """A running task is cancelled and has ended (its cleanup ran) when stop returns."""
    cleaned = asyncio.Event()

    async def renew_forever() -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            await asyncio.sleep(0)
            cleaned.set()

    task = asyncio.ensure_future(renew_forever())
    await asyncio.sleep(0)
    await stop(task)
    assert task.cancelled() and cleaned.is_set()


async def test_stop_swallows_an_error_raised_while_cancelling() -> None:
    """A task failing during its cancellation does not fail the caller."""

    async def fails_on_cancel() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            raise RuntimeError("cleanup failed") from None

    task = asyncio.ensure_future(fails_on_cancel())
    await asyncio.sleep(0)
    await stop(task)
    assert task.done()


# -------------------------------------------------------------- uncancellable


async def test_uncancellable_returns_and_raises_like_the_work() -> None:
    """Without cancellation it is the work: its error propagates."""
    finished: list[str] = []

    async def work() -> None:
        await asyncio.sleep(0)
        finished.append("done")

    await uncancellable(work())
    assert finished == ["done"]

    async def failing() -> None:
        raise GymCheckpointUnavailable("resume failed", operation="resume")

    with pytest.raises(GymCheckpointUnavailable):
        await uncancellable(failing())


@pytest.mark.parametrize(
    ("cancels", "fails"),
    [(1, False), (3, False), (1, True)],
    ids=["cancelled-once", "cancelled-repeatedly", "cancelled-then-the-work-fails"],
)
async def test_uncancellable_finishes_the_work_then_propagates_cancellation(
    cancels: int, fails: bool
) -> None:
    """Cancelling the caller (once, or again while the work finishes) lets the work run to its
    end, never stopped half-way; then the caller sees CancelledError, even if the work then
    failed."""
    release = asyncio.Event()
    finished: list[str] = []

    async def work() -> None:
        await release.wait()
        finished.append("resumed everyone")
        if fails:
            raise GymCheckpointUnavailable("resume failed", operation="resume")

    caller = asyncio.ensure_future(uncancellable(work()))
    await asyncio.sleep(0.01)
    for _ in range(cancels):
        caller.cancel()
        await asyncio.sleep(0.01)
    assert not caller.done() and finished == []
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert finished == ["resumed everyone"]


async def test_stop_passes_on_a_cancellation_of_its_caller() -> None:
    """A caller cancelled while stop waits is still cancelled; the task is stopped too."""
    release = asyncio.Event()

    async def stubborn() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            await release.wait()  # takes a while to end
            raise

    background = asyncio.create_task(stubborn())
    await asyncio.sleep(0)
    caller = asyncio.create_task(stop(background))
    await asyncio.sleep(0)
    caller.cancel()
    await asyncio.sleep(0)
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert background.cancelled()
