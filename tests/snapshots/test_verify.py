"""Tests for envckpt.snapshots.verify: every digest and every file's content, offline."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from envckpt.facade.manifest import read_manifest
from envckpt.participant import store
from envckpt.snapshots.verify import CONTINUED, TRAINER_FILES, verify_snapshot_dir
from envckpt.trainer.catalog import SnapshotCatalog

from helpers.snapshot_corruption import (
    CONTENT_CORRUPTIONS,
    ENVIRONMENT_REFUSED,
    records_file,
    reseal,
)
from helpers.snapshot_files import flip_byte
from helpers.stepped_root import stepped_root

TRAINER_SIDE = sorted(set(CONTENT_CORRUPTIONS) - ENVIRONMENT_REFUSED)


@pytest.fixture
async def snapshot(tmp_path: Path) -> Path:
    root, ids = await stepped_root(tmp_path, steps=(5,))
    return SnapshotCatalog(root).entry(ids[0]).path


def rewrite_agent_records(snapshot: Path, change: object) -> Path:
    """Rewrite one agent's records (its manifest and digest valid) and reseal MANIFEST.json."""
    records = records_file(snapshot)
    directory = records.parent
    manifest = json.loads((directory / store.MANIFEST_NAME).read_bytes())
    rows = [json.loads(line) for line in records.read_text().splitlines() if line.strip()]
    assert callable(change)
    rows = change(rows)
    shutil.rmtree(directory)
    store.write_checkpoint(
        directory.parents[2],
        kind=manifest["kind"],
        instance=manifest["instance"],
        checkpoint_id=manifest["checkpoint_id"],
        records=rows,
    )
    reseal(snapshot)
    return directory


def test_an_untouched_snapshot_passes_every_check(snapshot: Path) -> None:
    """Trainer files, every participant's records and the continued episodes all pass."""
    report = verify_snapshot_dir(snapshot)
    assert report.passed, report.failed()
    names = [check.name for check in report.checks]
    assert names[0] == TRAINER_FILES and names[-1] == CONTINUED
    records = [name for name in names if name.startswith("records ")]
    assert len(records) == 6  # 2 instances x (model, agent, resources)
    assert "records shard/replica-0 agent/simple_agent" in records
    episodes = sum(len(r.episodes) for r in read_manifest(snapshot).instances.values())
    assert report.checks[-1].detail == f"{episodes} held by their agents"


def test_a_flipped_byte_fails_the_digest_and_the_records_check(snapshot: Path) -> None:
    """One changed byte in a records file fails both the manifest digest and the record scan."""
    records = records_file(snapshot)
    flip_byte(records)
    report = verify_snapshot_dir(snapshot)
    assert not report.passed
    failed = {check.name: check.detail for check in report.failed()}
    relative = records.relative_to(snapshot).as_posix()
    assert failed[TRAINER_FILES] == f"checksum mismatch in {relative} ({relative})"
    [records_check] = [name for name in failed if name.startswith("records ")]
    assert records_check.endswith("agent/simple_agent")


@pytest.mark.parametrize("corruption", TRAINER_SIDE)
def test_content_corruption_with_every_digest_recomputed_fails(
    snapshot: Path, corruption: str
) -> None:
    """A wrong file whose checksums were all recomputed still fails: its content is checked."""
    _, corrupt = CONTENT_CORRUPTIONS[corruption]
    corrupt(snapshot)
    report = verify_snapshot_dir(snapshot)
    assert not report.passed
    # A forged Gym manifest also continues an attempt no agent holds: check 3 says so too.
    assert report.failed()[0].name == TRAINER_FILES, report.failed()
    assert {check.name for check in report.failed()} <= {TRAINER_FILES, CONTINUED}


def test_an_agent_that_lost_a_continued_episode_fails_the_continued_check(
    snapshot: Path,
) -> None:
    """Records that verify but miss an episode the Gym manifest continues are refused."""
    lost: list[str] = []

    def drop_first(rows: list[dict[str, object]]) -> list[dict[str, object]]:
        episode = rows[0]["episode_id"]
        assert isinstance(episode, dict)
        lost.append(str(episode["rollout_id"]))
        return rows[1:]

    rewrite_agent_records(snapshot, drop_first)
    report = verify_snapshot_dir(snapshot)
    failed = {check.name: check.detail for check in report.failed()}
    assert list(failed) == [CONTINUED]
    assert failed[CONTINUED].startswith("1 held by no agent: shard/replica-0:" + lost[0])


def test_a_record_outside_gyms_envelope_fails_its_records_check(snapshot: Path) -> None:
    """A records line that is JSON but not an episode record is named, with its number."""
    kept: list[int] = []

    def append_foreign(rows: list[dict[str, object]]) -> list[dict[str, object]]:
        kept.append(len(rows))
        return [*rows, {"not": "a record"}]

    rewrite_agent_records(snapshot, append_foreign)
    report = verify_snapshot_dir(snapshot)
    failed = {check.name: check.detail for check in report.failed()}
    detail = failed.pop("records shard/replica-0 agent/simple_agent")
    assert detail.startswith(f"record {kept[0] + 1}: malformed record with keys ['not']")
    # Its other records were not read past the bad one, so the agent holds none of them.
    assert list(failed) == [CONTINUED]


def test_on_bytes_hears_the_whole_snapshot(snapshot: Path) -> None:
    """The progress callback adds up to the snapshot's listed size."""
    heard: list[int] = []
    verify_snapshot_dir(snapshot, on_bytes=heard.append)
    assert sum(heard) == SnapshotCatalog(snapshot.parents[1]).entry(snapshot.name).size


def test_a_snapshot_without_gym_state_checks_only_the_trainer_files(snapshot: Path) -> None:
    """No gym_checkpoint.json: nothing to read per participant, the trainer files decide."""
    (snapshot / "gym_checkpoint.json").unlink()
    shutil.rmtree(snapshot / "gym-instances")
    reseal(snapshot)
    report = verify_snapshot_dir(snapshot)
    assert [check.name for check in report.checks] == [TRAINER_FILES]
