"""Tests for envckpt.demo.nemo_gym: ``envckpt demo --nemo-gym`` end to end, and its arguments.

The end-to-end run (``conftest.nemo_gym_run``, shared with
``test_nemo_gym_verdict``) is the real thing: the trainer and 8 nemo-gym
server processes SIGKILLed as one group after a snapshot, again inside the
next restore, then fresh processes restore and finish.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import envckpt.demo
from envckpt.demo.events import EVENTS_NAME, read_events
from envckpt.demo.nemo_gym import NemoGymDemo, end_group
from envckpt.demo.nemo_gym_verdict import judge_nemo_gym, read_nemo_gym_run
from envckpt.demo.report import NUMBERS

from helpers.demo_cli import run_main


def test_the_nemo_gym_demo_kills_for_real_and_passes_its_verdict(nemo_gym_run: Any) -> None:
    """Two SIGKILLs of the whole group, a restore in fresh processes, every check passes."""
    run = nemo_gym_run
    assert run.code == 0, run.out + run.err
    assert "VERDICT: PASS" in run.out
    assert "SIGKILL after 1 snapshot" in run.out or "SIGKILL after 2 snapshot" in run.out
    assert "SIGKILL inside the restore" in run.out
    assert "example_session_state_mgmt" in run.out and "example_multi_turn_gymnasium" in run.out
    for table in ("== runs ==", "== restores ==", "work saved:", "== verdict =="):
        assert table in run.out
    exits = [e["code"] for e in read_events(run.directory / EVENTS_NAME) if e["event"] == "exited"]
    assert exits == [-9, -9, 0]
    verdict = json.loads((run.directory / "verdict.json").read_text())
    assert set(verdict) == {"passed", "checks", *NUMBERS}
    assert verdict["passed"] is True and verdict["kills"] == 2 and verdict["restores"] == 1
    assert verdict["continued_from_saved_turn"] > 0 and verdict["turns_saved"] > 0
    assert all(set(c) == {"check", "passed", "detail"} and c["detail"] for c in verdict["checks"])
    assert verdict == judge_nemo_gym(read_nemo_gym_run(run.directory)).to_json()
    spec = NemoGymDemo(directory=run.directory).job_spec()
    results = json.loads((run.directory / "results.json").read_text())
    assert set(results) == {t["rollout_id"] for t in spec.tasks}
    assert len(spec.tasks) == 10


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--ray"], "does not take --ray"),
        (["--in-process"], "does not take --in-process"),
        (["--preempt"], "does not take --preempt"),
        (["--instances", "3"], "does not take --instances"),
        (["--rollouts", "1"], "at least 2 rollouts"),
    ],
)
def test_options_the_nemo_gym_demo_cannot_honour_are_refused(
    args: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Nothing runs: the parser names the option (exit 2) and the directory stays empty."""
    with pytest.raises(SystemExit) as exit_info:
        envckpt.demo.main(["--nemo-gym", *args, "--dir", str(tmp_path / "d")])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "d").exists()


def test_the_spec_splits_the_rollouts_over_both_deployments(tmp_path: Path) -> None:
    """Half the rollouts (rounded up) count, the rest talk; the control run is on."""
    spec = NemoGymDemo(directory=tmp_path, rollouts=7, snapshot_every=0.4).job_spec()
    shards = [t["shard"] for t in spec.tasks]
    assert shards.count("counter") == 4 and shards.count("multi") == 3
    assert [d.agent for d in spec.deployments] == ["counter_agent", "multi_turn_agent"]
    assert spec.control_run and spec.snapshot_every == 0.4
    with pytest.raises(ValueError, match="at least 2 rollouts"):
        NemoGymDemo(directory=tmp_path, rollouts=1)


def test_end_group_kills_what_a_run_left_behind(tmp_path: Path) -> None:
    """A child that outlived its run's leader is killed before the next run starts."""
    pid_file = tmp_path / "child.pid"
    leader = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys; "
            "child = subprocess.Popen(['sleep', '60']); "
            f"open({str(pid_file)!r}, 'w').write(str(child.pid))",
        ],
        start_new_session=True,
    )
    assert leader.wait(timeout=30) == 0
    child = int(pid_file.read_text())
    assert Path(f"/proc/{child}").exists()  # orphaned, still in the run's group
    assert end_group(leader.pid, timeout=10.0)
    deadline = time.monotonic() + 10
    while Path(f"/proc/{child}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)  # reaped by init
    assert not Path(f"/proc/{child}").exists()
    assert end_group(leader.pid, timeout=1.0)  # nothing left: gone at once


@pytest.mark.slow
@pytest.mark.timeout(3600)
@pytest.mark.skipif(
    os.environ.get("ENVCKPT_LONG_GENERATIONS") != "1",
    reason="8 s generations take minutes: ENVCKPT_LONG_GENERATIONS=1 runs it",
)
def test_eight_second_generations_under_a_two_second_prepare(tmp_path: Path) -> None:
    """The done-when run: every snapshot publishes, every pause stays under 3 s, the kills
    are survived, every reward equals the uninterrupted run's, generations were refused."""
    code, out, err = run_main(
        [
            "--nemo-gym",
            "--generation-seconds",
            "8",
            "--prepare-seconds",
            "2",
            "--dir",
            str(tmp_path),
        ]
    )
    assert code == 0, out + err
    verdict = json.loads((tmp_path / "verdict.json").read_text())
    checks = {c["check"]: c["passed"] for c in verdict["checks"]}
    assert verdict["passed"] and checks["every reward equals an uninterrupted run's"]
    assert verdict["snapshots_published"] > 0 and verdict["snapshots_failed"] == 0
    assert verdict["max_pause_seconds"] < 3.0
    assert verdict["model_calls_refused"] > 0 and verdict["kills"] == 2
