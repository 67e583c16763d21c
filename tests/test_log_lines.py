"""Tests for envckpt.log_lines: the JSON line of an event, its stamp, and its one write."""

from __future__ import annotations

import io
import json
import math
import random
from datetime import UTC, datetime
from typing import Any

import pytest
import structlog

from envckpt import log_lines, logs


def _json_recipe(stream: Any) -> Any:
    """configure(json=True) to ``stream``; the info emitter of a fresh logger."""
    logs.configure(json=True, level="info", stream=stream)
    return logs.get_logger("envckpt.tests.lines").enabled("info")


def _structlog_stamps(method: str, event: dict[str, Any], ts: float) -> dict[str, Any]:
    """What the recipe's processors wrote before: structlog's add_log_level, TimeStamper
    (ISO, UTC), ``ts``, then format_exc_info."""
    event = structlog.processors.add_log_level(None, method, event)
    event = structlog.processors.TimeStamper(fmt="iso", utc=True)(None, method, event)
    event.setdefault("ts", ts)
    return structlog.processors.format_exc_info(None, method, event)


def test_the_stamp_writes_the_fields_structlogs_processors_write() -> None:
    """One step, the same keys in the same order, level names, traceback and time format."""
    try:
        raise ValueError("boom")
    except ValueError:
        for method, extra in (("info", {}), ("warn", {}), ("exception", {"exc_info": True})):
            ours = log_lines.stamp(None, method, {"event": "e", "a": 1, **extra})
            theirs = _structlog_stamps(method, {"event": "e", "a": 1, **extra}, ours["ts"])
            assert list(ours) == list(theirs)
            assert ours["level"] == theirs["level"]
            assert ours.get("exception") == theirs.get("exception")
            assert len(ours["timestamp"]) == len(theirs["timestamp"])
            assert ours["timestamp"][:16] == theirs["timestamp"][:16]  # to the minute
    assert log_lines.stamp(None, "info", {"ts": 5.0})["ts"] == 5.0  # a caller's ts is kept


def _datetime_iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat().replace("+00:00", "Z")


def test_iso_utc_matches_datetime_to_the_microsecond() -> None:
    """Random times, whole seconds (no fraction written) and rounding carries into the second."""
    rng = random.Random(7)
    values = [rng.uniform(0, 4e9) for _ in range(20_000)]
    values += [1796150000.0, 1796150000.9999995, 1796150000.9999999, 1796150059.9999996]
    values += [0.0, 1.0000005, 1.0000015, 86399.9999996]
    for value in values:
        assert log_lines.iso_utc(value) == _datetime_iso(value), value


def test_iso_utc_comparison_catches_a_fraction_that_does_not_carry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Tampered (rounding without the carry), the comparison above fails at a second's end."""

    def no_carry(seconds: float) -> str:
        fraction, whole = math.modf(seconds)
        text = datetime.fromtimestamp(whole, UTC).strftime("%Y-%m-%dT%H:%M:%S")
        return f"{text}.{round(fraction * 1e6):06d}Z"

    assert no_carry(1796150000.9999999) != _datetime_iso(1796150000.9999999)
    assert log_lines.iso_utc(1796150000.9999999) == _datetime_iso(1796150000.9999999)


def test_the_json_emitter_skips_no_bound_context_variable(
    restored_structlog: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Context variables are merged when structlog has made any, and also where structlog
    no longer says which it made; only a structlog that made none is skipped."""
    out = io.BytesIO()
    structlog.contextvars.bind_contextvars(request="r-2")
    # The dict kept is the one structlog fills as it makes variables, not a copy.
    assert log_lines.CONTEXT_VARS is not None and "structlog_request" in log_lines.CONTEXT_VARS
    try:
        for known in (log_lines.CONTEXT_VARS, None):
            monkeypatch.setattr(log_lines, "CONTEXT_VARS", known)
            emit = _json_recipe(out)
            assert emit is not None
            emit("e")
    finally:
        structlog.contextvars.clear_contextvars()
    assert [json.loads(line)["request"] for line in out.getvalue().splitlines()] == ["r-2"] * 2


def test_the_json_emitter_writes_a_cut_line_whole_and_flushes(restored_structlog: None) -> None:
    """Tampered: a raw file taking 7 bytes a call gets the whole line; a buffered file
    has it at the raw file when the call returns."""
    trickle = _Trickle(7)
    emit = _json_recipe(trickle)
    assert emit is not None
    emit("cut", field="x" * 40)
    assert json.loads(bytes(trickle.data))["field"] == "x" * 40
    raw = _Trickle(1 << 20)
    emit = _json_recipe(io.BufferedWriter(raw, buffer_size=1 << 16))
    assert emit is not None
    emit("buffered")
    assert json.loads(bytes(raw.data))["event"] == "buffered"


class _Trickle(io.RawIOBase):
    """A raw file that takes at most ``size`` bytes a call, as a signal can cut a write."""

    def __init__(self, size: int) -> None:
        self.size, self.data = size, bytearray()

    def writable(self) -> bool:
        return True

    def write(self, chunk: Any) -> int:
        taken = bytes(chunk[: self.size])
        self.data += taken
        return len(taken)


def test_a_line_cut_short_by_the_os_is_written_whole() -> None:
    """Tampered: a raw file taking 5 bytes a call still ends up with every byte of the line."""
    raw = _Trickle(5)
    writer = log_lines.LineWriter(raw)
    writer.info(b'{"event":"one"}\n')
    writer.info(b'{"event":"two"}\n')
    assert bytes(raw.data) == b'{"event":"one"}\n{"event":"two"}\n'
    assert raw.write(b"0123456789") == 5  # the tampered file does cut


def test_a_buffered_binary_stream_is_flushed_after_every_line() -> None:
    """Through a BufferedWriter each line reaches the raw file before the call returns."""
    raw = _Trickle(1 << 20)
    buffered = io.BufferedWriter(raw, buffer_size=1 << 16)
    log_lines.LineWriter(buffered).info(b'{"event":"one"}\n')
    assert bytes(raw.data) == b'{"event":"one"}\n'
    buffered.write(b"more")  # without the flush it would wait in the buffer
    assert bytes(raw.data) == b'{"event":"one"}\n'
