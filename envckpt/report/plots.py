"""The report's figures: matplotlib figures written as static SVG text, to inline.

Each figure is a pure function of ``ReportData`` and returns ``<svg ...>``.
Every mark that stands for a datum carries an id (matplotlib's ``gid``), so
a reader, or a test, can count what is drawn: ``timeline-snapshot-<n>`` for
each published snapshot's pause bar, ``timeline-failed-<n>``,
``timeline-restore-<n>``, ``timeline-kill-<n>``, ``latency-bar-<n>``,
``bytes-bar-<n>``, ``phases-bar-<n>``::

    svg = timeline(data)            # pause bars, restores, kills, runs, over time
    svg = instance_latency(data)    # which instance held each pause
    svg = snapshot_bytes(data)      # trainer and environment bytes per snapshot
    svg = phase_breakdown(data)     # where each pause went

No pyplot (no global figure state) and the Agg canvas's SVG writer only:
nothing here opens a window or needs a display.
"""

from __future__ import annotations

import functools
import io
import re
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager

from envckpt.extras import require
from envckpt.report.sources import ReportData
from envckpt.telemetry.snapshot_record import SnapshotTelemetry

require("matplotlib", extra="report")

# matplotlib is imported after the check above names the extra when it is missing.
from matplotlib import rc_context  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

BLUE, RED, GREEN, GREY, INK = "#2b6cb0", "#c53030", "#2f855a", "#a0aec0", "#1a202c"
INSTANCE_COLOURS = (
    "#2b6cb0",
    "#dd6b20",
    "#38a169",
    "#805ad5",
    "#d53f8c",
    "#319795",
    "#b7791f",
    "#4a5568",
)
PHASE_COLOURS = {
    "retire": "#cbd5e0",
    "prepare": "#3182ce",
    "commit": "#805ad5",
    "cut_wait": "#f6ad55",
    "cut": "#dd6b20",
    "publish": "#38a169",
    "resume": "#718096",
}
# Instances drawn one by one in the latency figure (the slowest); the rest are summarised.
DRAWN_INSTANCES = 8
WIDTH = 11.0


def _styled(draw: Callable[[ReportData], str]) -> Callable[[ReportData], str]:
    """A plot drawn under the report's style (``_style``)."""

    @functools.wraps(draw)
    def styled(data: ReportData) -> str:
        with _style():
            return draw(data)

    return styled


@_styled
def timeline(data: ReportData) -> str:
    """Runs, kills and restores on top; below, each snapshot's pause as a bar where it was."""
    figure = Figure(figsize=(WIDTH, 3.8))
    lane, pauses = figure.subplots(
        2, 1, sharex=True, gridspec_kw={"height_ratios": [1, 3], "hspace": 0.08}
    )
    zero = data.start
    end = _end(data) - zero
    for run in data.runs:
        stop = (run.ended if run.ended is not None else zero + end) - run.started
        bars = lane.broken_barh(
            [(run.started - zero, max(stop, 0.0))], (0.15, 0.7), color=_alternate(run.incarnation)
        )
        bars.set_gid(f"timeline-run-{run.incarnation}")
        lane.text(
            run.started - zero + end / 200,
            0.5,
            f"run {run.incarnation}",
            ha="left",
            va="center",
            color="white",
            fontsize=8,
        )
    for number, kill in enumerate(data.interruptions, start=1):
        at = kill.at - zero
        for axes in (lane, pauses):
            axes.axvline(
                at, color=RED, linestyle="--", linewidth=1.2, gid=f"timeline-kill-{number}"
            )
        label = "SIGTERM" if kill.kind == "preempt" else "SIGKILL"
        if kill.kind == "kill_in_restore":
            label += " (in restore)"
        lane.text(at, 1.05, label, color=RED, ha="center", va="bottom", fontsize=7)
    for number, restore in enumerate(data.restores, start=1):
        pauses.axvspan(
            restore.started_at - zero,
            restore.ended_at - zero,
            color=GREEN,
            alpha=0.18,
            gid=f"timeline-restore-{number}",
        )
        lane.plot(restore.started_at - zero, 0.97, marker="v", color=GREEN, markersize=7)
    minimum = max(end / 250, 0.05)
    for number, record in enumerate(data.published, start=1):
        _pause_bar(pauses, record, zero, minimum, BLUE, f"timeline-snapshot-{number}")
        if len(data.published) <= 60:
            pauses.text(
                record.started_at - zero + max(record.paused_seconds, minimum) / 2,
                record.paused_seconds,
                f"#{number}",
                ha="center",
                va="bottom",
                fontsize=7,
                color=INK,
            )
    for number, record in enumerate(data.failed, start=1):
        _pause_bar(pauses, record, zero, minimum, RED, f"timeline-failed-{number}")
    lane.set_ylim(0, 1.35)
    lane.set_yticks([])
    lane.set_ylabel("runs", rotation=0, ha="right", va="center")
    for side in ("top", "right", "left"):
        lane.spines[side].set_visible(False)
    pauses.set_xlim(0, max(end, 1.0) * 1.02)
    tallest = max((record.paused_seconds for record in data.snapshots), default=1.0)
    pauses.set_ylim(0, max(tallest, 0.001) * 1.2)
    pauses.set_xlabel("seconds since the first record")
    pauses.set_ylabel("paused (s)")
    _tidy(pauses)
    legend = [_patch(BLUE, "snapshot pause")]
    if data.failed:
        legend.append(_patch(RED, "failed snapshot"))
    if data.restores:
        legend.append(_patch(GREEN, "restore", alpha=0.3))
    figure.legend(handles=legend, loc="outside lower center", frameon=False, ncols=3, fontsize=8)
    if not data.snapshots:
        _empty(pauses, "no snapshot recorded")
    return _svg(figure)


@_styled
def instance_latency(data: ReportData) -> str:
    """Per snapshot, each instance's prepare (solid) and commit (light) seconds."""
    figure = Figure(figsize=(WIDTH, 3.4))
    axes = figure.subplots()
    records = data.published
    held: dict[str, float] = {}
    for record in records:
        for instance in record.instances:
            held[instance.instance_id] = max(
                held.get(instance.instance_id, 0.0), instance.held_seconds
            )
    drawn = sorted(held, key=lambda iid: (-held[iid], iid))[:DRAWN_INSTANCES]
    drawn.sort(key=_natural)
    width = 0.8 / max(len(drawn), 1)
    bar = 0
    for slot, instance_id in enumerate(drawn):
        colour = INSTANCE_COLOURS[slot % len(INSTANCE_COLOURS)]
        for index, record in enumerate(records):
            found = next((i for i in record.instances if i.instance_id == instance_id), None)
            if found is None:
                continue
            x = index - 0.4 + width * (slot + 0.5)
            bar += 1
            solid = axes.bar(x, found.prepare_seconds, width * 0.9, color=colour)
            light = axes.bar(
                x,
                found.commit_seconds,
                width * 0.9,
                bottom=found.prepare_seconds,
                color=colour,
                alpha=0.4,
                hatch="///",
                edgecolor="white",
                linewidth=0,
            )
            solid[0].set_gid(f"latency-bar-{bar}")
            light[0].set_gid(f"latency-commit-{bar}")
    summarised = False
    for index, record in enumerate(records):
        if record.prepare_latency.count > len(drawn):
            summarised = True
            axes.plot(index, record.prepare_latency.p50, marker="_", color=INK, markersize=40)
    axes.set_xticks(range(len(records)), _labels(records))
    axes.set_ylabel("seconds")
    handles = [
        _patch(INSTANCE_COLOURS[slot % len(INSTANCE_COLOURS)], instance_id)
        for slot, instance_id in enumerate(drawn)
    ]
    handles.append(_patch(GREY, "commit (light, hatched)", alpha=0.5))
    if summarised:
        handles.append(_line("median prepare of all instances"))
    axes.legend(handles=handles, loc="upper left", frameon=False, ncols=4, fontsize=8)
    _tidy(axes)
    axes.set_ylim(
        0,
        max((r.prepare_latency.max + r.commit_latency.max for r in records), default=1.0) * 1.45
        or 1.0,
    )
    if not bar:
        _empty(axes, "no per-instance latency recorded")
    return _svg(figure)


@_styled
def snapshot_bytes(data: ReportData) -> str:
    """Per snapshot, the trainer's bytes and the environment's, stacked."""
    figure = Figure(figsize=(WIDTH, 3.0))
    axes = figure.subplots()
    records = data.published
    largest = max((record.bytes for record in records), default=0)
    scale, unit = _byte_unit(largest)
    for index, record in enumerate(records, start=1):
        trainer = record.trainer_bytes / scale
        environment = max(record.bytes - record.trainer_bytes, 0) / scale
        first = axes.bar(index - 1, trainer, 0.6, color=BLUE)
        second = axes.bar(index - 1, environment, 0.6, bottom=trainer, color="#dd6b20")
        first[0].set_gid(f"bytes-bar-{index}")
        second[0].set_gid(f"bytes-environment-{index}")
    axes.set_xticks(range(len(records)), _labels(records))
    axes.set_ylabel(unit)
    axes.legend(
        handles=[
            _patch(BLUE, "trainer: data plane, ledger, sidecars"),
            _patch("#dd6b20", "environment: participant records, gym_checkpoint.json"),
        ],
        loc="upper left",
        frameon=False,
        ncols=2,
        fontsize=8,
    )
    axes.set_ylim(0, max(largest / scale, 1.0) * 1.35)
    _tidy(axes)
    if not records:
        _empty(axes, "no snapshot published")
    return _svg(figure)


@_styled
def phase_breakdown(data: ReportData) -> str:
    """Per snapshot, the seconds of each phase laid end to end, and the pause it made."""
    records = data.published
    figure = Figure(figsize=(WIDTH, 1.2 + 0.32 * max(len(records), 1)))
    axes = figure.subplots()
    bar = 0
    for row, record in enumerate(records):
        left = 0.0
        for phase, seconds in record.phases.items():
            if seconds <= 0:
                continue
            bar += 1
            drawn = axes.barh(row, seconds, 0.6, left=left, color=PHASE_COLOURS[phase])
            drawn[0].set_gid(f"phases-bar-{bar}")
            left += seconds
        axes.plot(record.paused_seconds, row, marker="|", color=INK, markersize=16, mew=2)
    axes.set_yticks(range(len(records)), _labels(records, newline=False))
    axes.invert_yaxis()
    axes.set_xlabel("seconds (the black tick is the pause)")
    handles = [_patch(colour, phase) for phase, colour in PHASE_COLOURS.items()]
    axes.legend(
        handles=handles,
        loc="lower right",
        frameon=False,
        ncols=7,
        fontsize=8,
        bbox_to_anchor=(1.0, 1.0),
    )
    _tidy(axes)
    if not bar:
        _empty(axes, "no snapshot published")
    return _svg(figure)


# ---- helpers -------------------------------------------------------------------


def _pause_bar(
    axes: Axes, record: SnapshotTelemetry, zero: float, minimum: float, colour: str, gid: str
) -> None:
    drawn = axes.bar(
        record.started_at - zero,
        record.paused_seconds,
        max(record.paused_seconds, minimum),
        align="edge",
        color=colour,
    )
    drawn[0].set_gid(gid)


def _end(data: ReportData) -> float:
    moments = [
        data.start,
        *(r.ended_at for r in data.snapshots),
        *(r.ended_at for r in data.restores),
        *(run.ended for run in data.runs if run.ended is not None),
        *(i.at for i in data.interruptions),
    ]
    return max(moments)


def _labels(records: Sequence[SnapshotTelemetry], *, newline: bool = True) -> list[str]:
    separator = "\n" if newline else " "
    return [
        f"#{n}" + (f"{separator}step {r.step}" if r.step is not None else "")
        for n, r in enumerate(records, start=1)
    ]


def _byte_unit(largest: int) -> tuple[float, str]:
    for scale, unit in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if largest >= scale:
            return float(scale), unit
    return 1.0, "bytes"


def _alternate(incarnation: int) -> str:
    return ("#4a5568", "#718096")[incarnation % 2]


def _patch(colour: str, label: str, *, alpha: float = 1.0) -> object:
    from matplotlib.patches import Patch

    return Patch(color=colour, label=label, alpha=alpha)


def _line(label: str) -> object:
    from matplotlib.lines import Line2D

    return Line2D([], [], color=INK, marker="_", linestyle="none", markersize=14, label=label)


def _natural(text: str) -> tuple[object, ...]:
    """``replica-2`` before ``replica-10``."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text))


def _tidy(axes: Axes) -> None:
    for side in ("top", "right"):
        axes.spines[side].set_visible(False)
    axes.grid(axis="y", color="#e2e8f0", linewidth=0.8)
    axes.set_axisbelow(True)


def _empty(axes: Axes, text: str) -> None:
    axes.text(0.5, 0.5, text, transform=axes.transAxes, ha="center", va="center", color=GREY)


def _style() -> AbstractContextManager[None]:
    """Text kept as text (the browser's fonts), ids stable from run to run."""
    return rc_context({"svg.fonttype": "none", "svg.hashsalt": "envckpt-report", "font.size": 9.0})


def _svg(figure: Figure) -> str:
    with _style():
        figure.set_layout_engine("constrained")
        buffer = io.StringIO()
        figure.savefig(buffer, format="svg", metadata={"Date": None})
    text = buffer.getvalue()
    # Inline: the XML prolog and doctype belong to a file, not to an HTML page.
    return text[text.index("<svg") :]
