"""The demo's printed summary: one row per run, one per restore, and the work saved.

    text = render_summary(settings, record, verdict)

Everything comes from the event log and the verdict's numbers, so both demos
(processes, in-process) print the same tables for the same kind of run.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from envckpt.demo.events import EVENTS_NAME, read_events
from envckpt.demo.plan import KILL, KILL_IN_RESTORE, PREEMPT
from envckpt.demo.report import Verdict, pause_warnings, percentile, table, wrapped
from envckpt.demo.scenario import DemoSettings
from envckpt.demo.verdict import KILLED, RunRecord

# Timer snapshots that paused the environment longer than it ran since the one before.
PAUSE_WARNING = "paused > ran"


def render_summary(settings: DemoSettings, record: RunRecord, verdict: Verdict) -> str:
    events = list(read_events(settings.directory / EVENTS_NAME))
    out = [_runs_table(events, record), _restores_table(record)]
    numbers = verdict.numbers
    out.append(
        "\n".join(
            [
                f"work saved: {numbers.get('turns_saved', 0)} turns carried over by restores "
                "(restart-from-task would have recomputed them)",
                f"work lost: {numbers.get('turns_recomputed', 0)} turns recomputed "
                "(done by processes that died before a snapshot kept them)",
            ]
        )
    )
    return "\n\n".join(out)


def run_pauses(events: Sequence[dict[str, Any]], incarnation: int) -> tuple[list[float], int]:
    """The pauses of one run's snapshots, and how many paused longer than the job ran."""
    snapshots = [
        (
            float(e["ts"]),
            float(e["metrics"].get("snapshot_paused_seconds", 0.0)),
            str(e.get("reason", "timer")),
        )
        for e in events
        if e["event"] == "snapshot" and e.get("incarnation") == incarnation
    ]
    return [paused for _, paused, _ in snapshots], pause_warnings(snapshots)


def _runs_table(events: Sequence[dict[str, Any]], record: RunRecord) -> str:
    rows = []
    endings = []
    for incarnation in sorted(record.exits):
        mine = [e for e in events if e.get("incarnation") == incarnation]
        pauses, warnings = run_pauses(events, incarnation)
        failed = sum(1 for e in mine if e["event"] == "snapshot_failed")
        sealed = sum(1 for e in mine if e["event"] == "sealed")
        rows.append(
            (
                f"run {incarnation}",
                sealed,
                len(pauses),
                failed,
                _ms(pauses, 0.5),
                _ms(pauses, 0.95),
                warnings,
            )
        )
        endings.append(
            wrapped(f"run {incarnation}: {_ending(record, incarnation, mine)}", indent="  ")
        )
    drawn = table(
        "runs",
        (
            "run",
            "finished",
            "snapshots",
            "failed snapshots",
            "pause p50",
            "pause p95",
            PAUSE_WARNING,
        ),
        rows,
    )
    return "\n".join([drawn, "how each run ended:", *endings])


def _ms(pauses: Sequence[float], fraction: float) -> str:
    return f"{percentile(pauses, fraction) * 1000:.0f} ms" if pauses else "-"


def _ending(record: RunRecord, incarnation: int, events: Sequence[dict[str, Any]]) -> str:
    code = record.exits.get(incarnation)
    strike = next((s for s in record.strikes if s.incarnation == incarnation), None)
    if strike is not None and strike.kind == KILL and code == KILLED:
        return f"SIGKILL after {strike.snapshots} snapshot(s) holding rollouts"
    if strike is not None and strike.kind == KILL_IN_RESTORE and code == KILLED:
        point = next((e.get("point") for e in events if e["event"] == "interrupting"), "")
        return f"SIGKILL inside the restore ({point})"
    if strike is not None and strike.kind == PREEMPT:
        final = record.final_snapshots.get(incarnation)
        taken = f"final snapshot {final}" if final else "no final snapshot"
        return f"SIGTERM: {taken}, exit {code}"
    stopped = next((e for e in events if e["event"] == "stopped"), None)
    if stopped is not None:
        return f"exit {code}: {stopped.get('reason', '')}"
    return "killed" if code == KILLED else f"exit {code}"


def _restores_table(record: RunRecord) -> str:
    rows: list[tuple[object, ...]] = [
        (
            f"run {r.incarnation}",
            r.snapshot or "(none: fresh start)",
            r.refused,
            len(r.continued),
            r.abandoned,
        )
        for r in record.restores
    ]
    rows += [
        (f"run {s.incarnation}", "(killed inside the restore)", "", "", "")
        for s in record.strikes
        if s.kind == KILL_IN_RESTORE
    ]
    rows.sort(key=lambda row: int(str(row[0]).split()[1]))
    return table(
        "restores",
        ("run", "snapshot restored", "refused", "continued", "restarted from task"),
        rows,
    )
