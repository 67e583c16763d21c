"""One run of the nemo-gym demo's job, as a process: ``envckpt.nemo_gym.job`` plus the plan.

    python -m envckpt.demo.nemo_gym_job --spec DIR/job.json --incarnation N [--interrupt JSON]
        [--allow-fresh-start]

It runs ``envckpt.nemo_gym.job.run_job`` unchanged (the trainer, and every
server of both deployments as its children, in one process group) and
strikes this run's planned interruption (``plan.Interruption``) itself,
driven by the job's own events, never by the clock: a ``kill`` waits for
the k-th published snapshot holding rollouts in flight, then a seeded
number of finished rollouts (``plan.Interrupter``), announces itself in
``events.jsonl`` and SIGKILLs the whole group, as a node failure would; a
``kill_in_restore`` SIGKILLs the group at its crash point inside the restore.
Preemption is not offered here: nemo-gym's servers get no grace period.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from envckpt import crashpoints
from envckpt.demo.plan import (
    KILL,
    KILL_IN_RESTORE,
    Interrupter,
    Interruption,
    add_run_arguments,
)
from envckpt.nemo_gym.job import run_job
from envckpt.nemo_gym.job_process import run_main
from envckpt.nemo_gym.job_spec import JobSpec
from envckpt.process_tie import tie_to_parent
from envckpt.trainer.event_log import RESTORED, EventLog


class PlannedStrike:
    """Follows one run's events and strikes its planned interruption once.

    ``emit`` goes where the job's events go (it sees ``restored``, which says
    how many rollouts were already finished); ``progress`` gets the trainer's
    progress events after they were logged, so the snapshot a kill follows is
    on disk before the kill.
    """

    def __init__(
        self,
        emit: Callable[..., None],
        plan: Interruption | None,
        *,
        total: int,
        kill: Callable[[], None] | None = None,
    ) -> None:
        if plan is not None and plan.kind not in (KILL, KILL_IN_RESTORE):
            raise ValueError(f"the nemo-gym demo cannot strike {plan.kind!r}")
        self._emit = emit
        self.plan = plan
        self.total = total
        self.kill = kill or kill_group
        self.interrupter: Interrupter | None = None

    def emit(self, event: str, **fields: Any) -> None:
        self._emit(event, **fields)
        if event == RESTORED and self.plan is not None and self.plan.kind == KILL:
            self.interrupter = Interrupter(
                self.plan,
                total=self.total,
                finished=int(fields.get("finished_before", 0)),
                strike=self.strike,
            )

    def progress(self, event: str, fields: Mapping[str, Any]) -> None:
        if self.interrupter is not None:
            self.interrupter.progress(event, fields)

    def strike(self, info: Mapping[str, Any]) -> None:
        self._emit("interrupting", **info)
        self.kill()

    def in_restore(self, point: str) -> None:
        """A crash-point handler: SIGKILL at the planned point inside the restore."""
        plan = self.plan
        if plan is not None and plan.kind == KILL_IN_RESTORE and point == plan.restore_point:
            self.strike({"kind": KILL_IN_RESTORE, "point": point, "snapshots": 0})


def kill_group() -> None:
    # The whole job: this process and every server in its group.
    os.killpg(os.getpgid(0), signal.SIGKILL)


def main(argv: list[str] | None = None) -> int:
    tie_to_parent()  # dies with the demo that started it
    parser = argparse.ArgumentParser(prog="python -m envckpt.demo.nemo_gym_job")
    parser.add_argument("--spec", type=Path, required=True)
    add_run_arguments(parser)
    args = parser.parse_args(argv)
    plan = Interruption.from_arg(args.interrupt) if args.interrupt else None

    def run(spec: JobSpec, events: EventLog) -> None:
        strike = PlannedStrike(events.emit, plan, total=len(spec.tasks))
        crashpoints.install(strike.in_restore)
        try:
            asyncio.run(
                run_job(
                    spec,
                    incarnation=args.incarnation,
                    emit=strike.emit,
                    on_progress=strike.progress,
                )
            )
        finally:
            crashpoints.install(None)

    # Requeue after finishing, the job's exit codes, its log and events: as the job's own main.
    return run_main(
        parser.prog, args.spec, args.incarnation, run, allow_fresh_start=args.allow_fresh_start
    )


if __name__ == "__main__":  # the launcher's forkserver re-imports the main module
    sys.exit(main())
