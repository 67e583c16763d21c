"""Tests for envckpt.demo.trainer_process: a job that must not start says why, with no traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from envckpt.demo.scenario import SETTINGS_NAME, DemoSettings, save_settings
from envckpt.trainer.job_errors import JobExit
from envckpt.trainer.layout import SnapshotLayout

from helpers.root_holder import held_by_another_process
from helpers.snapshot_files import publish


def run_trainer(
    directory: Path, *flags: str, allow_fresh_start: bool = False
) -> subprocess.CompletedProcess[str]:
    settings = DemoSettings(
        instances=1, rollouts=2, directory=directory, allow_fresh_start=allow_fresh_start
    )
    save_settings(settings, directory / SETTINGS_NAME)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "envckpt.demo.trainer_process",
            "--config",
            str(directory / SETTINGS_NAME),
            "--incarnation",
            "1",
            *flags,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_an_unusable_snapshot_root_refuses_to_start_with_a_clear_message(tmp_path: Path) -> None:
    """snapshots/ being a file: exit 3, one line naming the root and the step, no traceback."""
    (tmp_path / "snapshots").write_text("a file where the snapshots go")
    done = run_trainer(tmp_path)
    assert done.returncode == JobExit.START_REFUSED
    assert "Traceback" not in done.stderr
    assert "cannot hold snapshots: could not create snapshots/" in done.stderr
    assert str(tmp_path) in done.stderr
    assert not (tmp_path / "results.json").exists()


def test_a_second_trainer_on_the_same_root_is_refused_naming_the_first(tmp_path: Path) -> None:
    """Another holder of the root: exit 3 with its pid, no traceback, nothing cleaned."""
    debris = tmp_path / ".tmp" / "rollouts-in-flight"
    debris.mkdir(parents=True)
    with held_by_another_process(tmp_path) as pid:
        done = run_trainer(tmp_path)
    assert done.returncode == JobExit.START_REFUSED
    assert "Traceback" not in done.stderr
    assert f"another trainer holds the snapshot root {tmp_path}: pid {pid}" in done.stderr
    assert debris.is_dir()


@pytest.mark.parametrize(
    ("allowed_by_settings", "flags"),
    [(True, ()), (False, ("--allow-fresh-start",))],
    ids=["settings", "command-line"],
)
def test_a_fresh_start_allowed_runs_past_a_root_whose_every_snapshot_is_refused(
    tmp_path: Path, allowed_by_settings: bool, flags: tuple[str, ...]
) -> None:
    """A root whose only snapshot no restore accepts (without a fresh start allowed: exit 3,
    tests/trainer/test_startup.py): with allow_fresh_start in the demo's settings, or
    --allow-fresh-start on the trainer's command line, the job starts from scratch and
    finishes, the snapshot moved to refused/."""
    layout = SnapshotLayout(tmp_path)
    snapshot = "rollouts-step0000000001-aaa"
    publish(layout, snapshot, 1.0)
    done = run_trainer(tmp_path, *flags, allow_fresh_start=allowed_by_settings)
    assert done.returncode == JobExit.FINISHED, done.stderr
    assert len(json.loads((tmp_path / "results.json").read_text())) == 2
    assert [name for name, _ in layout.refused_entries()] == [snapshot]
