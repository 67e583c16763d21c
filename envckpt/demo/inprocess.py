"""The in-process demo: N simulated Gym instances and a trainer in one process.

One run ("incarnation") is everything a real job would run in its processes:
the Gym deployments, the facade, the ledger, the SQLite data plane, the
snapshotter and the rollout loop. The planned interruptions (``plan``) are
the same as the process demo's, struck by the same events: a kill throws the
run away in the middle of its work (tasks cancelled wherever they are, a
snapshot included); a kill in a restore raises ``SimulatedCrash`` at the
chosen crash point; a preemption calls the job's ``JobSignals.preempt``.
Only files survive; the next run is built from scratch and restores. Events,
results and the verdict are written exactly as the process demo writes them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Mapping
from typing import Any

from envckpt import crashpoints
from envckpt.clock import SystemClock
from envckpt.crashpoints import SimulatedCrash
from envckpt.demo.events import EVENTS_NAME, EventLog, record_exit
from envckpt.demo.plan import (
    KILL_IN_RESTORE,
    PLAN_NAME,
    PREEMPT,
    Interrupter,
    Interruption,
    save_plan,
)
from envckpt.demo.processes import RESTARTED_AFTER
from envckpt.demo.report import Verdict
from envckpt.demo.scenario import SETTINGS_NAME, DemoSettings, make_tasks, save_settings
from envckpt.demo.summary import render_summary
from envckpt.demo.verdict import KILLED, judge_directory
from envckpt.facade.checkpoint import CheckpointTimeouts, GymEnvironmentCheckpoint
from envckpt.facade.instances import LocalInstance
from envckpt.fsutil import atomic_write_bytes
from envckpt.gym.adapter import GymCheckpointAdapter
from envckpt.progress import ProgressBar
from envckpt.sim.gym import GymConfig, SimulatedGym
from envckpt.trainer.barrier import DataPlaneBarrier
from envckpt.trainer.job_errors import JobExit
from envckpt.trainer.preemption import JobSignals
from envckpt.trainer.snapshot_loop import SnapshotPolicy
from envckpt.trainer.startup import PendingStaging, StartedTrainer, start_trainer


class SimulatedBackend:
    """``RolloutBackend`` over in-process Gym deployments."""

    def __init__(self, gyms: Mapping[str, SimulatedGym]) -> None:
        self.gyms = gyms

    async def run(self, instance_id: str, episode: Any, task: Mapping[str, Any]) -> dict[str, Any]:
        return await self.gyms[instance_id].run(episode, task)


class Incarnation:
    """Everything one run of the job holds in memory."""

    def __init__(self, settings: DemoSettings, number: int) -> None:
        self.settings = settings
        self.number = number
        self.clock = SystemClock()
        self.recorder = PendingStaging()
        self.gyms: dict[str, SimulatedGym] = {}
        for instance in settings.instance_list():
            gym = SimulatedGym.from_config(
                GymConfig(
                    instance_id=instance.instance_id,
                    seed=settings.gym_seed(),
                    judge=True,
                    tool_latency=settings.tool_latency,
                    audit_path=str(settings.directory / "audit.jsonl"),
                ),
                clock=self.clock,
            )
            gym.model.staging_sink = self.recorder
            self.gyms[instance.instance_id] = gym
        self.facade = GymEnvironmentCheckpoint(
            [
                LocalInstance(GymCheckpointAdapter(instance=i, coordination=g.coordinator))
                for i, g in zip(settings.instance_list(), self.gyms.values(), strict=True)
            ],
            clock=self.clock,
            timeouts=CheckpointTimeouts(prepare_seconds=5.0, commit_seconds=30.0),
        )
        self.events = EventLog(settings.directory / EVENTS_NAME, incarnation=number)
        self.signals = JobSignals(grace_seconds=settings.grace_seconds, clock=self.clock)
        self.crashed = asyncio.Event()

    async def start(self) -> StartedTrainer:
        settings = self.settings
        return await start_trainer(
            make_tasks(settings),
            facade=self.facade,
            backend=SimulatedBackend(self.gyms),
            barrier=DataPlaneBarrier(clock=self.clock),
            root=settings.directory,
            data_plane_path=settings.directory / "live.sqlite",
            staging=self.recorder,
            keep_latest_k=settings.keep_latest_k,
            max_in_flight_per_instance=settings.in_flight_per_instance,
            clock=self.clock,
            snapshot_policy=SnapshotPolicy(
                every_seconds=settings.snapshot_every,
                min_running_ratio=settings.min_running_ratio,
            ),
            signals=self.signals,
            on_final_snapshot=self.stop_gyms,
            allow_fresh_start=settings.allow_fresh_start,
        )

    async def stop_gyms(self, result: object = None) -> None:
        """Stop every running rollout, as if the processes died (a preempted node)."""
        del result
        for gym in self.gyms.values():
            await gym.shutdown()

    def strike(self, info: Mapping[str, Any]) -> None:
        self.events.emit("interrupting", **info)
        if info["kind"] == PREEMPT:
            self.signals.preempt()
        else:
            self.crashed.set()


async def run_incarnation(
    settings: DemoSettings, number: int, interruption: Interruption | None
) -> int:
    """One run of the job; its exit code as a process would report it (-9: killed)."""
    run = Incarnation(settings, number)
    run.events.emit("started", in_process=True)
    if interruption is not None and interruption.kind == KILL_IN_RESTORE:
        point = interruption.restore_point

        def in_restore(name: str) -> None:
            if name == point:
                run.events.emit("interrupting", kind=KILL_IN_RESTORE, point=point, snapshots=0)
                raise SimulatedCrash(name)

        crashpoints.install(in_restore)
    try:
        started = await run.start()
    except SimulatedCrash:
        await run.stop_gyms()
        run.events.close()
        return KILLED
    finally:
        crashpoints.install(None)
    try:
        return await _drive(run, started, interruption)
    finally:
        started.close()
        run.events.close()


async def _drive(
    run: Incarnation, started: StartedTrainer, interruption: Interruption | None
) -> int:
    settings, job, results = run.settings, started.job, started.results
    run.events.restored(started.report, finished_before=len(results))
    bar = ProgressBar(f"run {run.number}", settings.rollouts)
    before = len(results)
    interrupter = (
        Interrupter(interruption, total=settings.rollouts, finished=before, strike=run.strike)
        if interruption is not None and interruption.kind != KILL_IN_RESTORE
        else None
    )

    def progress(event: str, fields: Mapping[str, Any]) -> None:
        run.events.progress(event, fields)
        if interrupter is not None:
            interrupter.progress(event, fields)
        bar.update(before + job.report.finished, event)

    job.on_progress = progress
    running = asyncio.create_task(job.run())
    crash = asyncio.create_task(run.crashed.wait())
    await asyncio.wait({running, crash}, return_when=asyncio.FIRST_COMPLETED)
    crash.cancel()
    bar.close()
    if run.crashed.is_set():
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await running
        await run.stop_gyms()
        return KILLED
    report = running.result()
    if report.preempted:
        return int(report.exit_code)
    final = dict(results.items())
    atomic_write_bytes(
        settings.directory / "results.json", json.dumps(final, sort_keys=True).encode()
    )
    run.events.emit("done", finished=len(final))
    return int(JobExit.FINISHED)


async def run_demo(settings: DemoSettings, plan: list[Interruption]) -> tuple[Verdict, str]:
    """Run the job in this process until it finishes; judge it like the process demo."""
    save_settings(settings, settings.directory / SETTINGS_NAME)
    save_plan(plan, settings.directory / PLAN_NAME)
    for number in range(1, len(plan) + 3):
        interruption = plan[number - 1] if number <= len(plan) else None
        code = await run_incarnation(settings, number, interruption)
        record_exit(settings.directory, number, code)
        if code not in RESTARTED_AFTER:
            break
    record, verdict = judge_directory(settings)
    return verdict, render_summary(settings, record, verdict)
