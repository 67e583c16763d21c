"""Tests of resuming a demo run: after the demo itself was killed, and after it finished."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from envckpt.demo.events import EVENTS_NAME, read_events, record
from envckpt.demo.plan import PLAN_NAME, save_plan
from envckpt.demo.resume import resume_point
from envckpt.demo.scenario import SETTINGS_NAME, DemoSettings, load_settings, save_settings
from envckpt.trainer.layout import SnapshotLayout

from helpers.demo_cli import run_main
from helpers.proc_tree import alive, command, descendants, outliving
from helpers.snapshot_files import publish

SMALL = ["--instances", "2", "--rollouts", "12", "--snapshot-every", "0.3"]
GONE_SECONDS = 5.0


@pytest.mark.slow  # a kill-and-restore run: make verify (make test keeps the nemo-gym demo's)
def test_a_killed_demo_resumes_and_a_finished_one_requeues_as_a_no_op(tmp_path: Path) -> None:
    """SIGKILL of the demo alone after a snapshot: its job dies with it (nothing alive 5 s
    later); --resume goes on and passes; --resume again is a requeue: exit 0, nothing redone."""
    directory = tmp_path / "run"
    demo = subprocess.Popen(
        [sys.executable, "-m", "envckpt", "demo", *SMALL, "--seed", "3", "--dir", str(directory)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    tree: set[int] = set()
    try:
        give_up = time.monotonic() + 240
        while not any(e["event"] == "snapshot" for e in read_events(directory / EVENTS_NAME)):
            assert demo.poll() is None and time.monotonic() < give_up
            time.sleep(0.05)
        tree = descendants(demo.pid)  # the trainer and its Gym servers
        assert len(tree) >= 3, [command(pid) for pid in tree]
        left = outliving(demo, tree, GONE_SECONDS)
        assert not left, [command(pid) for pid in left]
    finally:
        for pid in alive(tree | {demo.pid}):
            os.kill(pid, signal.SIGKILL)

    code, text, err = run_main(["--dir", str(directory), "--resume"])
    assert code == 0, text + err
    verdict = json.loads((directory / "verdict.json").read_text())
    assert verdict["passed"] and verdict["restores"] >= 1
    exits = [e for e in read_events(directory / EVENTS_NAME) if e["event"] == "exited"]
    assert exits[0]["code"] is None and exits[0]["cut_short"] is True
    results = (directory / "results.json").read_bytes()

    code, text, err = run_main(["--dir", str(directory), "--resume"])
    assert code == 0 and "requeue" in text, text + err
    verdict = json.loads((directory / "verdict.json").read_text())
    assert verdict["passed"] and verdict["requeues_after_finish"] == 1
    checks = {c["check"]: c["passed"] for c in verdict["checks"]}
    assert checks["every run after the job finished was a no-op"]
    assert (directory / "results.json").read_bytes() == results
    requeue = max(e["incarnation"] for e in read_events(directory / EVENTS_NAME))
    assert "already finished" in (directory / f"trainer-{requeue}.out").read_text()


@pytest.mark.slow  # a kill-and-restore run: make verify (make test keeps the nemo-gym demo's)
def test_a_relative_dir_works_and_three_kills_pass_when_the_job_finishes_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--dir relative to the working directory; --kills 3 on a job that may finish before
    its third kill: PASS either way, the verdict saying how many of the planned struck."""
    monkeypatch.chdir(tmp_path)
    code, text, err = run_main(
        ["--instances", "1", "--rollouts", "3", "--snapshot-every", "0.3", "--kills", "3",
         "--dir", "relative/run"]
    )  # fmt: skip
    assert code == 0 and "Traceback" not in err, text + err
    verdict = json.loads((tmp_path / "relative" / "run" / "verdict.json").read_text())
    assert verdict["passed"] and verdict["kills_planned"] == 3 and 2 <= verdict["kills"] <= 3
    detail = next(c["detail"] for c in verdict["checks"] if c["check"].startswith("every planned"))
    assert f"{verdict['kills']} struck of 3 planned" in detail


def test_resume_refuses_a_directory_without_a_demo_run(tmp_path: Path) -> None:
    """Nothing to go on with: exit 3 and one line, nothing written."""
    code, _, err = run_main(["--dir", str(tmp_path), "--resume"])
    assert code == 3 and "holds no demo run" in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


def test_resume_takes_no_settings_of_its_own(tmp_path: Path) -> None:
    """--resume with --rollouts (or --force, ...): a usage error, exit 2."""
    with pytest.raises(SystemExit) as caught:
        run_main(["--dir", str(tmp_path), "--resume", "--rollouts", "3"])
    assert caught.value.code == 2


def test_the_cut_run_is_recorded_once(tmp_path: Path) -> None:
    """The run the demo watched when it died gets an exited line with no code, cut_short."""
    (tmp_path / "job.json").write_text(json.dumps({"instances": 2}))
    (tmp_path / "plan.json").write_text("[]")
    record(tmp_path, 1, "started", pid=2**22 + 12345)  # no such process group
    point = resume_point(tmp_path)
    assert (point.nemo_gym, point.next_incarnation, point.finished) == (False, 2, False)
    exited = [e for e in read_events(tmp_path / EVENTS_NAME) if e["event"] == "exited"]
    assert [(e["incarnation"], e["code"], e["cut_short"]) for e in exited] == [(1, None, True)]
    assert resume_point(tmp_path).next_incarnation == 2  # recorded once, not again


def test_resume_with_allow_fresh_start_goes_on_past_a_root_whose_every_snapshot_is_refused(
    tmp_path: Path,
) -> None:
    """A demo run whose only snapshot no restore accepts: --resume stops with the trainer's
    exit 3 and its line; --resume --allow-fresh-start keeps the option in the run's settings
    and its job starts from scratch and finishes, the snapshot moved to refused/."""
    save_settings(
        DemoSettings(instances=1, rollouts=2, directory=tmp_path), tmp_path / SETTINGS_NAME
    )
    save_plan([], tmp_path / PLAN_NAME)
    layout = SnapshotLayout(tmp_path)
    publish(layout, "rollouts-step0000000001-aaa", 1.0)

    code, _, err = run_main(["--dir", str(tmp_path), "--resume"])
    assert code == 3 and "--allow-fresh-start" in err, err

    code, text, err = run_main(["--dir", str(tmp_path), "--resume", "--allow-fresh-start"])
    assert load_settings(tmp_path / SETTINGS_NAME).allow_fresh_start is True
    assert len(json.loads((tmp_path / "results.json").read_text())) == 2, text + err
    assert [name for name, _ in layout.refused_entries()] == ["rollouts-step0000000001-aaa"]
