"""Tests for envckpt.trainer.candidate: the trainer-side check of one snapshot before Gym.

``snapshot`` writes a small published snapshot by hand, the way the
snapshotter lays it out (ledger, data-plane copy, results sidecar, Gym
manifest, one agent's records, MANIFEST.json last). Each test damages one
trainer-side file and expects ``check_candidate`` to refuse the snapshot
with ``CorruptCheckpoint``, leaving no staged data-plane copy behind.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from envckpt.episodes import EnvironmentEpisode
from envckpt.errors import CorruptCheckpoint
from envckpt.facade.manifest import GymSnapshotManifest, InstanceRecord, write_manifest
from envckpt.participant import store
from envckpt.trainer.barrier import Cut, SectionKind
from envckpt.trainer.candidate import check_candidate
from envckpt.trainer.dataplane import DataPlaneCorrupt, SqliteDataPlane
from envckpt.trainer.layout import DATA_PLANE_NAME, LEDGER_NAME, SIDECAR_DIR
from envckpt.trainer.ledger import RecoveryLedger
from envckpt.trainer.ledger_entry import LedgerCorrupt
from envckpt.trainer.results import RESULTS_SIDECAR, ResultStore, read_results_sidecar
from envckpt.trainer.snapshot_manifest import (
    MANIFEST_NAME,
    build_snapshot_manifest,
    write_snapshot_manifest,
)

from helpers.snapshot_corruption import CONTENT_CORRUPTIONS, ENVIRONMENT_REFUSED, reseal

CHECKPOINT_ID = "rollouts-1"
INSTANCE = "math/replica-0"
RUNNING = EnvironmentEpisode("run", 0)
READERS = {RESULTS_SIDECAR: read_results_sidecar}


async def snapshot(root: Path) -> Path:
    """A published snapshot: ``run`` held on the instance (row k-run), ``done`` sealed."""
    path = root / "snapshots" / CHECKPOINT_ID
    path.mkdir(parents=True)
    cut = Cut(SectionKind.MUTATION)
    ledger = RecoveryLedger()
    for rollout_id in ("run", "done"):
        ledger.reserve(cut, rollout_id, INSTANCE)
        ledger.dispatch(cut, rollout_id)
        ledger.add_staging_keys(cut, rollout_id, [f"k-{rollout_id}"])
    ledger.seal(cut, "done")
    ledger.save(path / LEDGER_NAME)
    with SqliteDataPlane(root / "writer.sqlite") as plane:
        plane.put(cut, "k-run", "run", b"tokens of run")
        plane.put(cut, "k-done", "done", b"tokens of done")
        await plane.snapshot_to(cut, path / DATA_PLANE_NAME)
    results = ResultStore()
    results.record(cut, "done", {"reward": 1.0})
    (path / SIDECAR_DIR).mkdir()
    (path / SIDECAR_DIR / RESULTS_SIDECAR).write_bytes(results.to_bytes(cut))
    store.write_checkpoint(
        path / "gym-instances" / INSTANCE,
        kind="agent",
        instance="agent",
        checkpoint_id=CHECKPOINT_ID,
        records=[store.to_record(RUNNING, {"turns": ["hello"]})],
    )
    record = InstanceRecord(episodes=(RUNNING,), staging_keys=("k-run",), participants=("agent",))
    write_manifest(path, GymSnapshotManifest(CHECKPOINT_ID, {INSTANCE: record}))
    manifest = build_snapshot_manifest(
        path, checkpoint_id=CHECKPOINT_ID, created_at=1_800_000_000.0, metrics={}
    )
    write_snapshot_manifest(path, manifest)
    return path


def staged_copies(live: Path) -> list[Path]:
    return sorted(live.parent.glob(f".{live.name}.restore-*"))


def refused(path: Path, live: Path, error: type[CorruptCheckpoint] = CorruptCheckpoint) -> str:
    """check_candidate must refuse ``path`` with ``error`` and leave nothing staged."""
    with pytest.raises(error) as caught:
        check_candidate(path, data_plane_path=live, sidecar_readers=READERS)
    assert staged_copies(live) == []
    assert not live.exists()
    return str(caught.value)


@pytest.fixture
async def candidate(tmp_path: Path) -> Path:
    return await snapshot(tmp_path)


@pytest.fixture
def live(tmp_path: Path) -> Path:
    return tmp_path / "run" / "dataplane.sqlite"


@pytest.fixture(autouse=True)
def _live_dir(live: Path) -> None:
    live.parent.mkdir(parents=True, exist_ok=True)


async def test_an_intact_snapshot_is_checked_and_its_data_plane_waits_staged(
    candidate: Path, live: Path
) -> None:
    """Every file passes: the ledger, sidecars and Gym manifest are parsed; nothing is installed."""
    checked = check_candidate(candidate, data_plane_path=live, sidecar_readers=READERS)
    assert checked.path == candidate and checked.manifest.checkpoint_id == CHECKPOINT_ID
    assert {e.rollout_id for e in checked.ledger.entries()} == {"run", "done"}
    assert isinstance(checked.sidecars[RESULTS_SIDECAR], ResultStore)
    assert checked.gym_manifest is not None
    assert checked.gym_manifest.continued_attempts() == {(INSTANCE, "run", 0)}
    assert not live.exists() and staged_copies(live) == [checked.staged_plane.copy]
    checked.discard()
    assert staged_copies(live) == []


async def test_the_staged_data_plane_installs_as_the_live_one(candidate: Path, live: Path) -> None:
    """Once chosen, the staged copy becomes the live data plane with the snapshot's rows."""
    checked = check_candidate(candidate, data_plane_path=live, sidecar_readers=READERS)
    with checked.staged_plane.install() as plane:
        assert plane.keys() == {"k-run", "k-done"}
    assert staged_copies(live) == []


async def test_a_snapshot_without_a_gym_manifest_needs_no_staging_rows(
    candidate: Path, live: Path
) -> None:
    """No gym_checkpoint.json (a backend without rollout state): nothing to cross-check."""
    (candidate / "gym_checkpoint.json").unlink()
    reseal(candidate)
    checked = check_candidate(candidate, data_plane_path=live)
    assert checked.gym_manifest is None and checked.sidecars == {}
    checked.discard()


# ------------------------------------------------------- 1. MANIFEST.json


async def test_a_file_whose_bytes_changed_is_refused(candidate: Path, live: Path) -> None:
    """A byte flipped in the ledger, digest not recomputed: checksum mismatch."""
    path = candidate / LEDGER_NAME
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    assert "checksum mismatch in ledger.json" in refused(candidate, live)


async def test_a_file_the_manifest_does_not_list_is_refused(candidate: Path, live: Path) -> None:
    """A stray file makes the snapshot differ from what was published."""
    (candidate / "stray.txt").write_text("left behind")
    assert "unlisted=['stray.txt']" in refused(candidate, live)


async def test_a_snapshot_without_its_manifest_is_refused(candidate: Path, live: Path) -> None:
    """No MANIFEST.json: nothing vouches for the files."""
    (candidate / MANIFEST_NAME).unlink()
    refused(candidate, live)


# --------------------------------------------------------- 2. ledger.json


async def test_a_ledger_with_invalid_content_is_refused(candidate: Path, live: Path) -> None:
    """An entry with an unknown status, every digest recomputed: LedgerCorrupt."""
    CONTENT_CORRUPTIONS["ledger-entry-with-unknown-status"][1](candidate)
    refused(candidate, live, LedgerCorrupt)


async def test_a_missing_ledger_is_refused(candidate: Path, live: Path) -> None:
    """A snapshot whose ledger is gone (and resealed without it) is refused."""
    (candidate / LEDGER_NAME).unlink()
    reseal(candidate)
    assert "ledger file is missing" in refused(candidate, live, LedgerCorrupt)


# ------------------------------------------------------------- 3. sidecars


async def test_a_sidecar_with_a_reader_must_be_there(candidate: Path, live: Path) -> None:
    """A sidecar the caller reads but the snapshot lacks is refused, named."""
    (candidate / SIDECAR_DIR / RESULTS_SIDECAR).unlink()
    reseal(candidate)
    assert f"sidecar {RESULTS_SIDECAR} is missing" in refused(candidate, live)


@pytest.mark.parametrize(
    "corruption", ["results-not-a-mapping", "results-for-an-unfinished-rollout"]
)
async def test_a_sidecar_its_reader_refuses_refuses_the_snapshot(
    candidate: Path, live: Path, corruption: str
) -> None:
    """Bad results, or results that disagree with the ledger: refused."""
    CONTENT_CORRUPTIONS[corruption][1](candidate)
    refused(candidate, live)


async def test_each_reader_gets_the_bytes_its_path_and_the_parsed_ledger(
    candidate: Path, live: Path
) -> None:
    """A reader sees the sidecar's bytes and path and the ledger saved with it."""
    seen: list[tuple[bytes, str, int]] = []

    def reader(data: bytes, *, path: str, ledger: RecoveryLedger) -> object:
        seen.append((data, path, len(ledger)))
        return "parsed"

    checked = check_candidate(
        candidate, data_plane_path=live, sidecar_readers={"results.json": reader}
    )
    sidecar = candidate / SIDECAR_DIR / RESULTS_SIDECAR
    assert seen == [(sidecar.read_bytes(), str(sidecar), 2)]
    assert checked.sidecars == {"results.json": "parsed"}
    checked.discard()


# ---------------------------------------------------- 4. gym_checkpoint.json


@pytest.mark.parametrize(
    "corruption", ["gym-manifest-continues-an-unknown-attempt", "ledger-forgets-a-saved-rollout"]
)
async def test_a_gym_manifest_continuing_what_the_ledger_cannot_is_refused(
    candidate: Path, live: Path, corruption: str
) -> None:
    """A continued attempt that is not the ledger's current held one: refused, naming the file."""
    CONTENT_CORRUPTIONS[corruption][1](candidate)
    message = refused(candidate, live)
    assert "the Gym manifest continues rollouts the ledger cannot" in message
    assert "gym_checkpoint.json" in message


# ------------------------------------------------------------- 5. data plane


async def test_a_damaged_data_plane_is_refused(candidate: Path, live: Path) -> None:
    """A truncated data-plane copy fails SQLite's checks: DataPlaneCorrupt."""
    CONTENT_CORRUPTIONS["dataplane-truncated"][1](candidate)
    refused(candidate, live, DataPlaneCorrupt)


async def test_a_data_plane_lacking_kept_rows_is_refused_and_unstaged(
    candidate: Path, live: Path
) -> None:
    """Rows the Gym manifest keeps are missing: refused, and the staged copy is removed."""
    CONTENT_CORRUPTIONS["dataplane-lost-kept-rows"][1](candidate)
    message = refused(candidate, live)
    assert "the data plane lacks 1 staging rows" in message and "k-run" in message


# ---------------------------------------------------------------- boundaries


async def test_the_first_problem_in_check_order_is_the_one_named(
    candidate: Path, live: Path
) -> None:
    """A bad ledger and a bad data plane: the ledger (step 2) is named, not step 5."""
    CONTENT_CORRUPTIONS["dataplane-truncated"][1](candidate)
    CONTENT_CORRUPTIONS["ledger-entry-with-unknown-status"][1](candidate)
    refused(candidate, live, LedgerCorrupt)


async def test_participant_records_are_left_to_gym(candidate: Path, live: Path) -> None:
    """Records only Gym can judge pass the trainer-side check (digests all agree)."""
    for name in sorted(ENVIRONMENT_REFUSED):
        CONTENT_CORRUPTIONS[name][1](candidate)
    check_candidate(candidate, data_plane_path=live, sidecar_readers=READERS).discard()


async def test_a_read_error_is_no_verdict_on_the_content(candidate: Path, live: Path) -> None:
    """An OSError while reading (here the ledger is a directory) propagates as is."""
    (candidate / LEDGER_NAME).unlink()
    (candidate / LEDGER_NAME).mkdir()
    reseal(candidate)
    with pytest.raises(OSError) as caught:
        check_candidate(candidate, data_plane_path=live, sidecar_readers=READERS)
    assert not isinstance(caught.value, CorruptCheckpoint)
    assert os.path.isdir(candidate / LEDGER_NAME)
