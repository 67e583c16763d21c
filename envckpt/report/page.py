"""The report page: one HTML file with everything inline (styles, figures, charts).

No script, no stylesheet, font or image from anywhere else: the page opens
the same offline, from a mail attachment or a CI artifact::

    html = render_page(data, figures=Figures(...), charts=drawn, logs=paths)
"""

from __future__ import annotations

import datetime
import statistics
from dataclasses import dataclass
from html import escape
from pathlib import Path

from envckpt.report import tables
from envckpt.report.sources import ReportData
from envckpt.report.statecharts import DrawnCharts

STYLE = """
:root { --ink:#1a202c; --muted:#4a5568; --line:#e2e8f0; --good:#2f855a; --bad:#c53030;
        --blue:#2b6cb0; --card:#f7fafc; }
* { box-sizing: border-box; }
body { margin: 0 auto; max-width: 1180px; padding: 24px 28px 64px; color: var(--ink);
       font: 14px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 17px; margin: 36px 0 6px;
  padding-top: 12px; border-top: 1px solid var(--line); }
code { font: 12px/1.4 ui-monospace, "DejaVu Sans Mono", monospace; }
.lede { color: var(--muted); margin: 0 0 10px; max-width: 900px; }
.meta { color: var(--muted); margin: 0 0 18px; }
.cards { display: grid; grid-template-columns: repeat(auto-fit, minmax(170px, 1fr)); gap: 12px; }
.card { background: var(--card); border: 1px solid var(--line); border-radius: 8px;
        padding: 10px 14px; }
.card .label { color: var(--muted); font-size: 12px; text-transform: uppercase;
               letter-spacing: .04em; }
.card .value { font-size: 22px; font-weight: 600; }
.card .sub { color: var(--muted); font-size: 12px; }
figure.plot { margin: 0; } figure.plot svg { width: 100%; height: auto; display: block; }
table { border-collapse: collapse; width: 100%; margin: 8px 0; font-size: 13px; }
th, td { text-align: left; padding: 5px 8px; border-bottom: 1px solid var(--line);
         vertical-align: top; white-space: nowrap; }
td small, td details, #verdict td, #problems li { white-space: normal; }
th { color: var(--muted); font-weight: 600; font-size: 12px; }
.good { color: var(--good); font-weight: 600; } .bad { color: var(--bad); font-weight: 600; }
.badge { display: inline-block; padding: 2px 10px; border-radius: 12px; color: white;
         font-weight: 700; } .badge.good { background: var(--good); }
.badge.bad { background: var(--bad); }
.charts { display: grid; grid-template-columns: repeat(2, minmax(0, 1fr)); gap: 18px; }
.chart { border: 1px solid var(--line); border-radius: 8px; padding: 10px; overflow: auto; }
.chart h3 { font-size: 14px; margin: 0 0 6px; } .chart svg { max-width: 100%; height: auto; }
.notice { background: #fffaf0; border: 1px solid #f6ad55; border-radius: 8px;
          padding: 10px 14px; }
details summary { cursor: pointer; } ul { margin: 4px 0; padding-left: 18px; }
.note { color: var(--muted); font-size: 12px; }
"""


@dataclass(frozen=True, slots=True)
class Figures:
    """The four figures' SVG text."""

    timeline: str
    latency: str
    phases: str
    bytes: str


def render_page(
    data: ReportData, *, figures: Figures, charts: DrawnCharts, logs: list[Path]
) -> str:
    """The whole page."""
    sections = [
        _header(data, logs),
        _section(
            "timeline",
            "Timeline",
            "Each blue bar is one published snapshot: it starts where the pause began, and "
            "its height is how long rollouts were paused. Green bands are restores, red "
            "dashed lines the interruptions, the grey lane above the runs of the job.",
            _figure("timeline", figures.timeline),
        ),
        _section(
            "latency",
            "Which instance held the pause",
            "Per snapshot, each Gym instance's prepare (solid: parking its rollouts at a turn "
            "boundary) and commit (hatched: writing its records). The pause lasts as long as "
            "the slowest instance.",
            _figure("latency", figures.latency) + tables.holders_table(data),
        ),
        _section(
            "phases",
            "Where each pause went",
            "The phases of each snapshot laid end to end; the black tick is the pause. A "
            "snapshot that resumed early (take) resumes while the trainer writes its state, "
            "so its bars can run past the tick.",
            _figure("phases", figures.phases),
        ),
        _section(
            "bytes",
            "Bytes per snapshot",
            "What each published snapshot wrote: the trainer's data plane, ledger and "
            "sidecars, and the environment's participant records.",
            _figure("bytes", figures.bytes),
        ),
        _section("snapshots", "Snapshots", "", tables.snapshots_table(data)),
        _section("restores", "Restore history", _restore_lede(data), tables.restores_table(data)),
        _section(
            "statecharts",
            "The four machines, with this run's counts",
            _charts_lede(),
            _charts(charts),
        ),
    ]
    if data.verdict is not None:
        sections.append(
            _section("verdict", "Verdict", _verdict_lede(data), tables.verdict_table(data.verdict))
        )
    if data.problems:
        items = "".join(f"<li>{escape(problem)}</li>" for problem in data.problems)
        sections.append(_section("problems", "What could not be read", "", f"<ul>{items}</ul>"))
    title = f"envckpt report: {data.root.name or data.root}"
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title><style>{STYLE}</style></head><body>"
        + "".join(sections)
        + '<p class="note">Generated by <code>envckpt report</code>.</p></body></html>\n'
    )


def _header(data: ReportData, logs: list[Path]) -> str:
    published, failed = data.published, data.failed
    pauses = [record.paused_seconds for record in published]
    landed = [r for r in data.restores if r.snapshot is not None and not r.failure]
    generated = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    ran = sum((run.ended or data.start) - run.started for run in data.runs if run.ended)
    paused = sum(pauses)
    cards = [
        _card("snapshots", str(len(published)), f"{len(failed)} failed"),
        _card(
            "pause, median",
            tables.seconds(statistics.median(pauses)) if pauses else "&ndash;",
            f"max {tables.seconds(max(pauses))}" if pauses else "",
        ),
        _card(
            "time paused",
            tables.seconds(paused),
            f"{100 * paused / ran:.1f}% of {tables.seconds(ran)} the job ran" if ran else "",
        ),
        _card(
            "restores",
            str(len(landed)),
            f"{sum(r.continued for r in landed)} continued, "
            f"{sum(r.restarted for r in landed)} restarted",
        ),
        _card(
            "written",
            tables.size(sum(r.bytes for r in published)),
            f"last {tables.size(published[-1].bytes)}" if published else "",
        ),
    ]
    if data.verdict is not None:
        passed = data.verdict.get("passed") is True
        mark, word = ("good", "PASS") if passed else ("bad", "FAIL")
        badge = f'<span class="badge {mark}">{word}</span>'
        cards.append(_card("verdict", badge, f"{data.verdict.get('kills', 0)} kills"))
    return (
        f"<header><h1>Rollout snapshots of <code>{escape(str(data.root))}</code></h1>"
        f'<p class="meta">{len(data.snapshots)} snapshot and {len(data.restores)} restore '
        f"records from <code>telemetry.jsonl</code>, {len(logs)} transition logs; "
        f"generated {generated}.</p>"
        f'<div class="cards">{"".join(cards)}</div></header>'
    )


def _card(label: str, value: str, sub: str) -> str:
    return (
        f'<div class="card"><div class="label">{escape(label)}</div>'
        f'<div class="value">{value}</div><div class="sub">{escape(sub)}</div></div>'
    )


def _section(anchor: str, title: str, lede: str, body: str) -> str:
    intro = f'<p class="lede">{lede}</p>' if lede else ""
    return f'<section id="{anchor}"><h2>{escape(title)}</h2>{intro}{body}</section>'


def _figure(name: str, svg: str) -> str:
    return f'<figure class="plot" data-figure="{name}">{svg}</figure>'


def _restore_lede(data: ReportData) -> str:
    text = (
        "Every start of the job restores the newest usable snapshot (or starts fresh). "
        "A continued rollout resumes at its saved turn as the next attempt; a restarted "
        "one starts over from its task."
    )
    if data.verdict is not None:
        saved, lost = data.verdict.get("turns_saved"), data.verdict.get("turns_recomputed")
        text += (
            f" Over the run, restores carried over <strong>{escape(str(saved))}</strong> turns "
            f"that restarting from the task would have recomputed; "
            f"<strong>{escape(str(lost))}</strong> turns were recomputed (done by processes "
            "that died before a snapshot kept them)."
        )
    return text


def _charts_lede() -> str:
    return (
        "Drawn from the machine tables by the project's Mermaid renderer, with how often "
        "each transition fired in this run's logs: thick edges fired (&times;N), dotted "
        "ones never did, grey states were never entered."
    )


def _charts(charts: DrawnCharts) -> str:
    if charts.notice:
        return f'<p class="notice">{escape(charts.notice)}</p>'
    blocks = []
    for name, svg in charts.svgs.items():
        count = charts.counts.get(name, 0)
        caption = f"{count} transitions" if count else "no transition of this machine recorded"
        blocks.append(
            f'<div class="chart" data-machine="{escape(name)}">'
            f"<h3>{escape(charts.titles.get(name, name))}"
            f' <span class="note">({caption})</span></h3>{svg}</div>'
        )
    return f'<div class="charts">{"".join(blocks)}</div>'


def _verdict_lede(data: ReportData) -> str:
    assert data.verdict is not None
    numbers = ", ".join(
        f"{escape(key.replace('_', ' '))}: {escape(str(data.verdict.get(key)))}"
        for key in (
            "snapshots_published",
            "snapshots_failed",
            "restores",
            "kills",
            "continued_from_saved_turn",
            "restarted_from_task",
        )
        if key in data.verdict
    )
    return f"From <code>verdict.json</code>: {numbers}."
