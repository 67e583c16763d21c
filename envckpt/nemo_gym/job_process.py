"""A job process's life around the job itself: requeue, logs, events and exit codes.

``python -m envckpt.nemo_gym.job`` (and the demo's variant of it) run the job
through ``run_main``::

    return run_main(prog, spec_path, incarnation, run)   # run(spec, events) does the job
    # (allow_fresh_start=args.allow_fresh_start: the trainer's --allow-fresh-start)

In order: the spec is read; if the job's root records that it finished
(``envckpt.trainer.finished``) the process prints ``already finished`` and
exits 0 before writing anything (a requeue is a no-op); otherwise its log
goes to ``trainer-<incarnation>.log``, its events to ``events.jsonl``, and
``run`` runs. A documented failure ends it with one line on stderr and the
trainer's exit code (``JobExit``: 3 start refused, including a deployment
that cannot start, e.g. ``PortInUse``; 4 snapshots failing; 5 restore
failed) and a ``stopped`` event; anything else keeps its traceback.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from envckpt.nemo_gym.job_spec import JobSpec
from envckpt.trainer.event_log import EVENTS_NAME, EventLog
from envckpt.trainer.finished import FinishedJob, read_finished


def log_to_file(spec: JobSpec, incarnation: int) -> None:
    """This process's structured log as JSON lines in ``trainer-<incarnation>.log``."""
    import structlog

    log = (spec.directory / f"trainer-{incarnation}.log").open("a")
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso"),
            structlog.processors.JSONRenderer(),
        ],
        logger_factory=structlog.WriteLoggerFactory(file=log),
    )


def already_finished(spec: JobSpec) -> FinishedJob | None:
    """The record of this job having finished (a start must then do nothing), or None."""
    return read_finished(spec.root)


def failure_exit(error: BaseException) -> int | None:
    """The documented exit code for a job that stopped with ``error`` (None: unexpected)."""
    from envckpt.nemo_gym.launcher import ServersExited
    from envckpt.trainer.job_errors import JobExit, exit_code_for

    code = exit_code_for(error)
    if code is not None:
        return int(code)
    if isinstance(error, ServersExited):
        return int(JobExit.START_REFUSED)  # the deployment cannot start as configured
    return None


def run_main(
    prog: str,
    spec_path: Path,
    incarnation: int,
    run: Callable[[JobSpec, EventLog], Any],
    *,
    allow_fresh_start: bool = False,
) -> int:
    """A job process's ``main`` around ``run(spec, events)``: requeue, logs, exit codes.

    ``allow_fresh_start`` (the command line's ``--allow-fresh-start``) allows
    a fresh start also where the spec does not.
    """
    spec = JobSpec.load(spec_path)
    if allow_fresh_start:
        spec = dataclasses.replace(spec, allow_fresh_start=True)
    try:
        record = already_finished(spec)  # reads only: nothing is written before this
    except Exception as error:
        code = failure_exit(error)
        if code is None:
            raise
        print(f"{prog}: {error}", file=sys.stderr)
        return code
    if record is not None:
        print(f"{prog}: {record.line(spec.root)}")
        return 0
    log_to_file(spec, incarnation)
    events = EventLog(spec.directory / EVENTS_NAME, incarnation=incarnation)
    try:
        run(spec, events)
    except Exception as error:
        code = failure_exit(error)
        if code is None:
            raise
        events.emit("stopped", error=type(error).__name__, reason=str(error))
        print(f"{prog}: {error}", file=sys.stderr)
        return code
    finally:
        events.close()
    return 0
