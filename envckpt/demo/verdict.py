"""The demo's verdict, computed only from what the job left behind.

    record = read_run(directory)            # job.json, plan.json, events, results, audit
    verdict = judge(settings, record)       # every check, and the run's numbers
    write_verdict(verdict, directory / "verdict.json")

``read_run`` reads only files that outlive every process: the plan,
``events.jsonl`` (restores, snapshots, interruptions, and each run's exit
code as its launcher saw it), ``results.json`` and the tool's
``audit.jsonl``; so the verdict can be recomputed from the directory. ``judge``
then checks that the promise held and that the run tested something: it
fails when nothing continued from a saved turn. Every check is exercised
against tampered records in the tests.

Counting work: a turn is *saved* each time a restore carried it over, so a
result's turn done by attempt ``b`` and kept by final attempt ``a`` was saved
``a - b`` times (each restore continues a rollout as attempt + 1).
Restart-from-task would have recomputed exactly those. A turn is
*recomputed* when its tool effect was applied by a process whose work died
with it: an audit entry no final result kept.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envckpt.demo.events import EVENTS_NAME, read_events
from envckpt.demo.plan import KILL, KILL_IN_RESTORE, PLAN_NAME, PREEMPT, Interruption, load_plan
from envckpt.demo.report import Verdict
from envckpt.demo.scenario import DemoSettings, make_tasks
from envckpt.fsutil import atomic_write_bytes
from envckpt.sim.gym import expected_transcript
from envckpt.trainer.job_errors import JobExit
from envckpt.trainer.restorer import Outcome

KILLED = -9  # the exit status of a process killed by SIGKILL
EXPECTED_EXIT = {KILL: KILLED, KILL_IN_RESTORE: KILLED, PREEMPT: int(JobExit.PREEMPTED)}


@dataclass(frozen=True, slots=True)
class RestoreRecord:
    """One restore that landed: which snapshot (None: a fresh start) and what it continued."""

    incarnation: int
    snapshot: str | None
    continued: frozenset[tuple[str, int]] = frozenset()
    abandoned: int = 0
    refused: int = 0


@dataclass(frozen=True, slots=True)
class Strike:
    """An interruption the job announced just before it struck."""

    incarnation: int
    kind: str
    snapshots: int = 0


@dataclass
class RunRecord:
    """Everything the verdict looks at."""

    results: dict[str, dict[str, Any]]
    audit: list[dict[str, Any]]
    planned: list[Interruption] = field(default_factory=list)
    exits: dict[int, int | None] = field(default_factory=dict)
    strikes: list[Strike] = field(default_factory=list)
    restores: list[RestoreRecord] = field(default_factory=list)
    final_snapshots: dict[int, str | None] = field(default_factory=dict)
    snapshots_published: int = 0
    snapshots_failed: int = 0
    done: bool = False
    # Each published snapshot's pause of the environment, in seconds, and its run.
    pauses: list[float] = field(default_factory=list)
    snapshot_runs: list[int] = field(default_factory=list)
    # Runs that found the job finished and did nothing (a requeue), and whether
    # the demo saw its results unchanged.
    requeues: dict[int, bool] = field(default_factory=dict)
    # Runs cut short because the demo itself was interrupted (then resumed).
    cut_short: set[int] = field(default_factory=set)


def read_run(directory: Path) -> RunRecord:
    """The record of a run, from its directory alone."""
    record = RunRecord(
        results=_json_or(directory / "results.json", {}),
        audit=_json_lines(directory / "audit.jsonl"),
        planned=load_plan(directory / PLAN_NAME),
    )
    for event in read_events(directory / EVENTS_NAME):
        incarnation = int(event.get("incarnation", 0))
        if event["event"] == "exited":
            code = event.get("code")
            record.exits[incarnation] = None if code is None else int(code)
            if event.get("cut_short"):
                record.cut_short.add(incarnation)
        elif event["event"] == "requeued":
            record.requeues[incarnation] = bool(event.get("results_unchanged"))
        elif event["event"] == "restored":
            record.restores.append(
                RestoreRecord(
                    incarnation,
                    event.get("snapshot"),
                    frozenset((str(r), int(a)) for r, a in event.get("continued", [])),
                    int(event.get("abandoned", 0)),
                    sum(1 for c in event.get("considered", []) if c[1] == Outcome.REFUSED),
                )
            )
        elif event["event"] == "snapshot":
            record.snapshots_published += 1
            metrics = event.get("metrics") or {}
            record.pauses.append(float(metrics.get("snapshot_paused_seconds", 0.0)))
            record.snapshot_runs.append(incarnation)
        elif event["event"] == "snapshot_failed":
            record.snapshots_failed += 1
        elif event["event"] == "interrupting":
            record.strikes.append(
                Strike(incarnation, str(event.get("kind")), int(event.get("snapshots", 0)))
            )
        elif event["event"] == "final_snapshot":
            record.final_snapshots[incarnation] = event.get("checkpoint_id")
            if event.get("checkpoint_id"):
                record.snapshots_published += 1
        elif event["event"] == "done":
            record.done = True
    return record


def judge(settings: DemoSettings, record: RunRecord) -> Verdict:
    """Every check of the demo, and its numbers (``verdict.json``)."""
    verdict = Verdict()
    tasks = make_tasks(settings)
    results = record.results
    expected_ids = {task.rollout_id for task in tasks}
    verdict.check(
        "every rollout finished exactly once",
        set(results) == expected_ids and len(results) == len(tasks),
        f"{len(results)} results for {len(tasks)} rollouts",
    )
    wrong = [
        task.rollout_id
        for task in tasks
        if task.rollout_id in results
        and results[task.rollout_id].get("transcript")
        != expected_transcript(task.rollout_id, task.task, seed=settings.gym_seed())
    ]
    verdict.check(
        "every transcript equals an uninterrupted run",
        not wrong,
        f"{len(wrong)} differ {wrong[:3]}" if wrong else "all identical",
    )
    twice = [rid for rid, r in results.items() if len(_turns(r)) != len(set(_turns(r)))]
    verdict.check(
        "no turn's tool effect applied twice in any final result",
        not twice,
        f"{len(twice)} rollouts with a repeated turn" if twice else "each turn once",
    )
    audit_ok, audit_detail, recomputed = audit_check(results, record.audit)
    verdict.check("tool effects applied exactly once (audit log)", audit_ok, audit_detail)
    continued = _check_continuations(verdict, record)
    check_interruptions(verdict, record, recomputed=recomputed)
    record_numbers(
        verdict,
        record,
        continued=continued,
        saved=turns_saved(results, record),
        recomputed=recomputed,
    )
    return verdict


def check_interruptions(verdict: Verdict, record: RunRecord, *, recomputed: int) -> None:
    """The checks of any demo job's interruptions, restarts and end (the nemo-gym demo's too)."""
    _check_interruptions(verdict, record, recomputed=recomputed)


def record_numbers(
    verdict: Verdict, record: RunRecord, *, continued: int, saved: int, recomputed: int
) -> None:
    """``verdict.json``'s numbers: the run's from its record, the work's as counted by its judge."""
    landed = [r for r in record.restores if r.snapshot is not None]
    verdict.number("kills", len(record.strikes))
    verdict.number("kills_planned", len(record.planned))
    verdict.number("max_pause_seconds", max(record.pauses, default=0.0))
    verdict.number("requeues_after_finish", len(record.requeues))
    verdict.number("restores", len(landed))
    verdict.number("restarted_from_task", sum(r.abandoned for r in record.restores))
    verdict.number("snapshots_published", record.snapshots_published)
    verdict.number("snapshots_failed", record.snapshots_failed)
    verdict.number("continued_from_saved_turn", continued)
    verdict.number("turns_saved", saved)
    verdict.number("turns_recomputed", recomputed)


def _check_continuations(verdict: Verdict, record: RunRecord) -> int:
    """Both continuation checks; returns how many rollouts continued from a saved turn."""
    restored = {pair for r in record.restores for pair in r.continued}
    from_saved, at_turn_zero, problems = 0, 0, []
    for rollout_id, result in sorted(record.results.items()):
        attempt, start = _attempt(result), int(result.get("resumed_from_turn", 0))
        attempts = [int(turn.get("attempt", -1)) for turn in result.get("turns", [])]
        if (rollout_id, attempt) in restored:
            if start > 0:
                from_saved += 1
            else:
                at_turn_zero += 1
            carried, own = attempts[:start], attempts[start:]
            if any(a >= attempt for a in carried) or any(a != attempt for a in own):
                problems.append(f"{rollout_id}: turns disagree with resuming at turn {start}")
        elif start > 0:
            problems.append(f"{rollout_id}: resumed at turn {start}, but no restore continued it")
        elif any(a != attempt for a in attempts):
            problems.append(f"{rollout_id}: turns of another attempt in a fresh run")
    landed = sum(1 for r in record.restores if r.snapshot is not None)
    restarted = sum(r.abandoned for r in record.restores)
    verdict.check(
        "rollouts continued from a saved turn",
        from_saved > 0,
        f"{from_saved} continued from a saved turn over {landed} restore(s), "
        f"{at_turn_zero} saved at turn 0, {restarted} restarted from their task",
    )
    verdict.check(
        "every continued rollout matches a restore",
        not problems,
        "; ".join(problems[:3]) if problems else f"{len(restored)} continued attempts, all found",
    )
    return from_saved


def _check_interruptions(verdict: Verdict, record: RunRecord, *, recomputed: int) -> None:
    problems, not_needed = [], []
    for index, planned in enumerate(record.planned):
        incarnation = index + 1
        struck = [s for s in record.strikes if s.incarnation == incarnation]
        exit_code = record.exits.get(incarnation)
        if incarnation in record.cut_short and not struck:
            not_needed.append(f"run {incarnation} was cut short by the demo's own interruption")
            continue
        if not struck and record.done and (exit_code == 0 or incarnation not in record.exits):
            # The job finished before this interruption's moment came: nothing to strike.
            not_needed.append(f"run {incarnation}: the job finished first")
            continue
        if [s.kind for s in struck] != [planned.kind]:
            problems.append(f"run {incarnation}: planned {planned.kind}, struck {struck}")
        elif exit_code != EXPECTED_EXIT[planned.kind]:
            problems.append(f"run {incarnation}: {planned.kind} but exit {exit_code}")
        elif planned.kind != KILL_IN_RESTORE and struck[0].snapshots < planned.after_snapshots:
            problems.append(f"run {incarnation}: struck before a snapshot held rollouts")
    extra = [s for s in record.strikes if s.incarnation > len(record.planned)]
    problems += [f"run {s.incarnation}: unplanned {s.kind}" for s in extra]
    kinds = ", ".join(p.kind for p in record.planned) or "none"
    detail = f"{len(record.strikes)} struck of {len(record.planned)} planned ({kinds})"
    if not_needed:
        detail += f"; {len(not_needed)} not struck: " + "; ".join(not_needed[:3])
    verdict.check(
        "every planned interruption struck after a published snapshot",
        not problems,
        "; ".join(problems[:3]) if problems else detail,
    )
    if record.requeues:
        # A requeue: the job found itself finished; nothing ran, nothing changed.
        busy = [
            n
            for n, unchanged in sorted(record.requeues.items())
            if not unchanged or record.exits.get(n) != 0
        ]
        verdict.check(
            "every run after the job finished was a no-op",
            not busy,
            f"runs {busy} changed the results or failed"
            if busy
            else f"{len(record.requeues)} run(s) found the job finished: exit 0, results unchanged",
        )
    restarts = [r for r in record.restores if r.incarnation > 1]
    # After the demo itself was cut short before any snapshot, a fresh start is right.
    fresh = [
        r.incarnation
        for r in restarts
        if r.snapshot is None and not _nothing_to_restore(record, r.incarnation)
    ]
    verdict.check(
        "every restart restored a snapshot",
        bool(restarts) and not fresh,
        f"runs {fresh} started fresh"
        if fresh
        else f"{len(restarts)} restarts, {sum(r.refused for r in restarts)} snapshots refused",
    )
    last = max(record.exits, default=0)
    verdict.check(
        "the job finished cleanly",
        record.exits.get(last) == 0 and record.done,
        f"run {last} exited {record.exits.get(last)}" + ("" if record.done else ", no done event"),
    )
    preempted = [s.incarnation for s in record.strikes if s.kind == PREEMPT]
    if not preempted:
        return
    used = {r.incarnation: r.snapshot for r in record.restores}
    unused = [
        n
        for n in preempted
        if not record.final_snapshots.get(n) or used.get(n + 1) != record.final_snapshots[n]
    ]
    verdict.check(
        "each preemption published a final snapshot the restart used",
        not unused,
        f"runs {unused} did not" if unused else f"{len(preempted)} final snapshot(s), all restored",
    )
    verdict.check(
        "no turn was redone after a preemption",
        recomputed == 0,
        f"{recomputed} turns recomputed",
    )


def _nothing_to_restore(record: RunRecord, incarnation: int) -> bool:
    """The run before ``incarnation`` was the demo's own cut and no snapshot was published yet."""
    before = [run for run in record.snapshot_runs if run < incarnation]
    return incarnation - 1 in record.cut_short and not before


def turns_saved(results: Mapping[str, Mapping[str, Any]], record: RunRecord) -> int:
    """Turns restores carried over (each restore that kept a turn counts once)."""
    restored = {pair for r in record.restores for pair in r.continued}
    total = 0
    for rollout_id, result in results.items():
        attempt = _attempt(result)
        if (rollout_id, attempt) in restored:
            total += sum(
                max(0, attempt - int(turn.get("attempt", attempt)))
                for turn in result.get("turns", [])
            )
    return total


def audit_check(
    results: Mapping[str, Mapping[str, Any]], audit: Sequence[Mapping[str, Any]]
) -> tuple[bool, str, int]:
    """Effects in the tool's audit log (which outlives crashes) against the final results.

    Every application carries an id naming the process that applied it. Each
    turn of each final result names the application it kept; that one must be
    in the log exactly once, for the same rollout, turn and value. Any other
    entry was applied by a process that then crashed before a snapshot kept
    it: its tool state died with it, so the effect never took hold, and the
    turn was recomputed. Returns (ok, detail, recomputed turns).
    """
    by_id: dict[str, list[Mapping[str, Any]]] = {}
    for entry in audit:
        by_id.setdefault(str(entry.get("application")), []).append(entry)
    problems: list[str] = []
    credited: set[str] = set()
    for rollout_id, result in results.items():
        for turn in result.get("turns", []):
            application = str(turn.get("application"))
            credited.add(application)
            entries = by_id.get(application, [])
            if len(entries) != 1:
                problems.append(f"{rollout_id}/t{turn['turn']}: {len(entries)} log entries")
                continue
            entry = entries[0]
            if (entry["rollout_id"], entry["turn"], entry["value"]) != (
                rollout_id,
                turn["turn"],
                turn["value"],
            ):
                problems.append(f"{rollout_id}/t{turn['turn']}: log entry disagrees")
    lost = _uncredited(results, audit)
    detail = (
        f"{len(credited)} effects applied once; {lost} more were applied by processes that "
        "died before a snapshot kept them (recomputed)"
        if not problems
        else "; ".join(problems[:3])
    )
    return not problems, detail, lost


def write_verdict(verdict: Verdict, path: Path) -> None:
    atomic_write_bytes(path, json.dumps(verdict.to_json(), indent=1, sort_keys=True).encode())


def judge_directory(settings: DemoSettings) -> tuple[RunRecord, Verdict]:
    """Read the run in ``settings.directory``, judge it, and write its ``verdict.json``."""
    record = read_run(settings.directory)
    verdict = judge(settings, record)
    write_verdict(verdict, settings.directory / "verdict.json")
    return record, verdict


def _uncredited(
    results: Mapping[str, Mapping[str, Any]], audit: Sequence[Mapping[str, Any]]
) -> int:
    kept = {str(turn.get("application")) for r in results.values() for turn in r.get("turns", [])}
    return sum(1 for entry in audit if str(entry.get("application")) not in kept)


def _turns(result: Mapping[str, Any]) -> list[int]:
    return [int(turn["turn"]) for turn in result.get("turns", [])]


def _attempt(result: Mapping[str, Any]) -> int:
    episode = result.get("episode")
    return int(episode.get("attempt", 0)) if isinstance(episode, dict) else 0


def _json_or(path: Path, default: dict[str, Any]) -> dict[str, Any]:
    if not path.exists():
        return default
    value = json.loads(path.read_text())
    return value if isinstance(value, dict) else default


def _json_lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
