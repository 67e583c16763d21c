"""The in-process demo: N simulated Gym instances and a trainer in one process.

One "incarnation" is everything a real job would run in its processes: the
Gym deployments, the facade, the ledger, the SQLite data plane, the
snapshotter and the rollout loop. The crash throws an incarnation away in the
middle of its work (tasks cancelled wherever they are, a snapshot included);
only files survive. The next incarnation is built from scratch and restores
from the newest usable snapshot, then runs to completion.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envckpt.clock import SystemClock
from envckpt.demo.report import ProgressBar, Verdict, summarize_pauses, table
from envckpt.demo.scenario import DemoSettings, crash_fraction, judge, make_tasks
from envckpt.facade.checkpoint import CheckpointTimeouts, GymEnvironmentCheckpoint
from envckpt.facade.instances import LocalInstance
from envckpt.gym.adapter import GymCheckpointAdapter
from envckpt.sim.gym import GymConfig, SimulatedGym
from envckpt.trainer.barrier import DataPlaneBarrier
from envckpt.trainer.job import RolloutJob, RolloutTask
from envckpt.trainer.restorer import RestoreReport
from envckpt.trainer.startup import PendingStaging, start_trainer


class SimulatedBackend:
    """``RolloutBackend`` over in-process Gym deployments."""

    def __init__(self, gyms: Mapping[str, SimulatedGym]) -> None:
        self.gyms = gyms

    async def run(self, instance_id: str, episode: Any, task: Mapping[str, Any]) -> dict[str, Any]:
        return await self.gyms[instance_id].run(episode, task)


@dataclass
class PhaseStats:
    name: str
    finished: int = 0
    snapshots: int = 0
    snapshot_failures: int = 0
    pauses: list[float] = field(default_factory=list)
    restarted_attempts: int = 0


class Incarnation:
    """Everything one run of the job holds in memory."""

    def __init__(self, settings: DemoSettings, tasks: list[RolloutTask], number: int) -> None:
        self.settings = settings
        self.tasks = tasks
        self.number = number
        root = settings.directory
        self.clock = SystemClock()
        self.recorder = PendingStaging()
        self.gyms: dict[str, SimulatedGym] = {}
        for instance in settings.instance_list():
            gym = SimulatedGym.from_config(
                GymConfig(
                    seed=settings.gym_seed(),
                    judge=True,
                    tool_latency=settings.tool_latency,
                    audit_path=str(root / "audit.jsonl"),
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
        self.barrier = DataPlaneBarrier(clock=self.clock)
        self.snapshot_root = root / "snapshots"
        self.report: RestoreReport | None = None
        self.job: RolloutJob | None = None

    async def restore(self) -> RestoreReport:
        started = await start_trainer(
            self.tasks,
            facade=self.facade,
            backend=SimulatedBackend(self.gyms),
            barrier=self.barrier,
            root=self.snapshot_root,
            data_plane_path=self.settings.directory / "live.sqlite",
            staging=self.recorder,
            keep_latest_k=self.settings.keep_latest_k,
            max_in_flight_per_instance=self.settings.in_flight_per_instance,
            clock=self.clock,
        )
        self.report = started.report
        self.job = started.job
        return started.report

    async def crash(self) -> None:
        """Lose every process: running rollouts die, only files survive."""
        for gym in self.gyms.values():
            await gym.shutdown()
        if self.report is not None:
            self.report.data_plane.close()


async def _run_until(job_task: asyncio.Task[Any], job: RolloutJob, stop_after: int) -> bool:
    """Wait until ``stop_after`` rollouts finished or the job ended; True if it ended."""
    while not job_task.done():
        if job.report.finished >= stop_after:
            return False
        await asyncio.sleep(0.01)
    return True


async def run_demo(settings: DemoSettings) -> tuple[Verdict, str]:
    tasks = make_tasks(settings)
    settings.directory.mkdir(parents=True, exist_ok=True)
    out: list[str] = []
    phases: list[PhaseStats] = []

    # Phase 1: run until the crash.
    first = Incarnation(settings, tasks, 1)
    await first.restore()
    assert first.job is not None
    stop_after = max(1, int(crash_fraction(settings) * len(tasks)))
    bar = ProgressBar("run 1", len(tasks))
    first_job = first.job
    first_job.on_progress = lambda event, fields: bar.update(first_job.report.finished, event)
    job_task = asyncio.create_task(first.job.run(snapshot_every=settings.snapshot_every))
    ended = await _run_until(job_task, first.job, stop_after)
    job_task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await job_task
    await first.crash()
    bar.close()
    phases.append(_phase("run 1 (until crash)", first.job))
    out.append(
        f"crash after {first.job.report.finished} of {len(tasks)} rollouts finished"
        + (" (the job ended first)" if ended else "")
    )

    # Phase 2: fresh processes restore and run to completion.
    second = Incarnation(settings, tasks, 2)
    report = await second.restore()
    assert second.job is not None and report is not None
    plan = report.plan
    continued = 0 if plan is None else len(plan.continued)
    abandoned = 0 if plan is None else len(plan.abandoned)
    out.append(
        table(
            "restore",
            ("snapshot", "continued from a saved turn", "restart from task", "refused snapshots"),
            [
                (
                    report.path.name if report.path else "(none: fresh start)",
                    continued,
                    abandoned,
                    len(report.refused),
                )
            ],
        )
    )
    bar = ProgressBar("run 2", len(tasks))
    finished_before = len(second.job.results)
    second_job = second.job
    second_job.on_progress = lambda event, fields: bar.update(
        finished_before + second_job.report.finished, event
    )
    await second.job.run(snapshot_every=settings.snapshot_every)
    bar.close()
    phases.append(_phase("run 2 (after restore)", second.job))
    await second.crash()

    out.insert(
        0,
        table(
            "phases",
            ("phase", "rollouts finished", "snapshots", "failed snapshots", "re-minted", "pauses"),
            [
                (
                    p.name,
                    p.finished,
                    p.snapshots,
                    p.snapshot_failures,
                    p.restarted_attempts,
                    summarize_pauses(p.pauses),
                )
                for p in phases
            ],
        ),
    )
    results = {rid: result for rid, result in second.job.results.items()}
    audit = _read_audit(settings.directory / "audit.jsonl")
    verdict = judge(settings, tasks, results, continued=continued, restarted=abandoned, audit=audit)
    (settings.directory / "results.json").write_text(json.dumps(results, indent=1, sort_keys=True))
    return verdict, "\n\n".join(out)


def _phase(name: str, job: RolloutJob) -> PhaseStats:
    return PhaseStats(
        name=name,
        finished=job.report.finished,
        snapshots=len(job.report.snapshots),
        snapshot_failures=len(job.report.snapshot_failures),
        pauses=[s.metrics.get("snapshot_paused_seconds", 0.0) for s in job.report.snapshots],
        restarted_attempts=job.report.restarted_attempts,
    )


def _read_audit(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
