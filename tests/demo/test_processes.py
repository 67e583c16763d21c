"""Tests for envckpt.demo.processes: the real demo, trainer and Gym servers as processes."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from envckpt.cli import main
from envckpt.demo.events import EVENTS_NAME, read_events
from envckpt.demo.processes import follow
from envckpt.demo.scenario import DemoSettings, make_tasks
from envckpt.demo.summary import run_pauses
from envckpt.machines.tables import ALL_TABLES, PARTICIPANT_PHASES
from envckpt.statecharts.overlay import load_records, overlay

from helpers.demo_cli import run_main

SMALL = ["--instances", "2", "--rollouts", "12", "--snapshot-every", "0.3"]


@pytest.mark.slow  # a kill-and-restore run: make verify (make test keeps the nemo-gym demo's)
def test_the_process_demo_kills_for_real_and_passes_its_verdict(tmp_path: Path) -> None:
    """SIGKILL mid-run, SIGKILL inside the next restore, fresh processes finish: PASS."""
    code, text, _ = run_main([*SMALL, "--seed", "2", "--dir", str(tmp_path)])
    assert code == 0, text
    assert "VERDICT: PASS" in text
    assert "SIGKILL after" in text and "SIGKILL inside the restore" in text
    verdict = json.loads((tmp_path / "verdict.json").read_text())
    assert verdict["kills"] == 2 and verdict["restores"] == 1
    assert verdict["continued_from_saved_turn"] > 0
    exits = [e["code"] for e in read_events(tmp_path / EVENTS_NAME) if e["event"] == "exited"]
    assert exits == [-9, -9, 0]
    assert json.loads((tmp_path / "results.json").read_text()).keys() == {
        task.rollout_id for task in make_tasks(DemoSettings(instances=2, rollouts=12, seed=2))
    }
    events = list(read_events(tmp_path / EVENTS_NAME))
    for incarnation in (1, 2, 3):
        assert run_pauses(events, incarnation)[1] == 0, "a snapshot paused longer than it ran"
    assert_logs_overlay_every_machine(tmp_path)


def assert_logs_overlay_every_machine(directory: Path) -> None:
    """The Gym servers' JSON-lines logs draw participant_phases; with the trainer's, every chart."""
    gym_logs = sorted((directory / "run").glob("gym-*-*.jsonl"))
    assert len(gym_logs) == 2 * 3, "one log per Gym server process of each run"
    entries = [json.loads(line) for log in gym_logs for line in log.read_text().splitlines()]
    phases = [e for e in entries if e.get("machine") == "participant_phases"]
    assert phases and {e["gym_instance_id"] for e in phases} == {
        "demo/replica-0",
        "demo/replica-1",
    }
    assert {e["server"] for e in phases} == {"policy_model", "simple_agent", "tool_resources"}
    chart = overlay(PARTICIPANT_PHASES, load_records(gym_logs))
    assert '==>|"prepare' in chart and '==>|"commit' in chart and '==>|"restore' in chart
    logs = [*gym_logs, *sorted(directory.glob("trainer-*.log"))]
    for table in ALL_TABLES:
        with contextlib.redirect_stdout(io.StringIO()) as out:
            code = main(["statecharts", "--overlay", *map(str, logs), "--machine", table.name])
        assert code == 0 and " ==>|" in out.getvalue(), table.name


def test_the_process_demo_preempted_by_sigterm_redoes_no_turn(tmp_path: Path) -> None:
    """SIGTERM: a final snapshot, exit 75, the restart continues from it, nothing recomputed."""
    code, text, _ = run_main([*SMALL, "--preempt", "--dir", str(tmp_path)])
    assert code == 0, text
    verdict = json.loads((tmp_path / "verdict.json").read_text())
    assert verdict["passed"] and verdict["turns_recomputed"] == 0 and verdict["turns_saved"] > 0
    events = list(read_events(tmp_path / EVENTS_NAME))
    assert [e["code"] for e in events if e["event"] == "exited"] == [75, 0]
    final = next(e for e in events if e["event"] == "final_snapshot")
    restored = [e for e in events if e["event"] == "restored" and e["incarnation"] == 2]
    assert final["checkpoint_id"] and restored[0]["snapshot"] == final["checkpoint_id"]


def test_follow_ticks_until_the_process_ends_and_answers_its_exit_code() -> None:
    """Ticked while the process runs (the first tick lets it end); its exit code answered."""
    process = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read(); sys.exit(3)"], stdin=subprocess.PIPE
    )
    assert process.stdin is not None
    ticks: list[None] = []

    def tick() -> None:
        ticks.append(None)
        process.stdin.close()  # the child waits for its stdin to close

    assert follow(process, 60.0, tick) == 3
    assert len(ticks) >= 1


def test_follow_kills_a_process_past_its_timeout() -> None:
    """A process still running at the timeout is killed and reaped; the answer is None."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    assert follow(process, 0.2, lambda: None) is None
    assert process.returncode is not None and process.returncode < 0
