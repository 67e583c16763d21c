"""The transition-coverage records, report and chart, each seen failing on tampered input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from envckpt.cli import main as cli_main
from envckpt.machines.tables import PARTICIPANT_PHASES
from envckpt.statecharts.charts import TIMES
from envckpt.statecharts.overlay import coverage, load_coverage

from transition_coverage.__main__ import main as report_main
from transition_coverage.plugin import (
    RECORDER,
    Recorder,
    _wrap_fire,
    _wrap_handle,
    coverage_line,
)
from transition_coverage.rows import HTTP, IN_PROCESS, all_rows, coverage_report


def _line(source: str, trigger: str, dest: str, via: str = IN_PROCESS, count: int = 1) -> str:
    return coverage_line("participant_phases", source, trigger, dest, via, count)


def test_counts_and_transports_are_read_back(tmp_path: Path) -> None:
    """A coverage file's counts and transports come back; a plain log line counts once."""
    log = tmp_path / "cov.jsonl"
    plain = {"event": "transition", "machine": "participant_phases", "instance_id": "a"}
    plain |= {"source": "idle", "trigger": "prepare", "dest": "preparing"}
    log.write_text(
        "\n".join([_line("idle", "prepare", "preparing", HTTP, 3), json.dumps(plain)]) + "\n"
    )
    entries = load_coverage(log)
    assert [(e.via, e.count) for e in entries] == [(HTTP, 3), ("recorded", 1)]
    report = coverage_report(entries)
    row = ("participant_phases", "idle", "prepare")
    assert report.counts[row] == {HTTP: 3, "recorded": 1}
    assert row in report.over_http() and row not in report.never
    assert len(report.never) == len(all_rows()) - 1
    assert report.summary() == f"transition coverage: 1/{len(all_rows())} rows"


def test_a_bad_count_or_a_foreign_transition_is_reported(tmp_path: Path) -> None:
    """A count that is not a positive integer is refused; a row no table has is listed apart."""
    bad = tmp_path / "bad.jsonl"
    bad.write_text(_line("idle", "prepare", "preparing", count=0) + "\n")
    with pytest.raises(ValueError, match="count"):
        load_coverage(bad)
    odd = tmp_path / "odd.jsonl"
    odd.write_text(_line("idle", "commit", "committed") + "\n")
    report = coverage_report(load_coverage(odd))
    assert report.foreign == {("participant_phases", "idle", "commit", "committed"): 1}
    assert "not in any table" in report.text()
    assert report_main([str(odd)]) == 1


def test_the_chart_splits_counts_by_transport_and_dots_the_rest() -> None:
    """Fired edges carry their counts per transport; an untouched table is all dotted."""
    entries = load_coverage_lines([_line("idle", "prepare", "preparing", HTTP, 2)])
    chart = coverage(PARTICIPANT_PHASES, entries)
    assert f'"prepare {TIMES}2 (http 2)"' in chart
    assert "1/13 rows exercised" in chart
    empty = coverage(PARTICIPANT_PHASES, [])
    assert "==>" not in empty.split("start -->")[1].replace("start --> s_idle", "")
    assert "0/13 rows exercised" in empty


def load_coverage_lines(lines: list[str]) -> list:  # type: ignore[type-arg]
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as handle:
        handle.write("\n".join(lines) + "\n")
    path = Path(handle.name)
    try:
        return load_coverage(path)
    finally:
        path.unlink()


def test_the_cli_draws_every_machine_or_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``envckpt statecharts --coverage LOG`` prints four charts, or one with --machine."""
    log = tmp_path / "cov.jsonl"
    log.write_text(_line("idle", "prepare", "preparing", HTTP, 2) + "\n")
    assert cli_main(["statecharts", "--coverage", str(log)]) == 0
    out = capsys.readouterr().out
    assert out.count("flowchart TB") == 4 and f"prepare {TIMES}2 (http 2)" in out
    assert cli_main(["statecharts", "--coverage", str(log), "--machine", "snapshot_session"]) == 0
    assert capsys.readouterr().out.count("flowchart TB") == 1
    missing = tmp_path / "missing.jsonl"
    assert cli_main(["statecharts", "--coverage", str(missing)]) == 2
    with pytest.raises(SystemExit):
        cli_main(["statecharts", "--coverage", str(log), "--overlay", str(log)])


async def test_a_control_call_served_over_http_marks_the_test() -> None:
    """Only edge.handle called from envckpt.http code counts a test as real HTTP."""

    async def handle() -> str:
        return "reply"

    wrapped = _wrap_handle(handle)
    saved = RECORDER.crossed_http
    try:
        RECORDER.crossed_http = False
        assert await wrapped() == "reply"
        assert RECORDER.crossed_http is False
        namespace = {"__name__": "envckpt.http.routes", "wrapped": wrapped}
        exec("async def endpoint():\n    return await wrapped()", namespace)
        assert await namespace["endpoint"]() == "reply"  # type: ignore[operator]
        assert RECORDER.crossed_http is True
    finally:
        RECORDER.crossed_http = saved


def test_a_test_s_transitions_count_by_its_transport() -> None:
    """Transitions of a test that crossed HTTP count as http; machinery tests not at all."""
    recorder = Recorder()
    recorder.fired("participant_phases", "idle", "prepare", "preparing")
    recorder.crossed_http = True
    recorder.end_test("tests/http/test_routes.py::test_x")
    recorder.fired("participant_phases", "idle", "prepare", "preparing")
    recorder.end_test("tests/gym/test_adapter.py::test_y")
    recorder.fired("participant_phases", "idle", "restore", "restored")
    recorder.end_test("tests/machines/test_binding.py::test_z")
    assert [(e.via, e.count) for e in recorder.entries()] == [(HTTP, 1), (IN_PROCESS, 1)]
    assert recorder.http_tests == 1


def test_only_the_engine_s_own_tables_are_recorded() -> None:
    """A fire on the real table is recorded; one on a test's mutated copy of it is not."""
    import dataclasses

    from envckpt.machines.binding import BoundMachine

    calls: list[str] = []

    def original(self: object, model: object, trigger: str, **_: object) -> str:
        model.state = PARTICIPANT_PHASES.destination(model.state, trigger)  # type: ignore[attr-defined]
        calls.append(trigger)
        return trigger

    fire = _wrap_fire(original)
    real = BoundMachine(PARTICIPANT_PHASES)
    copy = BoundMachine(dataclasses.replace(PARTICIPANT_PHASES))
    saved = RECORDER.current.copy()
    try:
        RECORDER.current.clear()
        assert fire(real, real.new("a"), "prepare") == "prepare"
        assert fire(copy, copy.new("b"), "prepare") == "prepare"
        assert calls == ["prepare", "prepare"]
        assert dict(RECORDER.current) == {("participant_phases", "idle", "prepare", "preparing"): 1}
    finally:
        RECORDER.current.clear()
        RECORDER.current.update(saved)
