"""Tests for envckpt.snapshots.details: one snapshot's participants and restore outlook."""

from __future__ import annotations

from pathlib import Path

import pytest

from envckpt.participant import store
from envckpt.snapshots.details import describe, participant_dirs
from envckpt.trainer.catalog import SnapshotCatalog
from envckpt.trainer.layout import LEDGER_NAME
from envckpt.trainer.ledger import RecoveryLedger

from helpers.snapshot_files import flip_byte
from helpers.snapshot_rig import Rig, mid_flight, running
from helpers.stepped_root import stepped_root


@pytest.fixture
async def root(tmp_path: Path) -> tuple[Path, list[str]]:
    return await stepped_root(tmp_path, steps=(3, 4))


async def test_every_participant_of_every_instance_is_listed_with_its_records(
    root: tuple[Path, list[str]],
) -> None:
    """Three participants per instance, each with the record count its manifest says."""
    path, ids = root
    entry = SnapshotCatalog(path).entry(ids[0])
    details = describe(entry)
    assert details.problems == []
    found = {(p.instance_id, p.kind, p.name): p for p in details.participants}
    assert set(found) == {
        (instance, kind, name)
        for instance in ("shard/replica-0", "shard/replica-1")
        for kind, name in (
            ("agent", "simple_agent"),
            ("model", "policy_model"),
            ("resources", "tool_resources"),
        )
    }
    for (instance, _, _), part in found.items():
        assert part.problem == "" and part.size > 0
        if part.kind == "agent":
            assert part.records == entry.instances[instance][0]


async def test_the_outlook_sorts_every_ledger_rollout_as_a_restore_would(
    root: tuple[Path, list[str]],
) -> None:
    """Continued are the Gym manifest's episodes; the rest wait, restart or stay finished."""
    path, ids = root
    entry = SnapshotCatalog(path).entry(ids[0])
    outlook = describe(entry).outlook
    assert outlook is not None and entry.gym_manifest is not None
    continued = {rid for _, rid, _ in entry.gym_manifest.continued_attempts()}
    assert set(outlook.continued) == continued and continued
    ledger = RecoveryLedger.load(entry.path / LEDGER_NAME)
    groups = (outlook.continued, outlook.restarted, outlook.waiting, outlook.finished)
    assert sorted(rid for group in groups for rid in group) == sorted(
        e.rollout_id for e in ledger.entries()
    )
    assert outlook.waiting, "the job held rollouts back (two in flight per instance)"


async def test_rollouts_a_restart_only_tool_cannot_capture_restart_from_their_task(
    tmp_path: Path,
) -> None:
    """With a restart_only tool every in-flight rollout is a restart, none continues."""
    rig = Rig(tmp_path, resources_mode="restart_only", tool_latency=0.03).fresh()
    try:
        async with running(rig.job(rig.tasks(4, turns=12))):
            await mid_flight(rig)
            result = await rig.snapshotter.take()
    finally:
        await rig.crash()
        rig.snapshotter.lock.release()
    details = describe(SnapshotCatalog(rig.snapshot_root).entry(result.checkpoint_id))
    assert details.outlook is not None
    assert details.outlook.continued == () and len(details.outlook.restarted) == 4
    assert details.entry.restarts == 4


async def test_damaged_participant_and_ledger_files_are_problems_not_crashes(
    root: tuple[Path, list[str]],
) -> None:
    """A participant manifest or a ledger that does not read is reported; the rest is shown."""
    path, ids = root
    entry = SnapshotCatalog(path).entry(ids[0])
    [(_, _, directory)] = [
        d for d in participant_dirs(entry.path, "shard/replica-1") if d[0] == "model"
    ]
    flip_byte(directory / store.MANIFEST_NAME)
    flip_byte(entry.path / LEDGER_NAME)
    details = describe(entry)
    [bad] = [p for p in details.participants if p.problem]
    assert (bad.instance_id, bad.kind, bad.records) == ("shard/replica-1", "model", 0)
    assert details.outlook is None
    assert [problem.split(":")[0] for problem in details.problems] == [LEDGER_NAME]
    assert len(details.participants) == 6
