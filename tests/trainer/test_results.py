"""Tests for envckpt.trainer.results: one result per finished rollout, saved as a sidecar."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest

from envckpt.errors import CorruptCheckpoint
from envckpt.trainer.barrier import CutExpired, DataPlaneBarrier
from envckpt.trainer.ledger import RecoveryLedger
from envckpt.trainer.results import ResultStore, read_results_sidecar


async def test_record_keeps_one_result_per_rollout() -> None:
    """Recorded results are readable by id, counted and listed in id order."""
    store = ResultStore()
    barrier = DataPlaneBarrier()
    async with barrier.mutation() as cut:
        store.record(cut, "r2", {"total": 2})
        store.record(cut, "r1", {"total": 1})
    assert len(store) == 2 and "r1" in store and "r3" not in store
    assert store.get("r1") == {"total": 1} and store.get("r3") is None
    assert store.items() == [("r1", {"total": 1}), ("r2", {"total": 2})]


async def test_a_second_result_for_a_rollout_is_refused() -> None:
    """Recording a rollout twice raises and keeps the first result."""
    store = ResultStore({"r1": {"total": 1}})
    async with DataPlaneBarrier().mutation() as cut:
        with pytest.raises(ValueError, match="finished twice"):
            store.record(cut, "r1", {"total": 99})
    assert store.get("r1") == {"total": 1}


async def test_record_and_save_need_a_live_cut() -> None:
    """A cut whose section ended can neither record nor serialise."""
    store = ResultStore()
    async with DataPlaneBarrier().mutation() as cut:
        pass
    with pytest.raises(CutExpired):
        store.record(cut, "r1", {})
    with pytest.raises(CutExpired):
        store.to_bytes(cut)
    assert len(store) == 0


async def test_results_round_trip_through_the_sidecar_bytes() -> None:
    """to_bytes under a checkpoint cut and from_bytes give back the same results."""
    store = ResultStore({"r1": {"transcript": ["user: p"], "total": 3}})
    async with DataPlaneBarrier().checkpoint() as cut:
        data = store.to_bytes(cut)
    loaded = ResultStore.from_bytes(data)
    assert loaded.items() == store.items()


def test_the_store_copies_what_it_is_given() -> None:
    """Changing the mapping a store was built from does not change the store."""
    source = {"r1": {"total": 1}}
    store = ResultStore(source)
    source["r1"]["total"] = 5
    assert store.get("r1") == {"total": 1}


async def _saved() -> bytes:
    async with DataPlaneBarrier().checkpoint() as cut:
        return ResultStore({"r1": {"total": 1}}).to_bytes(cut)


@pytest.mark.parametrize(
    "tamper",
    [
        lambda doc: doc["results"].update({"r2": {}}),
        lambda doc: doc.update({"kind": "other"}),
        lambda doc: doc.pop("sha256"),
        lambda doc: doc.update({"results": []}),
        lambda doc: doc.update({"schema_version": 2}),
    ],
    ids=["edited", "foreign-kind", "no-checksum", "not-a-mapping", "future-schema"],
)
async def test_a_damaged_sidecar_is_refused(tamper: Callable[[dict[str, Any]], object]) -> None:
    """Edited, foreign or malformed sidecars raise CorruptCheckpoint."""
    document = json.loads(await _saved())
    tamper(document)
    with pytest.raises(CorruptCheckpoint):
        ResultStore.from_bytes(json.dumps(document).encode())


@pytest.mark.parametrize("data", [b"", b"{trunc", b"[]", b'{"body": 1, "sha256": "x"}'])
def test_unreadable_sidecar_bytes_are_refused(data: bytes) -> None:
    """Bytes that are not a results sidecar raise CorruptCheckpoint with the path."""
    with pytest.raises(CorruptCheckpoint) as caught:
        ResultStore.from_bytes(data, path="/snap/sidecars/results.json")
    assert caught.value.path == "/snap/sidecars/results.json"


async def _ledger_with(statuses: dict[str, str]) -> RecoveryLedger:
    ledger = RecoveryLedger()
    async with DataPlaneBarrier().mutation() as cut:
        for rollout_id, status in statuses.items():
            ledger.reserve(cut, rollout_id, "shard/replica-0")
            if status in ("dispatched", "sealed"):
                ledger.dispatch(cut, rollout_id)
            if status == "sealed":
                ledger.seal(cut, rollout_id)
    return ledger


async def _results_bytes(results: dict[str, dict[str, Any]]) -> bytes:
    async with DataPlaneBarrier().checkpoint() as cut:
        return ResultStore(results).to_bytes(cut)


async def test_the_sidecar_reader_accepts_results_that_match_the_ledger() -> None:
    """Sealed rollouts with results, and results of forgotten rollouts, pass."""
    ledger = await _ledger_with({"r1": "sealed", "r2": "dispatched"})
    data = await _results_bytes({"r1": {"total": 1}, "r0": {"total": 0}})
    store = read_results_sidecar(data, path="results.json", ledger=ledger)
    assert sorted(rid for rid, _ in store.items()) == ["r0", "r1"]


@pytest.mark.parametrize(
    ("results", "problem"),
    [({}, "sealed without a result ['r1']"), ({"r1": {}, "r2": {}}, "unfinished rollout ['r2']")],
    ids=["sealed-without-result", "result-for-unfinished"],
)
async def test_the_sidecar_reader_refuses_results_that_disagree_with_the_ledger(
    results: dict[str, dict[str, Any]], problem: str
) -> None:
    """A sealed rollout without a result, or a result of an unfinished one, is corrupt."""
    ledger = await _ledger_with({"r1": "sealed", "r2": "dispatched"})
    data = await _results_bytes(results)
    with pytest.raises(CorruptCheckpoint, match=re.escape(problem)):
        read_results_sidecar(data, path="results.json", ledger=ledger)
