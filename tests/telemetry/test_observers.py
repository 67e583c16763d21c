"""Tests for envckpt.telemetry.observers: the log first, then every observer, never a failure."""

from __future__ import annotations

from pathlib import Path

import pytest
from structlog.testing import capture_logs

from envckpt.telemetry.log import read_telemetry
from envckpt.telemetry.observers import TelemetryRecorder
from envckpt.telemetry.restore_record import RestoreTelemetry
from envckpt.telemetry.snapshot_record import SnapshotTelemetry

from helpers.telemetry_samples import restore_record, snapshot_record


class Collector:
    def __init__(self) -> None:
        self.seen: list[object] = []

    def snapshot_ended(self, record: SnapshotTelemetry) -> None:
        self.seen.append(record)

    def restore_ended(self, record: RestoreTelemetry) -> None:
        self.seen.append(record)


class Broken(Collector):
    def snapshot_ended(self, record: SnapshotTelemetry) -> None:
        raise RuntimeError("exporter down")


def test_every_observer_hears_each_record_after_the_log(tmp_path: Path) -> None:
    """A broken observer is logged; the next one and the log still get the record."""
    good = Collector()
    recorder = TelemetryRecorder(tmp_path, [Broken(), good])
    snapshot, restore = snapshot_record(), restore_record()
    with capture_logs() as logs:
        recorder.snapshot_ended(snapshot)
        recorder.restore_ended(restore)
    assert good.seen == [snapshot, restore]
    assert (recorder.last_snapshot, recorder.last_restore) == (snapshot, restore)
    assert read_telemetry(tmp_path).snapshots == (snapshot,)
    assert [entry["event"] for entry in logs] == [
        "a telemetry observer failed; the record was still logged"
    ]
    assert logs[0]["error"] == "RuntimeError: exporter down"


def test_something_that_is_not_an_observer_is_refused_at_once(tmp_path: Path) -> None:
    """A callable handed as an observer is a TypeError when the recorder is built."""
    with pytest.raises(TypeError, match="no telemetry observer"):
        TelemetryRecorder(tmp_path, [print])  # type: ignore[list-item]
