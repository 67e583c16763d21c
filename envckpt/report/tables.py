"""The report's HTML tables: snapshots, who held each pause, restores, the verdict.

Every cell is escaped here; the page (``page.py``) only places the tables::

    html = snapshots_table(data)
    html = restores_table(data)
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping, Sequence
from html import escape
from typing import Any

from envckpt.report.sources import KILL_IN_RESTORE, ReportData
from envckpt.telemetry.restore_record import RestoreTelemetry

# Rows a table shows before it says how many more there are.
MAX_ROWS = 200
# Rollouts a restore row names one by one.
MAX_NAMED = 50


def table(headers: Sequence[str], rows: Iterable[Sequence[str]], *, css: str = "") -> str:
    """An HTML table of already-escaped cells."""
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    cls = f' class="{css}"' if css else ""
    return f"<table{cls}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def seconds(value: float) -> str:
    if value >= 10:
        return f"{value:.1f} s"
    if value >= 1:
        return f"{value:.2f} s"
    return f"{value * 1000:.0f} ms" if value >= 0.001 else f"{value * 1000:.2f} ms"


def size(value: int) -> str:
    for scale, unit in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if value >= scale:
            return f"{value / scale:.1f} {unit}"
    return f"{value} B"


def clock(at: float) -> str:
    moment = datetime.datetime.fromtimestamp(at, datetime.UTC)
    return moment.strftime("%H:%M:%S") + f".{int(at * 10) % 10}"


def when(at: float, zero: float) -> str:
    """Seconds since the first record (the timeline's axis), and the UTC time under it."""
    return f"{at - zero:.1f} s<br><small>{clock(at)} UTC</small>"


def snapshots_table(data: ReportData) -> str:
    """One row per snapshot, published or failed, in the order they ended."""
    rows = []
    published = 0
    stepped = any(record.step is not None for record in data.snapshots)
    for record in data.snapshots[:MAX_ROWS]:
        if record.published:
            published += 1
            status = "on disk" if record.checkpoint_id in data.on_disk else "pruned"
            if record.resume_error:
                status += "; resume failed"
            number = f"#{published}"
        else:
            status = f'<span class="bad">failed in {escape(record.failed_phase)}</span>'
            number = "&ndash;"
        slowest = record.prepare_latency.slowest
        rows.append(
            [
                number,
                f"<code>{escape(record.checkpoint_id)}</code>",
                "" if record.step is None else str(record.step),
                when(record.started_at, data.start),
                escape(record.reason),
                seconds(record.paused_seconds),
                size(record.bytes) if record.published else "",
                f"{record.episodes_parked} / {record.episodes_restarted}",
                f"<code>{escape(slowest)}</code> {seconds(record.prepare_latency.max)}"
                if slowest
                else "",
                status
                if record.published
                else status + f"<br><small>{escape(record.failure)}</small>",
            ]
        )
    headers = [
        "",
        "snapshot",
        "step",
        "started",
        "why",
        "paused",
        "bytes",
        "saved / restarted",
        "slowest prepare",
        "status",
    ]
    if not stepped:
        del headers[2]
        for row in rows:
            del row[2]
    return table(headers, rows) + _more(len(data.snapshots))


def holders_table(data: ReportData) -> str:
    """Per published snapshot: the instance and the participant that held it longest."""
    rows = []
    for number, record in enumerate(data.published[:MAX_ROWS], start=1):
        if not record.instances:
            continue
        instance = record.instances[0]  # slowest first
        timed = [p for p in instance.participants if p.prepare_seconds is not None]
        participant = max(timed, key=lambda p: p.prepare_seconds or 0.0, default=None)
        rows.append(
            [
                f"#{number}",
                f"<code>{escape(instance.instance_id)}</code>",
                seconds(instance.prepare_seconds),
                seconds(instance.commit_seconds),
                ""
                if participant is None
                else f"<code>{escape(participant.server)}</code> "
                f"{seconds(participant.prepare_seconds or 0.0)}",
                str(record.records_written),
                f"{record.instance_count} (p50 {seconds(record.prepare_latency.p50)})",
            ]
        )
    headers = (
        "",
        "held longest",
        "its prepare",
        "its commit",
        "its slowest participant (prepare)",
        "records written",
        "instances",
    )
    return table(headers, rows) if rows else ""


def restores_table(data: ReportData) -> str:
    """Every restore: which snapshot, how long, what continued at which turn, what restarted;
    and every restore a kill cut short."""
    rows: list[tuple[float, list[str]]] = []
    for record in data.restores:
        rows.append(
            (
                record.started_at,
                [
                    when(record.started_at, data.start),
                    _outcome(record),
                    "" if record.snapshot is None else f"<code>{escape(record.snapshot)}</code>",
                    seconds(record.seconds),
                    _continued(record, data.resumed_turns),
                    _restarted(record),
                    str(record.refused),
                ],
            )
        )
    for kill in data.interruptions:
        if kill.kind == KILL_IN_RESTORE:
            where = f" at <code>{escape(kill.point)}</code>" if kill.point else ""
            rows.append(
                (
                    kill.at,
                    [
                        when(kill.at, data.start),
                        f'<span class="bad">killed in run {kill.incarnation}\'s restore</span>',
                        "",
                        "",
                        f"<small>SIGKILL{where}; the next run restored again</small>",
                        "",
                        "",
                    ],
                )
            )
    rows.sort(key=lambda row: row[0])
    headers = ("when", "outcome", "snapshot", "took", "continued", "restarted from task", "refused")
    return table(headers, [row for _, row in rows], css="restores")


def verdict_table(verdict: Mapping[str, Any]) -> str:
    checks = verdict.get("checks")
    rows = []
    for check in checks if isinstance(checks, list) else []:
        if not isinstance(check, Mapping):
            continue
        passed = check.get("passed") is True
        mark = '<span class="good">PASS</span>' if passed else '<span class="bad">FAIL</span>'
        rows.append(
            [mark, escape(str(check.get("check", ""))), escape(str(check.get("detail", "")))]
        )
    return table(("", "check", "what was found"), rows)


def _outcome(record: RestoreTelemetry) -> str:
    labels = {"restored": "restored", "fresh": "fresh start", "failed": "failed"}
    text = escape(labels.get(str(record.outcome), str(record.outcome)))
    if record.failure:
        return f'<span class="bad">{text}</span><br><small>{escape(record.failure)}</small>'
    return text


def _continued(record: RestoreTelemetry, turns: Mapping[tuple[str, int], int] | None) -> str:
    if not record.continued:
        return "none"
    items = []
    for rollout in record.continued_rollouts[:MAX_NAMED]:
        turn = None if turns is None else turns.get((rollout.rollout_id, rollout.attempt))
        at = f", at turn {turn}" if turn is not None else ""
        items.append(
            f"<li><code>{escape(rollout.rollout_id)}</code> as attempt {rollout.attempt} on "
            f"<code>{escape(rollout.instance_id)}</code>{at}</li>"
        )
    named = len(items)
    more = f"<li>and {record.continued - named} more</li>" if record.continued > named else ""
    opened = " open" if record.continued <= 12 else ""
    return (
        f"<details{opened}><summary>{record.continued} rollout(s)</summary>"
        f"<ul>{''.join(items)}{more}</ul></details>"
    )


def _restarted(record: RestoreTelemetry) -> str:
    if not record.restarted:
        return "none"
    names = ", ".join(f"<code>{escape(r)}</code>" for r in record.restarted_rollouts[:MAX_NAMED])
    more = record.restarted - min(len(record.restarted_rollouts), MAX_NAMED)
    return f"{record.restarted}: {names}" + (f" and {more} more" if more > 0 else "")


def _more(count: int) -> str:
    return f"<p class=note>and {count - MAX_ROWS} more</p>" if count > MAX_ROWS else ""
