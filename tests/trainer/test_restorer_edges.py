"""Edges of envckpt.trainer.restorer the mutation campaign found untested.

What the operator is told: the action of each kind of failed environment
restore, the error and log line of a snapshot Gym refused, the refused count in
the restore's record, the root an ``AllSnapshotsRefused`` names, and an earlier
refusal whose reason was lost. The snapshots here hold no Gym state (an empty
ledger and data plane), so a backend that restores nothing can take them.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from structlog.testing import capture_logs

from envckpt import crashpoints
from envckpt.episodes import EnvironmentEpisode
from envckpt.errors import (
    CorruptCheckpoint,
    DeadlineExceeded,
    GymCheckpointUnavailable,
    IllegalTransition,
    ProtocolViolation,
)
from envckpt.interfaces import NoEnvironmentCheckpoint, RestoredEnvironmentRollouts
from envckpt.inventory import SnapshotContents
from envckpt.telemetry.restore_record import RestoreTelemetry
from envckpt.telemetry.snapshot_record import SnapshotTelemetry
from envckpt.trainer.barrier import Cut, DataPlaneBarrier, SectionKind
from envckpt.trainer.dataplane import SqliteDataPlane
from envckpt.trainer.job_errors import AllSnapshotsRefused, RestoreFailed
from envckpt.trainer.layout import DATA_PLANE_NAME, LEDGER_NAME, LOCK_NAME, SIDECAR_DIR
from envckpt.trainer.ledger import RecoveryLedger
from envckpt.trainer.restorer import Restorer
from envckpt.trainer.root_guard import RootLock
from envckpt.trainer.snapshot_manifest import (
    MANIFEST_NAME,
    build_snapshot_manifest,
    write_snapshot_manifest,
)

KEPT = "the snapshot was kept"
RESTART_TRIES_AGAIN = "read the reason above; the snapshot was kept, so a restart tries it again"


class RestoresNothing(NoEnvironmentCheckpoint):
    """A backend without rollout state that accepts a snapshot holding none.

    It says its one instance took half a second, as a measuring backend would.
    """

    @contextlib.asynccontextmanager
    async def restored(self, checkpoint_path: Path) -> AsyncIterator[RestoredEnvironmentRollouts]:
        del checkpoint_path
        yield RestoredEnvironmentRollouts(instance_seconds=(("math", 0.5),))


class Records:
    """A telemetry observer keeping every restore record."""

    def __init__(self) -> None:
        self.restores: list[RestoreTelemetry] = []

    def snapshot_ended(self, record: SnapshotTelemetry) -> None:
        del record

    def restore_ended(self, record: RestoreTelemetry) -> None:
        self.restores.append(record)


class FailsWith(NoEnvironmentCheckpoint):
    """A backend whose restore fails with ``error``."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    @contextlib.asynccontextmanager
    async def restored(self, checkpoint_path: Path) -> AsyncIterator[RestoredEnvironmentRollouts]:
        del checkpoint_path
        raise self.error
        yield RestoredEnvironmentRollouts()  # pragma: no cover


async def publish(
    root: Path, checkpoint_id: str, *, created_at: float, sidecar: bytes | None = None
) -> Path:
    """A published snapshot with an empty ledger and data plane (and ``notes.json``)."""
    path = root / "snapshots" / checkpoint_id
    path.mkdir(parents=True)
    if sidecar is not None:
        (path / SIDECAR_DIR).mkdir()
        (path / SIDECAR_DIR / "notes.json").write_bytes(sidecar)
    RecoveryLedger().save(path / LEDGER_NAME)
    with SqliteDataPlane(root / f"{checkpoint_id}.writer.sqlite") as plane:
        await plane.snapshot_to(Cut(SectionKind.MUTATION), path / DATA_PLANE_NAME)
    (root / f"{checkpoint_id}.writer.sqlite").unlink()
    manifest = build_snapshot_manifest(
        path, checkpoint_id=checkpoint_id, created_at=created_at, metrics={}
    )
    write_snapshot_manifest(path, manifest)
    return path


def damage(snapshot: Path) -> None:
    """Flip one byte of the ledger: the snapshot's own manifest no longer vouches for it."""
    ledger = snapshot / LEDGER_NAME
    data = bytearray(ledger.read_bytes())
    data[len(data) // 2] ^= 0x01
    ledger.write_bytes(bytes(data))


def restorer(root: Path, env: NoEnvironmentCheckpoint, **options: Any) -> Restorer:
    return Restorer(root, env_checkpoint=env, barrier=DataPlaneBarrier(), **options)


async def three_snapshots_two_refused(root: Path) -> None:
    """rollouts-1 intact; the newer rollouts-2 and rollouts-3 damaged."""
    for n in (1, 2, 3):
        path = await publish(root, f"rollouts-{n}", created_at=1_800_000_000.0 + n)
        if n > 1:
            damage(path)


async def failed_restore(tmp_path: Path, error: Exception) -> tuple[Path, RestoreFailed]:
    root = tmp_path / "snap"
    path = await publish(root, "rollouts-1", created_at=1_800_000_000.0)
    with pytest.raises(RestoreFailed) as caught:
        await restorer(root, FailsWith(error)).restore(data_plane_path=tmp_path / "live.sqlite")
    return path, caught.value


async def test_the_refused_count_in_the_record_counts_only_refused_snapshots(
    tmp_path: Path,
) -> None:
    """Two newer snapshots refused, the oldest chosen: the record says 2 refused."""
    root = tmp_path / "snap"
    await three_snapshots_two_refused(root)
    records = Records()
    report = await restorer(root, RestoresNothing(), observers=[records]).restore(
        data_plane_path=tmp_path / "live.sqlite"
    )
    with report.data_plane:
        assert report.path is not None and report.path.name == "rollouts-1"
    assert records.restores == [report.telemetry]
    record = records.restores[0]
    assert (record.snapshot, record.considered, record.refused) == ("rollouts-1", 3, 2)
    assert (record.cleared_rows, record.instance_count) == (0, 1)


@pytest.mark.parametrize(
    ("error", "action"),
    [
        (
            IllegalTransition(machine="gym", instance="math", state="restored", trigger="restore"),
            "restart the Gym servers: a restore needs fresh Gym processes; " + KEPT,
        ),
        (
            GymCheckpointUnavailable("no answer"),
            "check that every Gym server is up and reachable, then restart the job; " + KEPT,
        ),
        (
            DeadlineExceeded("too slow", deadline_ts=0.0),
            "check that every Gym server is up and reachable, then restart the job; " + KEPT,
        ),
        (
            RuntimeError("something else"),
            RESTART_TRIES_AGAIN,
        ),
    ],
)
async def test_each_kind_of_failed_restore_says_what_to_do(
    tmp_path: Path, error: Exception, action: str
) -> None:
    """The action names the next step for the error's kind; the message names the snapshot."""
    _, failure = await failed_restore(tmp_path, error)
    assert failure.action == action
    assert failure.message == "restoring snapshot rollouts-1 into the environment failed"
    assert failure.reason == f"{type(error).__name__}: {error}"


async def test_an_incompatible_deployment_is_told_which_snapshot_to_move(tmp_path: Path) -> None:
    """IncompatibleCheckpoint: start with the snapshot's deployment, or move that path aside."""
    root = tmp_path / "snap"
    path = await publish(root, "rollouts-1", created_at=1_800_000_000.0)
    with pytest.raises(RestoreFailed) as caught:
        await restorer(root, NoEnvironmentCheckpoint()).restore(
            data_plane_path=tmp_path / "live.sqlite"
        )
    assert caught.value.action == (
        "start the job with the Gym deployment the snapshot was taken with (same instances "
        f"and participants), or move {path} out of snapshots/ to restore an older one"
    )


async def test_a_snapshot_gym_refused_is_moved_aside_and_the_operator_told(
    tmp_path: Path,
) -> None:
    """Gym refused the content: the message says where it went, the action what to do,
    and one error line carries the snapshot, reason and action."""
    error = CorruptCheckpoint("bad records")
    with capture_logs() as logs:
        _, failure = await failed_restore(tmp_path, error)
    moved = tmp_path / "snap" / "refused" / "rollouts-1"
    assert failure.message == (
        f"Gym refused the content of snapshot rollouts-1; it was moved to {moved}"
    )
    assert failure.action == (
        "restart the Gym servers and the trainer: the next start restores the "
        "previous snapshot (Gym processes that saw a restore cannot take another)"
    )
    [line] = [e for e in logs if e["log_level"] == "error"]
    assert line == {
        "event": "environment restore failed",
        "log_level": "error",
        "snapshot": "rollouts-1",
        "reason": "CorruptCheckpoint: bad records",
        "action": failure.action,
    }


async def test_every_snapshot_refused_names_the_root_and_what_to_do(tmp_path: Path) -> None:
    """AllSnapshotsRefused carries the root and ends its first line with the way out."""
    root = tmp_path / "snap"
    damage(await publish(root, "rollouts-1", created_at=1_800_000_000.0))
    with pytest.raises(AllSnapshotsRefused) as caught:
        await restorer(root, RestoresNothing()).restore(data_plane_path=tmp_path / "live.sqlite")
    assert caught.value.root == str(root)
    head = str(caught.value).splitlines()[0]
    assert head.endswith(
        "fix or remove them, or start with --allow-fresh-start (allow_fresh_start=True) "
        "to begin from scratch:"
    )


async def test_a_fresh_start_as_allowed_logs_the_snapshots_it_gives_up(tmp_path: Path) -> None:
    """allow_fresh_start over two refused snapshots: one warning naming both, newest first."""
    root = tmp_path / "snap"
    for n in (1, 2):
        damage(await publish(root, f"rollouts-{n}", created_at=1_800_000_000.0 + n))
    with capture_logs() as logs:
        report = await restorer(root, RestoresNothing(), allow_fresh_start=True).restore(
            data_plane_path=tmp_path / "live.sqlite"
        )
    report.data_plane.close()
    assert [e for e in logs if e["log_level"] == "warning" and "refused" in e] == [
        {
            "event": "every snapshot refused; starting from scratch as allowed (allow_fresh_start)",
            "log_level": "warning",
            "refused": ["rollouts-2", "rollouts-1"],
        }
    ]


async def test_an_earlier_refusal_without_its_reason_says_so(tmp_path: Path) -> None:
    """A snapshot in refused/ whose reason file is gone is listed as 'no reason recorded'."""
    root = tmp_path / "snap"
    damage(await publish(root, "rollouts-1", created_at=1_800_000_000.0))
    first = restorer(root, RestoresNothing(), allow_fresh_start=True)
    (await first.restore(data_plane_path=tmp_path / "live.sqlite")).data_plane.close()
    (root / "refused" / "rollouts-1.reason.txt").unlink()
    with pytest.raises(AllSnapshotsRefused) as caught:
        await restorer(root, RestoresNothing()).restore(data_plane_path=tmp_path / "live.sqlite")
    assert str(caught.value).splitlines()[1:] == [
        "  refused earlier rollouts-1: no reason recorded"
    ]


@pytest.fixture
def unconfigured_structlog() -> Iterator[None]:
    """A host that never configured structlog (capture_logs elsewhere leaves it configured)."""
    saved = structlog.get_config()
    structlog.reset_defaults()
    yield
    structlog.configure(**saved)


@pytest.mark.usefixtures("unconfigured_structlog")
async def test_every_restore_line_is_logged_on_the_restorer_logger(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Operators filter on ``envckpt.restorer`` (stdlib logging, structlog unset): a failed
    restore, a refused snapshot, a fresh start as allowed and a restore all log there."""
    caplog.set_level(logging.INFO, logger="envckpt")
    await failed_restore(tmp_path / "failed", RuntimeError("boom"))
    fresh = tmp_path / "fresh" / "snap"
    damage(await publish(fresh, "rollouts-1", created_at=1_800_000_000.0))
    restored = tmp_path / "restored" / "snap"
    await publish(restored, "rollouts-1", created_at=1_800_000_000.0)
    for root, options in ((fresh, {"allow_fresh_start": True}), (restored, {})):
        report = await restorer(root, RestoresNothing(), **options).restore(
            data_plane_path=root.parent / "live.sqlite"
        )
        report.data_plane.close()
    on_restorer = {
        (r.levelname, r.getMessage().split(" snapshot=")[0].split(" refused=")[0])
        for r in caplog.records
        if r.name == "envckpt.restorer"
    }
    assert on_restorer == {
        ("ERROR", "environment restore failed"),
        ("WARNING", "snapshot refused; trying an older one"),
        ("WARNING", "every snapshot refused; starting from scratch as allowed (allow_fresh_start)"),
        ("INFO", "no usable snapshot; starting fresh removed_debris=0"),
        ("INFO", "restored"),
    }


async def test_a_restore_logs_what_it_refused_and_what_it_restored(tmp_path: Path) -> None:
    """One warning per refused snapshot with its reason, then one info line for the restore."""
    root = tmp_path / "snap"
    await three_snapshots_two_refused(root)
    with capture_logs() as logs:
        report = await restorer(root, RestoresNothing()).restore(
            data_plane_path=tmp_path / "live.sqlite"
        )
    report.data_plane.close()
    refusals = [e for e in logs if e["event"] == "snapshot refused; trying an older one"]
    assert [(e["snapshot"], e["log_level"]) for e in refusals] == [
        ("rollouts-3", "warning"),
        ("rollouts-2", "warning"),
    ]
    assert [e["reason"] for e in refusals] == [why for _, why in report.refused]
    assert [e for e in logs if e["event"] == "restored"] == [
        {
            "event": "restored",
            "log_level": "info",
            "snapshot": "rollouts-1",
            "continued": 0,
            "abandoned": 0,
            "cleared_rows": 0,
            "refused": ["rollouts-3", "rollouts-2"],
        }
    ]


async def test_a_failed_restore_is_recorded_with_its_snapshot_and_error(tmp_path: Path) -> None:
    """The failed restore's record names the snapshot, the counts and the error."""
    root = tmp_path / "snap"
    await publish(root, "rollouts-1", created_at=1_800_000_000.0)
    records = Records()
    with pytest.raises(RestoreFailed):
        await restorer(root, FailsWith(RuntimeError("boom")), observers=[records]).restore(
            data_plane_path=tmp_path / "live.sqlite"
        )
    [record] = records.restores
    assert (record.snapshot, record.considered, record.refused) == ("rollouts-1", 1, 0)
    assert record.failure == "RuntimeError: boom"


async def test_a_fresh_start_over_refused_snapshots_is_recorded_and_logged(
    tmp_path: Path,
) -> None:
    """allow_fresh_start over two refused: the record counts both; the info line says so."""
    root = tmp_path / "snap"
    for n in (1, 2):
        damage(await publish(root, f"rollouts-{n}", created_at=1_800_000_000.0 + n))
    records = Records()
    with capture_logs() as logs:
        report = await restorer(
            root, RestoresNothing(), allow_fresh_start=True, observers=[records]
        ).restore(data_plane_path=tmp_path / "live.sqlite")
    report.data_plane.close()
    [record] = records.restores
    assert (record.considered, record.refused) == (2, 2)
    assert [e for e in logs if e["event"] == "no usable snapshot; starting fresh"] == [
        {
            "event": "no usable snapshot; starting fresh",
            "log_level": "info",
            "removed_debris": 0,
            "refused": 2,
        }
    ]


async def test_a_restore_passes_its_crash_points_in_order(tmp_path: Path) -> None:
    """restore.validated once a snapshot is chosen, restore.after once it landed."""
    root = tmp_path / "snap"
    await publish(root, "rollouts-1", created_at=1_800_000_000.0)
    reached: list[str] = []
    crashpoints.install(reached.append)
    try:
        report = await restorer(root, RestoresNothing()).restore(
            data_plane_path=tmp_path / "live.sqlite"
        )
    finally:
        crashpoints.install(None)
    report.data_plane.close()
    assert reached == ["restore.validated", "restore.environment_restored", "restore.after"]


async def test_the_chosen_snapshot_s_sidecars_reach_the_report(tmp_path: Path) -> None:
    """What each sidecar reader parsed is in report.sidecars."""
    root = tmp_path / "snap"
    await publish(root, "rollouts-1", created_at=1_800_000_000.0, sidecar=b"{}")

    def read_notes(data: bytes, *, path: str, ledger: RecoveryLedger) -> object:
        del path, ledger
        return data.decode()

    readers = {"notes.json": read_notes}
    report = await restorer(root, RestoresNothing(), sidecar_readers=readers).restore(
        data_plane_path=tmp_path / "live.sqlite"
    )
    report.data_plane.close()
    assert report.sidecars == {"notes.json": "{}"}


async def test_foreign_entries_are_reported_as_left_during_a_restore(tmp_path: Path) -> None:
    """A stray file in snapshots/ and a refused snapshot without a verifying manifest are
    each reported as left alone during the restore."""
    root = tmp_path / "snap"
    # Without its manifest, rollouts-2 is ordered by its mtime (now): newer than 2023.
    await publish(root, "rollouts-1", created_at=1_700_000_000.0)
    unverified = await publish(root, "rollouts-2", created_at=1_700_000_001.0)
    (unverified / MANIFEST_NAME).unlink()
    (root / "snapshots" / "notes.txt").write_text("mine")
    with capture_logs() as logs:
        report = await restorer(root, RestoresNothing()).restore(
            data_plane_path=tmp_path / "live.sqlite"
        )
    report.data_plane.close()
    left = {e["path"]: e["during"] for e in logs if e["event"] == "left a foreign entry"}
    assert left == {
        str(root / "snapshots" / "notes.txt"): "restore",
        str(unverified): "restore",
    }


def root_is_free(root: Path) -> bool:
    """Whether another open of the lock file could take it now (flock is per open file)."""
    fd = os.open(root / LOCK_NAME, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


async def test_the_restore_holds_the_root_until_its_report_lets_go(tmp_path: Path) -> None:
    """A landed restore hands its lock to the report; released, the root is free."""
    root = tmp_path / "snap"
    await publish(root, "rollouts-1", created_at=1_800_000_000.0)
    report = await restorer(root, RestoresNothing()).restore(
        data_plane_path=tmp_path / "live.sqlite"
    )
    report.data_plane.close()
    assert report.lock is not None and not root_is_free(root)
    report.lock.release()
    assert root_is_free(root)


async def test_a_failed_restore_lets_go_of_its_own_lock_only(tmp_path: Path) -> None:
    """Failing, a restore releases the lock it took, and leaves a caller's lock held."""
    await failed_restore(tmp_path, RuntimeError("boom"))
    root = tmp_path / "snap"
    assert root_is_free(root)
    lock = RootLock.acquire(root)
    with pytest.raises(RestoreFailed):
        await restorer(root, FailsWith(RuntimeError("boom")), lock=lock).restore(
            data_plane_path=tmp_path / "live.sqlite"
        )
    assert lock.held and not root_is_free(root)
    lock.release()
    assert root_is_free(root)


async def test_a_restore_under_the_caller_s_lock_takes_no_hold_of_its_own(
    tmp_path: Path,
) -> None:
    """Given a lock, the report carries it; one release by the caller frees the root."""
    root = tmp_path / "snap"
    await publish(root, "rollouts-1", created_at=1_800_000_000.0)
    lock = RootLock.acquire(root)
    report = await restorer(root, RestoresNothing(), lock=lock).restore(
        data_plane_path=tmp_path / "live.sqlite"
    )
    report.data_plane.close()
    assert report.lock is lock
    lock.release()
    assert root_is_free(root)


async def test_a_fresh_start_reports_the_debris_it_removed_and_its_record(
    tmp_path: Path,
) -> None:
    """No snapshot, one crashed temporary directory: removed, counted, and recorded."""
    root = tmp_path / "snap"
    (root / ".tmp" / "envckpt-rollouts-crashed").mkdir(parents=True)
    records = Records()
    report = await restorer(root, RestoresNothing(), observers=[records]).restore(
        data_plane_path=tmp_path / "live.sqlite"
    )
    report.data_plane.close()
    assert report.path is None and report.debris_removed == 1
    assert records.restores == [report.telemetry]


@pytest.mark.parametrize("snapshots", [0, 1])
async def test_the_report_s_ledger_checks_staging_rows_in_the_report_s_data_plane(
    tmp_path: Path, snapshots: int
) -> None:
    """Fresh or restored, the ledger handed back checks later snapshots against the live
    data plane: a kept staging key with no row there is refused."""
    root = tmp_path / "snap"
    if snapshots:
        await publish(root, "rollouts-1", created_at=1_800_000_000.0)
    report = await restorer(root, RestoresNothing()).restore(
        data_plane_path=tmp_path / "live.sqlite"
    )
    cut = Cut(SectionKind.MUTATION)
    report.ledger.reserve(cut, "r", "math")
    report.ledger.dispatch(cut, "r")
    contents = SnapshotContents(
        "rollouts-2",
        exported={"math": (EnvironmentEpisode("r", 0),)},
        restarts={},
        staging_keys={"math": ("no-such-row",)},
    )
    with report.data_plane, pytest.raises(ProtocolViolation):
        await report.ledger.verify_against_cut(cut, contents)
