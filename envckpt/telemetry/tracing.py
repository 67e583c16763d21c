"""OpenTelemetry spans of every snapshot and restore (``envckpt[otel]``), off by default.

Nothing is traced unless the host installs the extra and attaches the
observer; its spans then go wherever the host's tracer provider sends them::

    spans = SnapshotSpans()                          # opentelemetry.trace.get_tracer("envckpt")
    snapshotter = RolloutSnapshotter(root, ..., observers=[spans])

Spans are written from the record after the environment resumed, with the
record's own start and end times, so tracing costs the pause nothing:
``envckpt.snapshot`` (attributes: checkpoint id, outcome, step, bytes,
episodes, instances, the slowest instance), one child ``envckpt.snapshot.<phase>``
per phase that took time, laid end to end from the snapshot's start (the
resume child ends at the snapshot's end; ``take`` resumes while the trainer
writes, so that one may overlap), and ``envckpt.restore`` with a child per step.
A failed snapshot's span has an error status and its failure.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from envckpt.extras import require
from envckpt.telemetry.restore_record import RestoreOutcome, RestoreTelemetry
from envckpt.telemetry.snapshot_record import SnapshotTelemetry

TRACER_NAME = "envckpt"


class SnapshotSpans:
    """A telemetry observer that writes each record as OpenTelemetry spans."""

    def __init__(self, tracer: Any = None) -> None:
        self._trace = require("opentelemetry.trace", extra="otel")
        self.tracer = tracer if tracer is not None else self._trace.get_tracer(TRACER_NAME)

    def snapshot_ended(self, record: SnapshotTelemetry) -> None:
        attributes = {
            "envckpt.checkpoint_id": record.checkpoint_id,
            "envckpt.outcome": str(record.outcome),
            "envckpt.reason": record.reason,
            "envckpt.paused_seconds": record.paused_seconds,
            "envckpt.bytes": record.bytes,
            "envckpt.episodes_parked": record.episodes_parked,
            "envckpt.episodes_restarted": record.episodes_restarted,
            "envckpt.instances": record.instance_count,
            "envckpt.slowest_prepare_instance": record.prepare_latency.slowest,
        }
        if record.step is not None:
            attributes["envckpt.step"] = record.step
        phases = list(record.phases.items())
        resume = dict(phases).pop("resume")
        children = [(name, seconds) for name, seconds in phases if name != "resume"]
        self._write(
            "envckpt.snapshot",
            record.started_at,
            record.ended_at,
            attributes,
            children,
            last=("resume", resume),
            error=record.failure or record.resume_error,
        )

    def restore_ended(self, record: RestoreTelemetry) -> None:
        attributes = {
            "envckpt.outcome": str(record.outcome),
            "envckpt.snapshot": record.snapshot or "",
            "envckpt.continued": record.continued,
            "envckpt.restarted": record.restarted,
            "envckpt.refused": record.refused,
        }
        steps = list(record.phases.items())
        failure = record.failure if record.outcome is RestoreOutcome.FAILED else ""
        self._write(
            "envckpt.restore", record.started_at, record.ended_at, attributes, steps, error=failure
        )

    def _write(
        self,
        name: str,
        started: float,
        ended: float,
        attributes: dict[str, Any],
        children: Iterable[tuple[str, float]],
        *,
        last: tuple[str, float] | None = None,
        error: str = "",
    ) -> None:
        trace = self._trace
        parent = self.tracer.start_span(name, attributes=attributes, start_time=_ns(started))
        context = trace.set_span_in_context(parent)
        at = started
        for child, seconds in children:
            if seconds > 0:
                self._child(f"{name}.{child}", context, at, at + seconds)
                at += seconds
        if last is not None and last[1] > 0:
            self._child(f"{name}.{last[0]}", context, ended - last[1], ended)
        if error:
            parent.set_status(trace.Status(trace.StatusCode.ERROR, error))
        parent.end(end_time=_ns(ended))

    def _child(self, name: str, context: Any, started: float, ended: float) -> None:
        span = self.tracer.start_span(name, context=context, start_time=_ns(started))
        span.end(end_time=_ns(ended))


def _ns(seconds: float) -> int:
    return int(seconds * 1_000_000_000)
