"""Tests for envckpt.logs: silent inside a host by default, stdlib or JSON when asked."""

from __future__ import annotations

import datetime
import io
import json
import logging
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
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


class _Records(logging.Handler):
    """The stdlib records a logger hands its handlers."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def unconfigured_stdlib(restored_structlog: None) -> Iterator[tuple[logging.Logger, _Records]]:
    """structlog unconfigured; the stdlib logger ``envckpt.tests.stdlib`` at INFO, recorded."""
    structlog.reset_defaults()
    stdlib = logging.getLogger("envckpt.tests.stdlib")
    handler, saved = _Records(), stdlib.level
    stdlib.addHandler(handler)
    stdlib.setLevel(logging.INFO)
    try:
        yield stdlib, handler
    finally:
        stdlib.removeHandler(handler)
        stdlib.setLevel(saved)


def test_an_unconfigured_host_sees_nothing() -> None:
    """With neither structlog nor logging configured, envckpt prints nothing at all."""
    done = run(
        "from envckpt import logs\n"
        "log = logs.get_logger('envckpt.facade').bind(checkpoint_id='c1')\n"
        "log.info('transition', machine='m')\n"
        "log.warning('lease expired; resuming', server='s')\n"
        "log.error('boom')\n"
        "import structlog; assert not structlog.is_configured()\n"
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


def test_unconfigured_events_carry_their_fields_in_the_stdlib_record(
    unconfigured_stdlib: tuple[logging.Logger, _Records],
) -> None:
    """The record's message reads ``event key=value``, its ``envckpt`` attribute holds the
    fields whole (a field named like a LogRecord attribute too), and an exception's
    traceback rides as the record's exc_info."""
    _, handler = unconfigured_stdlib
    log = logs.get_logger("envckpt.tests.stdlib").bind(server="policy")
    log.info("transition", machine="m", name="not the logger's")
    try:
        raise ValueError("boom")
    except ValueError:
        log.exception("failed", route="prepare")
    info, failed = handler.records
    assert info.getMessage() == "transition server='policy' machine='m' name=\"not the logger's\""
    assert (info.levelno, info.name) == (logging.INFO, "envckpt.tests.stdlib")
    assert info.envckpt == {  # type: ignore[attr-defined]
        "server": "policy",
        "machine": "m",
        "name": "not the logger's",
        "event": "transition",
    }
    assert failed.levelno == logging.ERROR and failed.exc_info is not None
    assert failed.exc_info[0] is ValueError
    assert failed.envckpt == {"server": "policy", "route": "prepare", "event": "failed"}  # type: ignore[attr-defined]


def test_unconfigured_levels_follow_the_stdlib_logger(
    unconfigured_stdlib: tuple[logging.Logger, _Records],
) -> None:
    """Below the stdlib logger's level nothing is recorded and nothing is enabled; the
    level is read at every call, as the host changes it."""
    stdlib, handler = unconfigured_stdlib
    log = logs.get_logger("envckpt.tests.stdlib")
    log.debug("hidden")
    assert handler.records == []
    assert not log.is_enabled_for("debug") and log.enabled("debug") is None
    assert log.is_enabled_for("info")
    stdlib.setLevel(logging.DEBUG)
    emit = log.enabled("debug")
    assert emit is not None
    emit("shown", a=1)
    assert [record.getMessage() for record in handler.records] == ["shown a=1"]


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
    assert event["level"] == "info"
    assert isinstance(event["timestamp"], float)
    assert abs(event["timestamp"] - time.time()) < 600


def test_configure_refuses_an_unknown_level(restored_structlog: None) -> None:
    """A misspelt level is a clear ValueError, not a silent default."""
    with pytest.raises(ValueError, match="loud"):
        logs.configure(level="loud")


def test_events_reach_structlog_when_it_is_configured() -> None:
    """Under capture_logs (structlog configured) the bound fields arrive as fields."""
    with capture_logs() as captured:
        logs.get_logger("envckpt.facade").bind(checkpoint_id="c1").warning("x", instance_id="i")
    assert captured == [
        {"event": "x", "checkpoint_id": "c1", "instance_id": "i", "log_level": "warning"}
    ]


def test_a_field_given_at_the_call_wins_over_a_bound_one() -> None:
    """A call's field replaces a bound field of the same name instead of failing."""
    with capture_logs() as captured:
        logs.get_logger("envckpt.tests").bind(server="a").info("x", server="b")
    assert captured == [{"event": "x", "server": "b", "log_level": "info"}]


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


def test_a_logger_is_resolved_again_for_each_changed_part(restored_structlog: None) -> None:
    """The structlog logger a name resolved to is kept while structlog's configuration holds,
    and made again when any part is replaced, even by an equal one."""
    structlog.configure(
        processors=[structlog.processors.JSONRenderer()],
        wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
        logger_factory=structlog.ReturnLoggerFactory(),
    )
    log = logs.get_logger("envckpt.tests.kept")
    first = log.structlog_logger()
    assert log.structlog_logger() is first
    assert logs.get_logger("envckpt.tests.kept").structlog_logger() is first
    assert log.bind(a=1).structlog_logger() is not first
    changes: list[dict[str, Any]] = [
        {"processors": [structlog.processors.JSONRenderer()]},
        {"logger_factory": structlog.ReturnLoggerFactory()},
        {"context_class": type("Context", (dict,), {})},
        {"wrapper_class": structlog.make_filtering_bound_logger(logging.DEBUG)},
    ]
    for change in changes:
        before = log.structlog_logger()
        structlog.configure(**change)
        assert log.structlog_logger() is not before, change
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    assert log.enabled("info") is None


def test_is_enabled_for_asks_structlogs_filtering_level(restored_structlog: None) -> None:
    """Under a filtering logger at WARNING, info is off and warning is on."""
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    log = logs.get_logger("envckpt.tests.enabled")
    assert not log.is_enabled_for("info")
    assert log.is_enabled_for("warning")
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.INFO))
    assert log.is_enabled_for("info")


def test_enabled_gives_the_emitter_or_none(restored_structlog: None) -> None:
    """Under a filtering logger at WARNING, info has no emitter and warning's logs the event,
    with the logger's bound fields."""
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
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


def test_other_wrapper_classes_get_their_own_method(restored_structlog: None) -> None:
    """A wrapper class that cannot say its level (structlog's generic BoundLogger) is
    called as it is: enabled, and the event logged, never mistaken for a level check."""
    structlog.configure(
        wrapper_class=structlog.BoundLogger, logger_factory=structlog.ReturnLoggerFactory()
    )
    with capture_logs() as captured:
        log = logs.get_logger("envckpt.tests.other")
        assert log.is_enabled_for("debug")
        emit = log.enabled("info")
        assert emit is not None
        emit("e", a=1)
    assert captured == [{"event": "e", "a": 1, "log_level": "info"}]


def test_a_stdlib_level_changed_by_the_host_is_followed(restored_structlog: None) -> None:
    """Under structlog's stdlib BoundLogger, enabled() follows the stdlib logger's level
    as the host changes it."""
    structlog.configure(
        processors=[structlog.processors.KeyValueRenderer()],
        wrapper_class=structlog.stdlib.BoundLogger,
        logger_factory=structlog.stdlib.LoggerFactory(),
    )
    stdlib = logging.getLogger("envckpt.tests.stdlib")
    saved = stdlib.level
    try:
        log = logs.get_logger("envckpt.tests.stdlib")
        stdlib.setLevel(logging.WARNING)
        assert log.enabled("info") is None
        stdlib.setLevel(logging.INFO)
        assert log.enabled("info") is not None
        stdlib.setLevel(logging.WARNING)
        assert log.enabled("info") is None
    finally:
        stdlib.setLevel(saved)


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


def test_the_serializer_falls_back_to_the_standard_library() -> None:
    """orjson_bytes writes orjson's bytes, and the standard library's where orjson refuses."""
    assert logs.orjson_bytes({"a": 1, 2: [None]}) == b'{"a":1,"2":[null]}'
    assert json.loads(logs.orjson_bytes({"n": 2**70})) == {"n": 2**70}
    assert logs.orjson_text({"d": datetime.date(2026, 1, 2)}, default=str) == '{"d":"2026-01-02"}'


def test_json_lines_to_a_binary_file_hold_what_text_lines_hold(restored_structlog: None) -> None:
    """A binary stream gets bytes with the same fields, in the same order, as a text stream,
    context variables and a traceback included."""
    text, binary = io.StringIO(), io.BytesIO()
    lines: list[dict[str, Any]] = []
    for stream in (text, binary):
        logs.configure(json=True, level="info", stream=stream)
        structlog.contextvars.bind_contextvars(request="r-1")
        try:
            log = logs.get_logger("envckpt.tests")
            log.info("transition", machine="m", n=2**70, k={1: 2})
            try:
                raise ValueError("boom")
            except ValueError:
                log.exception("failed")
        finally:
            structlog.contextvars.clear_contextvars()
        written = stream.getvalue()
        assert written.count("\n" if isinstance(written, str) else b"\n") == 2
        lines.extend(json.loads(line) for line in written.splitlines())
    assert isinstance(binary.getvalue(), bytes)
    assert [list(line) for line in lines[:2]] == [list(line) for line in lines[2:]]
    assert list(lines[2]) == ["machine", "n", "k", "event", "request", "level", "timestamp"]
    assert lines[2]["n"] == 2**70 and lines[2]["k"] == {"1": 2}
    assert "ValueError: boom" in lines[3]["exception"]


def _killed_after_logging(setup: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "import os, signal, structlog\n"
            "from envckpt import logs\n"
            f"{setup}\n"
            "logs.get_logger('envckpt.transitions').info('transition', machine='m')\n"
            "os.kill(os.getpid(), signal.SIGKILL)\n",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_line_logged_before_a_kill_is_in_the_file(tmp_path: Path) -> None:
    """configure(json=True, path=...): the line of an event logged just before a kill -9 is
    in the file; tampered, a logger that writes without flushing loses it."""
    path = tmp_path / "events.jsonl"
    done = _killed_after_logging(f"logs.configure(json=True, level='info', path={str(path)!r})")
    assert done.returncode == -signal.SIGKILL
    [line] = path.read_text().splitlines()
    assert json.loads(line)["machine"] == "m"
    lost = tmp_path / "lost.jsonl"
    done = _killed_after_logging(
        f"sink = open({str(lost)!r}, 'ab')\n"
        "logs.configure(json=True, level='info', stream=sink)\n"
        "structlog.BytesLogger.info = lambda self, message: sink.write(message + b'\\n')"
    )
    assert done.returncode == -signal.SIGKILL and lost.read_bytes() == b""


def test_console_lines_to_a_path_are_text(tmp_path: Path) -> None:
    """configure(path=...) without json writes console lines, one per event."""
    path = tmp_path / "events.log"
    run(
        "from envckpt import logs\n"
        f"logs.configure(level='info', path={str(path)!r})\n"
        "logs.get_logger('envckpt.tests').info('transition', machine='m')\n"
    )
    [line] = path.read_text().splitlines()
    assert "transition" in line and "machine=m" in line and "[info" in line
