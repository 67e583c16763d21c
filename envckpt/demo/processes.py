"""The real demo: the job runs as processes and is killed with SIGKILL.

The parent (this module) only launches, watches and kills. The job (the
trainer and one Gym server process per instance, in their own process group)
runs until a seeded random moment, then the whole group is SIGKILLed, as a
node failure would. Fresh processes start, restore from the newest usable
snapshot and run to completion. The verdict is computed from the files the
job left: results, the tool's audit log, the event log.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

from envckpt.demo.events import read_events
from envckpt.demo.report import ProgressBar, Verdict, summarize_pauses, table
from envckpt.demo.scenario import DemoSettings, judge, make_tasks
from envckpt.demo.trainer_process import save_settings


def start_job(
    settings: DemoSettings, incarnation: int, *, crash_at: str | None = None, ray: bool = False
) -> subprocess.Popen[bytes]:
    """Launch the trainer (which launches its Gym servers) in a new process group."""
    command = [
        sys.executable,
        "-m",
        "envckpt.demo.trainer_process",
        "--config",
        str(settings.directory / "job.json"),
        "--incarnation",
        str(incarnation),
    ]
    if crash_at:
        command += ["--crash-at", crash_at]
    if ray:
        command.append("--ray")
    log = (settings.directory / f"trainer-{incarnation}.out").open("ab")
    return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def kill_job(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL the job's whole process group: trainer and Gym servers at once."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def _events(settings: DemoSettings, incarnation: int) -> list[dict[str, Any]]:
    return [
        e
        for e in read_events(settings.directory / "events.jsonl")
        if e.get("incarnation") == incarnation
    ]


def watch(
    settings: DemoSettings,
    process: subprocess.Popen[bytes],
    incarnation: int,
    *,
    label: str,
    kill_after: float | None = None,
    timeout: float = 600.0,
) -> tuple[int | None, bool]:
    """Follow the job with a progress bar; kill it after ``kill_after`` seconds.

    Returns (exit code, killed by us).
    """
    total = settings.rollouts
    bar = ProgressBar(label, total)
    started = time.monotonic()
    running_since: float | None = None  # when the job started work after restoring
    killed = False
    while process.poll() is None:
        events = _events(settings, incarnation)
        restored = next((e for e in events if e["event"] == "restored"), None)
        if restored is not None and running_since is None:
            running_since = time.monotonic()
        done = (0 if restored is None else restored["finished_before"]) + sum(
            1 for e in events if e["event"] == "sealed"
        )
        snapshots = sum(1 for e in events if e["event"] == "snapshot")
        bar.update(done, f"{snapshots} snapshots")
        if (
            kill_after is not None
            and running_since is not None
            and time.monotonic() - running_since >= kill_after
        ):
            kill_job(process)
            killed = True
            break
        if time.monotonic() - started > timeout:
            kill_job(process)
            raise TimeoutError(f"the job did not finish within {timeout:.0f} s")
        time.sleep(0.05)
    bar.close()
    return process.returncode, killed


def expected_seconds(settings: DemoSettings) -> float:
    """Roughly how long the job runs uninterrupted (for placing the crash)."""
    per_instance = settings.rollouts / settings.instances
    waves = max(1.0, per_instance / settings.in_flight_per_instance)
    mean_turns = (settings.min_turns + settings.max_turns) / 2
    return waves * mean_turns * settings.tool_latency * 1.5


def run_processes(settings: DemoSettings, *, ray: bool = False) -> tuple[Verdict, str]:
    settings.directory.mkdir(parents=True, exist_ok=True)
    save_settings(settings, settings.directory / "job.json")
    rng = random.Random(settings.seed + 1)
    kill_after = rng.uniform(0.3, 0.7) * expected_seconds(settings)

    first = start_job(settings, 1, ray=ray)
    code, killed = watch(settings, first, 1, label="run 1", kill_after=kill_after)
    second = start_job(settings, 2, ray=ray)
    code2, _ = watch(settings, second, 2, label="run 2")
    out = [_phase_table(settings, killed, kill_after, code, code2)]
    restored = next((e for e in _events(settings, 2) if e["event"] == "restored"), {})
    out.append(
        table(
            "restore (fresh processes)",
            ("snapshot", "continued from a saved turn", "restart from task", "refused"),
            [
                (
                    restored.get("snapshot") or "(none: fresh start)",
                    restored.get("continued", 0),
                    restored.get("abandoned", 0),
                    len(restored.get("refused", [])),
                )
            ],
        )
    )
    verdict = judge_files(
        settings,
        continued=int(restored.get("continued", 0)),
        restarted=int(restored.get("abandoned", 0)),
        exit_code=code2,
    )
    verdict.check("the crash struck mid-run", killed, f"SIGKILL after {kill_after:.1f} s")
    return verdict, "\n\n".join(out)


def judge_files(
    settings: DemoSettings, *, continued: int, restarted: int, exit_code: int | None
) -> Verdict:
    results_path = settings.directory / "results.json"
    results = json.loads(results_path.read_text()) if results_path.exists() else {}
    audit_path = settings.directory / "audit.jsonl"
    audit = (
        [json.loads(line) for line in audit_path.read_text().splitlines() if line.strip()]
        if audit_path.exists()
        else []
    )
    verdict = judge(
        settings,
        make_tasks(settings),
        results,
        continued=continued,
        restarted=restarted,
        audit=audit,
    )
    verdict.check("the restored job exited cleanly", exit_code == 0, f"exit code {exit_code}")
    return verdict


def _phase_table(
    settings: DemoSettings,
    killed: bool,
    kill_after: float,
    code: int | None,
    code2: int | None,
) -> str:
    rows: list[Sequence[object]] = []
    for incarnation, name, exit_code in ((1, "run 1", code), (2, "run 2 (restored)", code2)):
        events = _events(settings, incarnation)
        pauses = [
            float(e["metrics"].get("snapshot_paused_seconds", 0.0))
            for e in events
            if e["event"] == "snapshot"
        ]
        failed = sum(1 for e in events if e["event"] == "snapshot_failed")
        sealed = sum(1 for e in events if e["event"] == "sealed")
        ending = (
            f"SIGKILL after {kill_after:.1f} s"
            if incarnation == 1 and killed
            else f"exit {exit_code}"
        )
        rows.append((name, sealed, len(pauses), failed, summarize_pauses(pauses), ending))
    return table(
        "phases",
        ("phase", "rollouts finished", "snapshots", "failed snapshots", "pauses", "ended"),
        rows,
    )
