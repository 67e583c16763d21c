"""Edges of envckpt.trainer.restorer the mutation campaign found untested.

What the operator is told: the action of each kind of failed environment
restore, the error and log line of a snapshot Gym refused, the refused count in
the restore's record, the root an ``AllSnapshotsRefused`` names, and an earlier
refusal whose reason was lost. The snapshots here hold no Gym state (an empty
ledger and data plane), so a backend that restores nothing can take them.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import structlog
from structlog.testing import capture_logs

from envckpt.errors import (
    CorruptCheckpoint,
    DeadlineExceeded,
    GymCheckpointUnavailable,
    IllegalTransition,
)
from envckpt.interfaces import NoEnvironmentCheckpoint, RestoredEnvironmentRollouts
from envckpt.trainer.barrier import Cut, DataPlaneBarrier, SectionKind
from envckpt.trainer.dataplane import SqliteDataPlane
from envckpt.trainer.job_errors import AllSnapshotsRefused, RestoreFailed
from envckpt.trainer.layout import DATA_PLANE_NAME, LEDGER_NAME
from envckpt.trainer.ledger import RecoveryLedger
from envckpt.trainer.restorer import Restorer
from envckpt.trainer.snapshot_manifest import build_snapshot_manifest, write_snapshot_manifest

KEPT = "the snapshot was kept"
RESTART_TRIES_AGAIN = "read the reason above; the snapshot was kept, so a restart tries it again"


class RestoresNothing(NoEnvironmentCheckpoint):
    """A backend without rollout state that accepts a snapshot holding none."""

    @contextlib.asynccontextmanager
    async def restored(self, checkpoint_path: Path) -> AsyncIterator[RestoredEnvironmentRollouts]:
        del checkpoint_path
        yield RestoredEnvironmentRollouts()


class FailsWith(NoEnvironmentCheckpoint):
    """A backend whose restore fails with ``error``."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    @contextlib.asynccontextmanager
    async def restored(self, checkpoint_path: Path) -> AsyncIterator[RestoredEnvironmentRollouts]:
        del checkpoint_path
        raise self.error
        yield RestoredEnvironmentRollouts()  # pragma: no cover


async def publish(root: Path, checkpoint_id: str, *, created_at: float) -> Path:
    """A published snapshot with an empty ledger and data plane."""
    path = root / "snapshots" / checkpoint_id
    path.mkdir(parents=True)
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


def restorer(root: Path, env: NoEnvironmentCheckpoint, **options: bool) -> Restorer:
    return Restorer(root, env_checkpoint=env, barrier=DataPlaneBarrier(), **options)


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
    for n in (1, 2, 3):
        path = await publish(root, f"rollouts-{n}", created_at=1_800_000_000.0 + n)
        if n > 1:
            damage(path)
    report = await restorer(root, RestoresNothing()).restore(
        data_plane_path=tmp_path / "live.sqlite"
    )
    with report.data_plane:
        assert report.path is not None and report.path.name == "rollouts-1"
        assert report.telemetry is not None and report.telemetry.refused == 2


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
async def test_failures_and_fresh_starts_are_logged_on_the_restorer_logger(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Operators filter on ``envckpt.restorer``: a failed restore is an error there, and a
    fresh start over refused snapshots a warning there (stdlib logging, structlog unset)."""
    caplog.set_level(logging.WARNING, logger="envckpt")
    await failed_restore(tmp_path / "failed", RuntimeError("boom"))
    root = tmp_path / "fresh" / "snap"
    damage(await publish(root, "rollouts-1", created_at=1_800_000_000.0))
    report = await restorer(root, RestoresNothing(), allow_fresh_start=True).restore(
        data_plane_path=tmp_path / "fresh" / "live.sqlite"
    )
    report.data_plane.close()
    on_restorer = [
        (r.levelname, r.getMessage()) for r in caplog.records if r.name == "envckpt.restorer"
    ]
    assert (
        "ERROR",
        "environment restore failed snapshot='rollouts-1' reason='RuntimeError: boom' "
        f"action='{RESTART_TRIES_AGAIN}'",
    ) in on_restorer
    assert (
        "WARNING",
        "every snapshot refused; starting from scratch as allowed (allow_fresh_start) "
        "refused=['rollouts-1']",
    ) in on_restorer
