"""Tests for envckpt.report.tables: the page's tables, every cell escaped."""

from __future__ import annotations

from pathlib import Path

from envckpt.report import tables
from envckpt.report.sources import Interruption, ReportData, read_root
from envckpt.telemetry.snapshot_record import SnapshotOutcome

from helpers.report_root import write_root
from helpers.telemetry_samples import T0, restore_record, snapshot_record


def test_figures_are_written_for_people() -> None:
    """Seconds, bytes and moments in the units a person reads."""
    assert [tables.seconds(v) for v in (12.34, 2.5, 0.25, 0.0004)] == [
        "12.3 s",
        "2.50 s",
        "250 ms",
        "0.40 ms",
    ]
    assert [tables.size(v) for v in (10, 2048, 3 << 20)] == ["10 B", "2.0 KiB", "3.0 MiB"]
    assert tables.when(T0 + 2.5, T0).startswith("2.5 s<br>")


def test_the_snapshot_table_has_a_row_per_snapshot_and_names_the_failure(tmp_path: Path) -> None:
    """Three numbered published rows, a failed row with its phase; steps shown when given."""
    html = tables.snapshots_table(read_root(write_root(tmp_path)))
    assert html.count("<tr>") == 1 + 4
    assert "#3" in html and "failed in pause" in html and "SnapshotNotReady" in html
    assert "<th>step</th>" in html and "pruned" in html


def test_the_restore_table_says_what_continued_at_which_turn(tmp_path: Path) -> None:
    """The continued rollout with its turn (from results.json), the restarted one, the fresh
    start, and a restore a kill cut short, in time order."""
    data = read_root(write_root(tmp_path))
    data = ReportData(
        **{
            **{name: getattr(data, name) for name in ReportData.__slots__},
            "interruptions": (Interruption(2, T0 + 9, "kill_in_restore", "restore.validated"),),
        }
    )
    html = tables.restores_table(data)
    assert "<code>task-1</code> as attempt 2 on <code>math/replica-0</code>, at turn 4" in html
    assert "<code>task-9</code>" in html and "fresh start" in html
    assert html.index("fresh start") < html.index("killed in run 2") < html.index("<code>task-1")
    assert "<code>restore.validated</code>" in html


def test_cells_are_escaped() -> None:
    """A failure text with markup is shown as text."""
    record = snapshot_record(outcome=SnapshotOutcome.FAILED)
    record = type(record)(**{**_fields(record), "failure": "<script>x</script>"})
    html = tables.snapshots_table(ReportData(root=Path("."), snapshots=(record,)))
    assert "<script>" not in html and "&lt;script&gt;" in html
    restore = restore_record()
    html = tables.verdict_table({"checks": [{"check": "<b>", "passed": False, "detail": "&"}]})
    assert "&lt;b&gt;" in html and "FAIL" in html and restore.continued == 2


def _fields(record: object) -> dict[str, object]:
    return {name: getattr(record, name) for name in record.__slots__}  # type: ignore[attr-defined]
