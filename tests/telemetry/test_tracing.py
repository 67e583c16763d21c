"""Tests for envckpt.telemetry.tracing: a snapshot's record as OpenTelemetry spans."""

from __future__ import annotations

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from envckpt.telemetry.snapshot_record import SnapshotOutcome
from envckpt.telemetry.tracing import SnapshotSpans

from helpers.telemetry_samples import T0, restore_record, snapshot_record


def traced() -> tuple[SnapshotSpans, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return SnapshotSpans(provider.get_tracer("test")), exporter


def test_a_snapshot_is_one_span_with_a_child_per_phase_at_its_own_times() -> None:
    """Seven phases, all under the snapshot's span; the span starts and ends with the pause."""
    spans, exporter = traced()
    spans.snapshot_ended(snapshot_record(at=T0, paused=0.25))
    finished = {span.name: span for span in exporter.get_finished_spans()}
    parent = finished["envckpt.snapshot"]
    assert (parent.start_time, parent.end_time) == (int(T0 * 1e9), int((T0 + 0.25) * 1e9))
    phases = sorted(name for name in finished if name.startswith("envckpt.snapshot."))
    assert phases == [
        f"envckpt.snapshot.{p}"
        for p in sorted(("retire", "prepare", "commit", "cut_wait", "cut", "publish", "resume"))
    ]
    for name in phases:
        assert finished[name].parent is not None
        assert finished[name].parent.span_id == parent.context.span_id
    prepare = finished["envckpt.snapshot.prepare"]
    assert prepare.start_time == int((T0 + 0.01) * 1e9)  # after retire
    assert finished["envckpt.snapshot.resume"].end_time == parent.end_time
    assert parent.attributes is not None
    assert parent.attributes["envckpt.slowest_prepare_instance"] == "math/replica-1"


def test_a_failed_snapshot_s_span_carries_an_error_status() -> None:
    """The failure is the span's status description."""
    spans, exporter = traced()
    spans.snapshot_ended(snapshot_record(outcome=SnapshotOutcome.FAILED))
    parent = next(s for s in exporter.get_finished_spans() if s.name == "envckpt.snapshot")
    assert parent.status.status_code is StatusCode.ERROR
    assert "SnapshotNotReady" in (parent.status.description or "")


def test_a_restore_is_a_span_with_its_steps() -> None:
    """check, environment, ledger and resume under envckpt.restore."""
    spans, exporter = traced()
    spans.restore_ended(restore_record())
    names = sorted(span.name for span in exporter.get_finished_spans())
    assert names == [
        "envckpt.restore",
        "envckpt.restore.check",
        "envckpt.restore.environment",
        "envckpt.restore.ledger",
        "envckpt.restore.resume",
    ]
