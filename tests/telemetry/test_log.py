"""Tests for envckpt.telemetry.log: the root's append-only telemetry log."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from envckpt.telemetry.log import TELEMETRY_NAME, TelemetryLog, parse_record, read_telemetry
from envckpt.telemetry.snapshot_record import SnapshotOutcome

from helpers.telemetry_samples import restore_record, snapshot_record


def test_records_read_back_in_order_by_kind(tmp_path: Path) -> None:
    """Two snapshots (one failed) and a restore come back as written."""
    log = TelemetryLog(tmp_path)
    written = [
        snapshot_record("rollouts-aaaaaaaaaaaa"),
        restore_record(),
        snapshot_record("rollouts-bbbbbbbbbbbb", outcome=SnapshotOutcome.FAILED),
    ]
    assert all(log.append(record) for record in written)
    read = read_telemetry(tmp_path)
    assert read.snapshots == (written[0], written[2])
    assert read.restores == (written[1],)
    assert [r.checkpoint_id for r in read.published] == ["rollouts-aaaaaaaaaaaa"]
    assert read.problems == ()
    assert (tmp_path / TELEMETRY_NAME).read_bytes().count(b"\n") == 3


def test_a_damaged_line_is_named_and_the_rest_still_reads(tmp_path: Path) -> None:
    """A torn line and a line of another kind are problems with their line numbers."""
    log = TelemetryLog(tmp_path)
    log.append(snapshot_record("rollouts-aaaaaaaaaaaa"))
    with (tmp_path / TELEMETRY_NAME).open("a") as stream:
        stream.write('{"kind": "snapshot", "checkpoint_id": "rollouts-bbbb\n')
        stream.write('{"kind": "weather"}\n')
    log.append(snapshot_record("rollouts-cccccccccccc"))
    read = read_telemetry(tmp_path)
    assert [r.checkpoint_id for r in read.snapshots] == [
        "rollouts-aaaaaaaaaaaa",
        "rollouts-cccccccccccc",
    ]
    assert len(read.problems) == 2
    assert read.problems[0].startswith(f"{TELEMETRY_NAME}:2: not JSON")
    assert read.problems[1] == f"{TELEMETRY_NAME}:3: unknown record kind 'weather'"


def test_no_log_reads_as_nothing(tmp_path: Path) -> None:
    """A root without a telemetry log has no records and no problems."""
    read = read_telemetry(tmp_path)
    assert (read.snapshots, read.restores, read.problems) == ((), (), ())


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_an_unwritable_root_warns_and_never_raises(tmp_path: Path) -> None:
    """Telemetry never fails a snapshot: a refused append is a warning and False."""
    tmp_path.chmod(0o500)
    try:
        with capture_logs() as logs:
            assert TelemetryLog(tmp_path).append(snapshot_record()) is False
    finally:
        tmp_path.chmod(0o700)
    assert logs[0]["event"] == "telemetry record not written"


def test_a_log_that_is_a_directory_warns_and_never_raises(tmp_path: Path) -> None:
    """Whoever runs it (root included), an unopenable log is a warning and False."""
    (tmp_path / TELEMETRY_NAME).mkdir()
    with capture_logs() as logs:
        assert TelemetryLog(tmp_path).append(snapshot_record()) is False
    assert logs[0]["event"] == "telemetry record not written"


def test_a_line_that_is_not_an_object_is_refused() -> None:
    """parse_record takes a JSON object only."""
    with pytest.raises(TypeError):
        parse_record([1, 2])
