"""The real demo: the job runs as processes and is interrupted for real.

The parent (this module) only launches, watches and judges. Each run of the
job (the trainer and one Gym server process per instance, in their own
process group) carries its planned interruption (``plan``): the trainer
strikes it itself at the planned moment, a SIGKILL of the whole group as a
node failure would, or a SIGTERM preemption. Fresh processes then restore
from the newest usable snapshot; the last run finishes. The verdict comes
from the files the job left: event log, results, the tool's audit log.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from envckpt.demo.events import (
    EVENTS_NAME,
    note_requeue,
    read_events,
    record_exit,
    results_digest,
)
from envckpt.demo.gym_hosting import JobTokens
from envckpt.demo.plan import PLAN_NAME, Interruption, save_plan
from envckpt.demo.report import Verdict
from envckpt.demo.scenario import SETTINGS_NAME, DemoSettings, save_settings
from envckpt.demo.summary import render_summary
from envckpt.demo.verdict import KILLED, judge_directory
from envckpt.process_tie import child_env
from envckpt.progress import ProgressBar
from envckpt.trainer.job_errors import JobExit

# A run that ends with one of these is followed by a restart.
RESTARTED_AFTER = {KILLED, int(JobExit.PREEMPTED), int(JobExit.PREEMPTED_UNSAVED)}


def launch_run(
    module: str,
    directory: Path,
    incarnation: int,
    *flags: str,
    interruption: Interruption | None = None,
    env: Mapping[str, str],
) -> subprocess.Popen[bytes]:
    """Run ``incarnation`` of a demo's job: ``python -m module FLAGS --incarnation N
    [--interrupt PLAN]`` in a new process group, its output appended to
    ``trainer-N.out`` in ``directory``."""
    command = [sys.executable, "-m", module, *flags, "--incarnation", str(incarnation)]
    if interruption is not None:
        command += ["--interrupt", interruption.to_arg()]
    with (directory / f"trainer-{incarnation}.out").open("ab") as out:
        return subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=dict(env)
        )


def start_job(
    settings: DemoSettings,
    incarnation: int,
    *,
    interruption: Interruption | None = None,
    crash_at: str | None = None,
    ray: bool = False,
    tokens: JobTokens | None = None,
) -> subprocess.Popen[bytes]:
    """Launch the trainer (which launches its Gym servers) in a new process group.

    ``tokens`` (random ones if not given) reach it through its environment.
    """
    flags = ["--config", str(settings.directory / SETTINGS_NAME)]
    flags += ["--crash-at", crash_at] if crash_at else []
    flags += ["--ray"] if ray else []
    # The trainer (and so its Gym servers) dies with this demo (process_tie).
    env = child_env({**os.environ, **(tokens or JobTokens.fresh()).trainer_env()})
    return launch_run(
        "envckpt.demo.trainer_process",
        settings.directory,
        incarnation,
        *flags,
        interruption=interruption,
        env=env,
    )


def watch(
    settings: DemoSettings,
    process: subprocess.Popen[bytes],
    incarnation: int,
    *,
    timeout: float = 600.0,
) -> int | None:
    """Follow one run with a progress bar until it ends; its exit code (None: timed out)."""
    bar = ProgressBar(f"run {incarnation}", settings.rollouts)
    try:
        code = follow(process, timeout, lambda: _show_progress(bar, settings, incarnation))
        if code is not None:
            _show_progress(bar, settings, incarnation)  # what the run logged just before it ended
        return code
    finally:
        bar.close()


def follow(
    process: subprocess.Popen[bytes], timeout: float, tick: Callable[[], None]
) -> int | None:
    """Call ``tick`` every 50 ms while ``process`` runs; its exit code, or None once it ran
    past ``timeout`` seconds (it is killed then)."""
    started = time.monotonic()
    while process.poll() is None:
        tick()
        if time.monotonic() - started > timeout:
            process.kill()
            process.wait()
            return None
        time.sleep(0.05)
    return process.returncode


def _show_progress(bar: ProgressBar, settings: DemoSettings, incarnation: int) -> None:
    """Rollouts finished and snapshots taken by run ``incarnation``, from its event log."""
    events = [
        e
        for e in read_events(settings.directory / EVENTS_NAME)
        if e.get("incarnation") == incarnation
    ]
    restored = next((e for e in events if e["event"] == "restored"), None)
    done = (0 if restored is None else int(restored["finished_before"])) + sum(
        1 for e in events if e["event"] == "sealed"
    )
    snapshots = sum(1 for e in events if e["event"] == "snapshot")
    bar.update(done, f"{snapshots} snapshots")


def incarnations(plan: list[Interruption], first: int) -> range:
    """The runs to start: from ``first`` (2 or more when resuming) to two past the plan."""
    return range(first, max(len(plan), first - 1) + 3)


def run_until_finished(
    directory: Path,
    plan: list[Interruption],
    first: int,
    run: Callable[[int, Interruption | None], int | None],
) -> dict[int, int | None]:
    """Each run of the job from ``first`` (``run(incarnation, its planned interruption)``,
    its exit code, None when cut off), until one ends without a restart; the exit codes.

    Each exit is recorded; a run that exits 0 is checked as a requeue when the job
    had finished before it (``note_requeue``).
    """
    exits: dict[int, int | None] = {}
    for incarnation in incarnations(plan, first):
        interruption = plan[incarnation - 1] if incarnation <= len(plan) else None
        before = results_digest(directory)
        code = run(incarnation, interruption)
        exits[incarnation] = code
        record_exit(directory, incarnation, code)
        if code == 0:
            note_requeue(directory, incarnation, results_before=before)
        if code not in RESTARTED_AFTER:
            break
    return exits


def run_processes(
    settings: DemoSettings, plan: list[Interruption], *, ray: bool = False, first: int = 1
) -> tuple[Verdict, str]:
    """Run the job until it finishes (each planned interruption, then a restart).

    ``first`` above 1 resumes an interrupted demo run (``resume``): its files
    are in the directory already.
    """
    if first == 1:
        save_settings(settings, settings.directory / SETTINGS_NAME)
        save_plan(plan, settings.directory / PLAN_NAME)
    tokens = JobTokens.fresh()  # one random pair per run, never on a command line

    def run(incarnation: int, interruption: Interruption | None) -> int | None:
        process = start_job(
            settings, incarnation, interruption=interruption, ray=ray, tokens=tokens
        )
        return watch(settings, process, incarnation)

    exits = run_until_finished(settings.directory, plan, first, run)
    record, verdict = judge_directory(settings)
    text = render_summary(settings, record, verdict)
    last = max(exits)
    if exits[last] not in (0, None):
        text += "\n\n" + _trainer_said(settings, last)
    return verdict, text


def _trainer_said(settings: DemoSettings, incarnation: int) -> str:
    path = settings.directory / f"trainer-{incarnation}.out"
    lines: list[Any] = path.read_text(errors="replace").splitlines() if path.exists() else []
    said = [line for line in lines if line.startswith("envckpt trainer:")] or lines[-10:]
    return "\n".join(said)
