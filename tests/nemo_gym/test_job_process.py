"""Tests of a job process's life around the job: requeue, exit codes, one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from envckpt.nemo_gym.job_process import failure_exit, run_main
from envckpt.nemo_gym.job_spec import DeploymentSpec, JobSpec
from envckpt.nemo_gym.launcher import PortInUse
from envckpt.trainer.event_log import read_events
from envckpt.trainer.finished import record_finished
from envckpt.trainer.job_errors import (
    RestoreFailed,
    SnapshotRootUnusable,
    SnapshotsFailing,
)


def spec_file(directory: Path) -> Path:
    spec = JobSpec(directory=directory, deployments=(DeploymentSpec("s", {}, agent="a"),), tasks=())
    directory.mkdir(parents=True, exist_ok=True)
    spec.save(directory / "job.json")
    return directory / "job.json"


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (SnapshotRootUnusable("root is a file"), 3),
        (PortInUse("agent", 8123, "port 8123 is held by pid 1 (x)"), 3),
        (SnapshotsFailing("3 in a row", consecutive=3), 4),
        (RestoreFailed("restore failed"), 5),
        (RuntimeError("a bug"), None),
    ],
)
def test_each_documented_failure_maps_to_its_exit_code(error: Exception, code: int | None) -> None:
    """Start refused 3 (a deployment that cannot start too), snapshots failing 4, restore 5."""
    assert failure_exit(error) == code


def test_a_documented_failure_is_one_line_and_a_stopped_event(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The job's failure: its exit code, one line on stderr, a stopped event; no traceback."""

    def run(spec: JobSpec, events: object) -> None:
        raise SnapshotsFailing("3 snapshots in a row failed", consecutive=3)

    assert run_main("job", spec_file(tmp_path), 1, run) == 4
    err = capsys.readouterr().err
    assert err == "job: 3 snapshots in a row failed\n"
    stopped = [e for e in read_events(tmp_path / "events.jsonl") if e["event"] == "stopped"]
    assert [e["error"] for e in stopped] == ["SnapshotsFailing"]


def test_an_unexpected_error_keeps_its_traceback(tmp_path: Path) -> None:
    """A bug is not disguised as a documented exit."""

    def run(spec: JobSpec, events: object) -> None:
        raise RuntimeError("a bug")

    with pytest.raises(RuntimeError, match="a bug"):
        run_main("job", spec_file(tmp_path), 1, run)


def test_a_finished_root_runs_nothing_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The root records the job finished: 'already finished', exit 0, run never called."""
    path = spec_file(tmp_path)
    record_finished(tmp_path / "snapshots", results=b"{}", rollouts=0)
    before = sorted(p.name for p in tmp_path.rglob("*"))

    def run(spec: JobSpec, events: object) -> None:
        raise AssertionError("a finished job ran")

    assert run_main("job", path, 2, run) == 0
    assert "already finished" in capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


@pytest.mark.parametrize("flag", [False, True])
def test_the_command_lines_fresh_start_flag_reaches_the_job(tmp_path: Path, flag: bool) -> None:
    """run_main(allow_fresh_start=True) (--allow-fresh-start) hands the job a spec allowing a
    fresh start; without it the job sees the spec as saved (not allowing one)."""
    seen: list[bool] = []

    def run(spec: JobSpec, events: object) -> None:
        seen.append(spec.allow_fresh_start)

    assert run_main("job", spec_file(tmp_path), 1, run, allow_fresh_start=flag) == 0
    assert seen == [flag]
