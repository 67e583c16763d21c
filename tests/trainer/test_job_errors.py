"""Tests for envckpt.trainer.job_errors: fields survive pickle; each error has its exit code."""

from __future__ import annotations

import pickle

import pytest

from envckpt.errors import EnvckptError
from envckpt.trainer.job_errors import (
    AllSnapshotsRefused,
    JobExit,
    RestoreFailed,
    SnapshotNotOwned,
    SnapshotRefusedByEnvironment,
    SnapshotRootLocked,
    SnapshotRootUnsafe,
    SnapshotRootUnusable,
    SnapshotsFailing,
    StartRefused,
    exit_code_for,
)

SAMPLES: list[tuple[EnvckptError, JobExit]] = [
    (StartRefused("no", root="/r"), JobExit.START_REFUSED),
    (SnapshotRootUnusable("ro", root="/r", step="rename"), JobExit.START_REFUSED),
    (
        SnapshotRootLocked("held", root="/r", pid=42, host="node-1", since="2026-01-01"),
        JobExit.START_REFUSED,
    ),
    (SnapshotRootUnsafe("link", root="/r", path="/r/.tmp"), JobExit.START_REFUSED),
    (
        AllSnapshotsRefused("all bad", root="/r", refused=(("s2", "digest"), ("s1", "ledger"))),
        JobExit.START_REFUSED,
    ),
    (SnapshotsFailing("3 failed", consecutive=3, last_reason="OSError"), JobExit.SNAPSHOTS_FAILING),
    (RestoreFailed("down", snapshot="s1", reason="x", action="y"), JobExit.RESTORE_FAILED),
    (
        SnapshotRefusedByEnvironment("bad", snapshot="s1", reason="x", action="y"),
        JobExit.RESTORE_FAILED,
    ),
]


@pytest.mark.parametrize(("error", "code"), SAMPLES, ids=lambda v: type(v).__name__)
def test_every_error_pickles_with_its_fields_and_maps_to_its_exit_code(
    error: EnvckptError, code: JobExit
) -> None:
    """Type, message and fields survive pickle; exit_code_for gives the documented code."""
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error) and str(copy) == str(error)
    for name in type(error)._fields:
        assert getattr(copy, name) == getattr(error, name)
    assert exit_code_for(error) is code


def test_other_errors_have_no_documented_exit_code() -> None:
    """An unexpected error is left to the interpreter (exit 1 with its traceback)."""
    assert exit_code_for(ValueError("bug")) is None


def test_a_refused_delete_pickles_and_is_no_job_outcome() -> None:
    """SnapshotNotOwned keeps path and reason through pickle; no trainer exits with it."""
    error = SnapshotNotOwned("left", path="/r/snapshots/x", why="no MANIFEST.json")
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.path, copy.why, str(copy)) == (error.path, error.why, str(error))
    assert exit_code_for(error) is None


def test_exit_codes_are_distinct_and_clear_of_the_shell_conventions() -> None:
    """0 is success; 1 and 2 stay Python's and argparse's; no two outcomes share a code."""
    codes = [int(code) for code in JobExit]
    assert len(set(codes)) == len(codes)
    assert JobExit.FINISHED == 0 and not {1, 2} & set(codes)
