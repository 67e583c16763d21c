"""The nemo-gym demo's verdict: the default demo's record and numbers, nemo-gym's evidence.

    record = read_nemo_gym_run(directory)   # the demo's RunRecord + tasks, control run, rows
    verdict = judge_nemo_gym(record)        # every check, and verdict.json's numbers
    write_verdict(verdict, directory / "verdict.json")

Only files that outlive every process are read: ``read_run`` (plan, event
log with each run's exit code, ``results.json``) as for the default demo,
plus the job spec (the tasks), ``control.json`` (the same tasks run once
more, uninterrupted, after the job), the resources servers' audit
(``audit/*.audit.jsonl``) and the trainer's data plane (``live.sqlite``).
The nemo-gym checks wrap ``envckpt.nemo_gym.evidence``; the interruption
checks and the numbers are the default demo's (``verdict``).

Counting work: a turn is one pass of the agent's loop (a model call and its
tool calls). *Saved*: each restore that continued a rollout carried over the
steps it had done (its continuation marker's ``step``). *Recomputed*: tool
calls in the audit that no final result kept, applied by a process that then
died before a snapshot saved them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envckpt.demo.report import Verdict
from envckpt.demo.verdict import (
    RunRecord,
    check_interruptions,
    read_run,
    record_numbers,
    write_verdict,
)

SPEC_NAME = "job.json"
FULL_REWARD = 1.0  # the scripted policy solves every example task


@dataclass
class NemoGymRecord:
    """Everything the nemo-gym verdict looks at (``run.audit``: the resources servers')."""

    run: RunRecord
    tasks: dict[str, dict[str, Any]] = field(default_factory=dict)
    control: dict[str, dict[str, Any]] = field(default_factory=dict)
    rows: dict[str, tuple[str, str]] = field(default_factory=dict)


def read_nemo_gym_run(directory: Path) -> NemoGymRecord:
    """The record of a nemo-gym demo run, from its directory alone."""
    from envckpt.nemo_gym.evidence import read_jsonl
    from envckpt.nemo_gym.job_spec import JobSpec

    run = read_run(directory)
    run.audit = read_jsonl(sorted((directory / "audit").glob("*.audit.jsonl")))
    spec = JobSpec.load(directory / SPEC_NAME)
    control_path = directory / "control.json"
    control = json.loads(control_path.read_text()) if control_path.exists() else {}
    return NemoGymRecord(
        run=run,
        tasks={str(t["rollout_id"]): dict(t["task"]) for t in spec.tasks},
        control=control,
        rows=data_plane_rows(directory / "live.sqlite"),
    )


def data_plane_rows(path: Path) -> dict[str, tuple[str, str]]:
    """Staging key -> (capture key, payload) of every row in the trainer's data plane."""
    from envckpt.trainer.dataplane import SqliteDataPlane

    if not path.exists():
        return {}
    rows = {}
    with SqliteDataPlane(path) as plane:
        for key in sorted(plane.keys()):
            row = plane.get(key)
            if row is not None:
                rows[key] = (row.capture_key, row.payload.decode())
    return rows


def judge_nemo_gym(record: NemoGymRecord) -> Verdict:
    """Every check of the nemo-gym demo, and its numbers (``verdict.json``)."""
    from envckpt.nemo_gym import evidence

    verdict = Verdict()
    results = record.run.results
    verdict.check(
        "every rollout finished exactly once",
        set(results) == set(record.tasks),
        f"{len(results)} results for {len(record.tasks)} rollouts",
    )
    rewards = evidence.reward_mismatches(results, record.control)
    rewards += [
        f"{rid}: reward {r.get('reward')}, not {FULL_REWARD}"
        for rid, r in sorted(results.items())
        if rid in record.control and r.get("reward") != FULL_REWARD
    ]
    verdict.check(
        "every reward equals an uninterrupted run's",
        not rewards,
        _problems(rewards)
        or f"{len(results)} rewards and final answers equal the control run's (all 1.0)",
    )
    lost = evidence.lost_tool_calls(results, record.run.audit)
    audit = evidence.audit_problems(results, record.run.audit, record.tasks)
    kept = sum(len(_envckpt(r).get("applications", ())) for r in results.values())
    verdict.check(
        "every counter increment applied exactly once (resources server's audit)",
        not audit,
        _problems(audit)
        or f"{kept} kept applications each logged once, every counter moved by its plan; "
        f"{len(lost)} tool calls redone after their process died",
    )
    rows = evidence.token_row_problems(results, record.rows)
    verdict.check(
        "token rows consistent with staging keys",
        not rows,
        _problems(rows)
        or f"{len(record.rows)} rows, each named by one result's staging keys, "
        "one lineage chain per rollout",
    )
    continued = evidence.continued_from_turn(results)
    restored = {pair for r in record.run.restores for pair in r.continued}
    landed = sum(1 for r in record.run.restores if r.snapshot is not None)
    verdict.check(
        "rollouts continued from a saved turn",
        bool(continued),
        f"{len(continued)} continued from a saved turn over {landed} restore(s), "
        f"{len(restored)} continued in all, "
        f"{sum(r.abandoned for r in record.run.restores)} restarted from their task",
    )
    mismatched = evidence.continuation_problems(results, restored)
    verdict.check(
        "every continued rollout matches a restore",
        not mismatched,
        _problems(mismatched) or f"{len(restored)} continued attempts, all found",
    )
    check_interruptions(verdict, record.run, recomputed=len(lost))
    record_numbers(
        verdict,
        record.run,
        continued=len(continued),
        saved=evidence.turns_saved(results),
        recomputed=len(lost),
    )
    # Generations a snapshot refused, each asked again from the same turn (agents' count).
    refused = sum(int(_envckpt(r).get("model_calls_refused", 0)) for r in results.values())
    verdict.number("model_calls_refused", refused)
    return verdict


def judge_nemo_gym_directory(directory: Path) -> tuple[NemoGymRecord, Verdict]:
    """Read the run in ``directory``, judge it, and write its ``verdict.json``."""
    record = read_nemo_gym_run(directory)
    verdict = judge_nemo_gym(record)
    write_verdict(verdict, directory / "verdict.json")
    return record, verdict


def _envckpt(result: Mapping[str, Any]) -> Mapping[str, Any]:
    value = result.get("envckpt")
    return value if isinstance(value, Mapping) else {}


def _problems(problems: list[str]) -> str:
    if not problems:
        return ""
    more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
    return "; ".join(problems[:3]) + more
