"""Tests for envckpt.logs: silent inside a host by default, stdlib or JSON when asked."""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import structlog
from structlog.testing import capture_logs

from envckpt import logs


def run(code: str) -> subprocess.CompletedProcess[str]:
    """``code`` in a fresh interpreter (structlog unconfigured), output captured."""
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )


def test_an_unconfigured_host_sees_nothing() -> None:
    """With neither structlog nor logging configured, envckpt prints nothing at all."""
    done = run(
        "from envckpt import logs\n"
        "log = logs.get_logger('envckpt.facade').bind(checkpoint_id='c1')\n"
        "log.info('transition', machine='m')\n"
        "log.warning('lease expired; resuming', server='s')\n"
        "log.error('boom')\n"
    )
    assert done.stdout == "" and done.stderr == ""


def test_a_host_that_configures_stdlib_logging_gets_the_events() -> None:
    """logging.basicConfig makes the events appear, with their fields, at the host's level."""
    done = run(
        "import logging\n"
        "logging.basicConfig(level=logging.INFO, format='%(name)s|%(message)s')\n"
        "from envckpt import logs\n"
        "log = logs.get_logger('envckpt.facade').bind(checkpoint_id='c1')\n"
        "log.debug('hidden')\n"
        "log.info('transition', machine='m')\n"
    )
    assert done.stdout == ""
    assert done.stderr.strip() == "envckpt.facade|transition checkpoint_id='c1' machine='m'"


def test_filtered_levels_are_not_rendered() -> None:
    """is_enabled_for tells a caller it may skip building the event."""
    log = logs.get_logger("envckpt.tests.filtered")
    if not structlog.is_configured():
        assert not log.is_enabled_for("debug")


def test_configure_writes_json_lines_with_a_timestamp(tmp_path: Path) -> None:
    """configure(json=True, path=...) is the one-line recipe: one JSON object per event."""
    path = tmp_path / "events.jsonl"
    run(
        "from envckpt import logs\n"
        f"logs.configure(json=True, level='info', path={str(path)!r})\n"
        "log = logs.get_logger('envckpt.transitions')\n"
        "log.debug('hidden')\n"
        "log.info('transition', machine='m', source='a', dest='b')\n"
    )
    [line] = path.read_text().splitlines()
    event = json.loads(line)
    assert event["event"] == "transition" and event["machine"] == "m"
    assert event["level"] == "info" and isinstance(event["ts"], float)


def test_configure_refuses_an_unknown_level() -> None:
    """A misspelt level is a clear ValueError, not a silent default."""
    try:
        logs.configure(level="loud")
    except ValueError as error:
        assert "loud" in str(error)
    else:
        raise AssertionError("configure accepted an unknown level")


def test_events_reach_structlog_when_it_is_configured() -> None:
    """Under capture_logs (structlog configured) the bound fields arrive as fields."""
    with capture_logs() as captured:
        logs.get_logger("envckpt.facade").bind(checkpoint_id="c1").warning("x", instance_id="i")
    assert captured == [
        {"event": "x", "checkpoint_id": "c1", "instance_id": "i", "log_level": "warning"}
    ]


def test_a_reconfigured_structlog_is_followed(tmp_path: Path) -> None:
    """Each event goes where structlog is configured at that moment, not where it first went."""
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    run(
        "from envckpt import logs\n"
        "log = logs.get_logger('envckpt.transitions')\n"
        f"logs.configure(json=True, level='info', path={str(first)!r})\n"
        "log.info('one')\n"
        f"logs.configure(json=True, level='info', path={str(second)!r})\n"
        "log.info('two')\n"
        f"logs.configure(json=True, level='warning', path={str(second)!r})\n"
        "log.info('filtered')\n"
    )
    assert [json.loads(line)["event"] for line in first.read_text().splitlines()] == ["one"]
    assert [json.loads(line)["event"] for line in second.read_text().splitlines()] == ["two"]


def test_is_enabled_for_asks_structlogs_filtering_level() -> None:
    """Under a filtering logger at WARNING, info is off and warning is on."""
    saved = structlog.get_config()
    try:
        structlog.configure(
            wrapper_class=structlog.make_filtering_bound_logger(30)  # WARNING
        )
        log = logs.get_logger("envckpt.tests.enabled")
        assert not log.is_enabled_for("info")
        assert log.is_enabled_for("warning")
        structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(20))
        assert log.is_enabled_for("info")
    finally:
        structlog.configure(**saved)


def test_json_lines_hold_what_orjson_alone_would_refuse(tmp_path: Path) -> None:
    """Integers beyond 64 bits, non-string keys and other objects are still written as JSON."""
    path = tmp_path / "events.jsonl"
    run(
        "import datetime\n"
        "from envckpt import logs\n"
        f"logs.configure(json=True, level='info', path={str(path)!r})\n"
        "log = logs.get_logger('envckpt.tests')\n"
        "log.info('big', n=2**70)\n"
        "log.info('keys', counts={1: 'a'}, when=datetime.date(2026, 1, 2))\n"
    )
    big, keys = (json.loads(line) for line in path.read_text().splitlines())
    assert big["n"] == 2**70
    assert keys["counts"] == {"1": "a"} and keys["when"] == "2026-01-02"


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
            ours = logs._stamp(None, method, {"event": "e", "a": 1, **extra})
            theirs = _structlog_stamps(method, {"event": "e", "a": 1, **extra}, ours["ts"])
            assert list(ours) == list(theirs)
            assert ours["level"] == theirs["level"]
            assert ours.get("exception") == theirs.get("exception")
            assert len(ours["timestamp"]) == len(theirs["timestamp"])
            assert ours["timestamp"][:16] == theirs["timestamp"][:16]  # to the minute
    assert logs._stamp(None, "info", {"ts": 5.0})["ts"] == 5.0  # a caller's ts is kept


def _datetime_iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat().replace("+00:00", "Z")


def test_iso_utc_matches_datetime_to_the_microsecond() -> None:
    """Random times, whole seconds (no fraction written) and rounding carries into the second."""
    rng = random.Random(7)
    values = [rng.uniform(0, 4e9) for _ in range(20_000)]
    values += [1796150000.0, 1796150000.9999995, 1796150000.9999999, 1796150059.9999996]
    values += [0.0, 1.0000005, 1.0000015, 86399.9999996]
    for value in values:
        assert logs._iso_utc(value) == _datetime_iso(value), value


def test_iso_utc_comparison_catches_a_fraction_that_does_not_carry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Tampered (rounding without the carry), the comparison above fails at a second's end."""

    def no_carry(seconds: float) -> str:
        fraction, whole = math.modf(seconds)
        text = datetime.fromtimestamp(whole, UTC).strftime("%Y-%m-%dT%H:%M:%S")
        return f"{text}.{round(fraction * 1e6):06d}Z"

    assert no_carry(1796150000.9999999) != _datetime_iso(1796150000.9999999)
    assert logs._iso_utc(1796150000.9999999) == _datetime_iso(1796150000.9999999)


def test_enabled_gives_the_emitter_or_none() -> None:
    """Under a filtering logger at WARNING, info has no emitter and warning's logs the event."""
    saved = structlog.get_config()
    try:
        structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(30))
        log = logs.get_logger("envckpt.tests.enabled")
        assert log.enabled("info") is None
        with capture_logs() as captured:
            emit = log.enabled("warning")
            assert emit is not None
            emit("event-a", x=1)
            bound = log.bind(server="s").enabled("warning")
            assert bound is not None
            bound("event-b")
        assert [(e["event"], e.get("x"), e.get("server")) for e in captured] == [
            ("event-a", 1, None),
            ("event-b", None, "s"),
        ]
    finally:
        structlog.configure(**saved)
