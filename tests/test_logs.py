"""Tests for envckpt.logs: silent inside a host by default, stdlib or JSON when asked."""

from __future__ import annotations

import io
import json
import signal
import subprocess
import sys
from collections import OrderedDict
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import structlog
from hypothesis import given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from envckpt import log_lines, logs


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


def test_enabled_keeps_its_emitter_until_structlog_is_reconfigured(
    restored_structlog: None,
) -> None:
    """The same emitter while nothing changes; a new one for each changed part."""
    structlog.configure(
        processors=[structlog.processors.JSONRenderer()],
        wrapper_class=structlog.make_filtering_bound_logger(20),
        logger_factory=structlog.ReturnLoggerFactory(),
    )
    log = logs.get_logger("envckpt.tests.kept")
    first = log.enabled("info")
    assert first is not None and log.enabled("info") is first
    changes: list[dict[str, Any]] = [
        {"processors": [structlog.processors.JSONRenderer()]},
        {"logger_factory": structlog.ReturnLoggerFactory()},
        {"context_class": type("Context", (dict,), {})},
        {"wrapper_class": structlog.make_filtering_bound_logger(10)},
    ]
    for change in changes:
        before = log.enabled("info")
        structlog.configure(**change)
        assert log.enabled("info") is not before, change
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(30))
    assert log.enabled("info") is None


def _config(**parts: Any) -> SimpleNamespace:
    base = {
        "default_processors": [],
        "default_wrapper_class": object,
        "logger_factory": print,
        "default_context_class": dict,
    }
    return SimpleNamespace(**{**base, **parts})


def test_a_resolved_logger_holds_only_under_the_same_parts() -> None:
    """Tampered: each part replaced (even by an equal list) makes the logger resolve again."""
    config = _config()
    resolved = logs._Resolved(config, logger=None)
    assert resolved.holds(config)
    config.default_processors.append(print)  # capture_logs edits the list in place
    assert resolved.holds(config)
    for part, value in (
        ("default_processors", list(config.default_processors)),
        ("default_wrapper_class", int),
        ("logger_factory", repr),
        ("default_context_class", OrderedDict),
    ):
        assert not resolved.holds(SimpleNamespace(**{**vars(config), part: value})), part


def test_the_shorter_emitter_gives_the_processors_what_the_method_does(
    restored_structlog: None,
) -> None:
    """A filtering logger's emitter: the same event dict, bound fields, method name and
    output as ``logger.info``; a dropped event goes nowhere."""
    seen: list[tuple[str, dict[str, Any]]] = []

    def record(logger: Any, method: str, event: Any) -> Any:
        seen.append((method, dict(event)))
        if event.get("drop"):
            raise structlog.DropEvent
        return event

    structlog.configure(
        processors=[record, structlog.processors.KeyValueRenderer(sort_keys=True)],
        wrapper_class=structlog.make_filtering_bound_logger(20),
        logger_factory=structlog.ReturnLoggerFactory(),
        context_class=dict,
    )
    log = logs.get_logger("envckpt.tests.short")
    emit = log.enabled("warning")
    assert emit is not None and emit.__qualname__ == "_processing.<locals>.emit"
    emit("e", a=1, b="x")
    log._structlog().logger.warning("e", a=1, b="x")
    assert seen[0] == seen[1] == ("warning", {"a": 1, "b": "x", "event": "e"})
    seen.clear()
    assert emit("e", drop=True) is None
    assert seen == [("warning", {"drop": True, "event": "e"})]


def _json_recipe(stream: Any, level: str = "info") -> Any:
    """configure(json=True) to ``stream``; the info emitter of a fresh logger."""
    logs.configure(json=True, level=level, stream=stream)
    return logs.get_logger("envckpt.tests.lines").enabled("info")


_EVENTS: list[tuple[str, dict[str, Any]]] = [
    ("transition", {"machine": "m", "source": "a", "dest": "b", "elapsed": 0.25}),
    ("big", {"n": 2**70, "keys": {1: "a"}, "when": datetime(2026, 1, 2, tzinfo=UTC)}),
    ("mine", {"ts": 5.0, "level": "kept?", "event_note": None}),
]


def _keywords(log: logs.EnvckptLogger) -> Any:
    emit = log.enabled("info")
    assert emit is not None and emit.__qualname__ == "_json_lines.<locals>.emit"
    return lambda event, fields: emit(event, **fields)


def _one_dict(log: logs.EnvckptLogger) -> Any:
    record = log.enabled_fields("info")
    assert record is not None and record.__qualname__ == "json_records.<locals>.record"
    return lambda event, fields: record(event, dict(fields))


@pytest.mark.parametrize("entry", [_keywords, _one_dict], ids=["keywords", "one-dict"])
def test_the_json_emitter_writes_the_bytes_the_processors_write(
    restored_structlog: None, monkeypatch: pytest.MonkeyPatch, entry: Any
) -> None:
    """configure(json=True) to a binary file: its own emitter, called with keyword
    arguments (enabled) or one dict (enabled_fields), and per event the same line, byte
    for byte, as structlog's method through the configured processors (context
    variables bound and not, a traceback, keys and numbers orjson refuses)."""
    monkeypatch.setattr(log_lines.time, "time", lambda: 1796150000.25)
    ours, theirs = io.BytesIO(), io.BytesIO()
    _json_recipe(ours)
    emit = entry(logs.get_logger("envckpt.tests.lines"))
    _json_recipe(theirs)
    method = logs.get_logger("envckpt.tests.lines")._structlog().logger.info
    try:
        raise ValueError("boom")
    except ValueError:
        events = [*_EVENTS, ("failed", {"exc_info": True})]
        for bound in ({}, {"request": "r-1"}):
            structlog.contextvars.bind_contextvars(**bound)
            try:
                for event, fields in events:
                    emit(event, fields)
                    method(event, **fields)
            finally:
                structlog.contextvars.clear_contextvars()
    lines = ours.getvalue().splitlines(keepends=True)
    assert lines == theirs.getvalue().splitlines(keepends=True) and len(lines) == 8
    assert [json.loads(line).get("request") for line in lines[::4]] == [None, "r-1"]
    assert "ValueError: boom" in json.loads(lines[3])["exception"]


_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats()
    | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.text(max_size=5) | st.integers(), inner, max_size=3)
    ),
    max_leaves=8,
)


@settings(max_examples=200, deadline=None)
@given(
    fields=st.dictionaries(
        st.text(max_size=12).filter(lambda key: key not in ("event", "exc_info", "exception")),
        _VALUES,
        max_size=6,
    ),
    event=st.text(max_size=20),
)
def test_any_event_is_the_same_line_through_either_emitter(
    fields: dict[str, Any], event: str
) -> None:
    """Whatever the fields (numbers orjson refuses, NaN, non-string keys, a caller's own
    ``level`` or ``ts``), the JSON emitter writes the processors' line, byte for byte,
    called with keyword arguments or with one dict."""
    saved = structlog.get_config()
    ours, theirs = io.BytesIO(), io.BytesIO()
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(log_lines.time, "time", lambda: 1796150000.5)
            emit = _json_recipe(ours)
            assert emit is not None and emit.__qualname__ == "_json_lines.<locals>.emit"
            emit(event, **fields)
            record = logs.get_logger("envckpt.tests.lines").enabled_fields("info")
            assert record is not None and record.__qualname__ == "json_records.<locals>.record"
            record(event, dict(fields))
            _json_recipe(theirs)
            method = logs.get_logger("envckpt.tests.lines")._structlog().logger.info
            method(event, **fields)
            method(event, **fields)
    finally:
        structlog.configure(**saved)
    assert ours.getvalue() == theirs.getvalue() and ours.getvalue().count(b"\n") == 2


def test_the_json_emitter_follows_a_capture_of_its_processors(restored_structlog: None) -> None:
    """capture_logs swaps the configured list's contents in place: an emitter taken before
    sends its events to the capture, and to the file again afterwards."""
    out = io.BytesIO()
    emit = _json_recipe(out)
    assert emit is not None
    with capture_logs() as captured:
        emit("captured", a=1)
    emit("written", a=2)
    assert captured == [{"a": 1, "event": "captured", "log_level": "info"}]
    assert [json.loads(line)["event"] for line in out.getvalue().splitlines()] == ["written"]


def test_other_configurations_get_the_general_emitter(restored_structlog: None) -> None:
    """Text streams, another processor list, a non-empty context: the processors path."""
    emit = _json_recipe(io.StringIO())
    assert emit is not None and emit.__qualname__ == "_processing.<locals>.emit"
    logs.configure(json=True, level="info", stream=io.BytesIO())
    structlog.configure(processors=[*structlog.get_config()["processors"], print])
    emit = logs.get_logger("envckpt.tests.lines").enabled("info")
    assert emit is not None and emit.__qualname__ == "_processing.<locals>.emit"
    logs.configure(json=True, level="info", stream=io.BytesIO())
    structlog.configure(context_class=lambda values: {**values, "from": "context"})
    emit = logs.get_logger("envckpt.tests.lines").enabled("info")
    assert emit is not None and emit.__qualname__ == "_processing.<locals>.emit"


def test_other_wrapper_classes_get_their_own_method(restored_structlog: None) -> None:
    """A wrapper class that is not structlog's filtering one is called as it is."""
    structlog.configure(
        wrapper_class=structlog.BoundLogger, logger_factory=structlog.ReturnLoggerFactory()
    )
    with capture_logs() as captured:
        emit = logs.get_logger("envckpt.tests.other").enabled("info")
        assert emit is not None and "_processing" not in getattr(emit, "__qualname__", "")
        emit("e", a=1)
    assert captured == [{"event": "e", "a": 1, "log_level": "info"}]


def test_json_lines_to_a_binary_file_hold_what_text_lines_hold(restored_structlog: None) -> None:
    """A binary stream gets bytes with the same fields, in the same order, as a text stream."""
    text, binary = io.StringIO(), io.BytesIO()
    lines: list[dict[str, Any]] = []
    for stream, read in ((text, text.getvalue), (binary, binary.getvalue)):
        logs.configure(json=True, level="info", stream=stream)
        structlog.contextvars.bind_contextvars(request="r-1")
        try:
            logs.get_logger("envckpt.tests").info("transition", machine="m", n=2**70, k={1: 2})
        finally:
            structlog.contextvars.clear_contextvars()
        [line] = (read() if isinstance(read(), str) else read().decode()).splitlines()
        lines.append(json.loads(line))
    assert isinstance(binary.getvalue(), bytes) and binary.getvalue().endswith(b"}\n")
    assert list(lines[0]) == list(lines[1])
    assert list(lines[1]) == ["machine", "n", "k", "event", "request", "level", "timestamp", "ts"]
    assert lines[1]["n"] == 2**70 and lines[1]["k"] == {"1": 2}


def _killed_after_logging(setup: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "import os, signal\n"
            "from envckpt import logs, log_lines\n"
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
    in the file; tampered, a buffered file loses it."""
    path = tmp_path / "events.jsonl"
    done = _killed_after_logging(f"logs.configure(json=True, level='info', path={str(path)!r})")
    assert done.returncode == -signal.SIGKILL
    [line] = path.read_text().splitlines()
    assert json.loads(line)["machine"] == "m"
    lost = tmp_path / "lost.jsonl"
    done = _killed_after_logging(
        f"logs.configure(json=True, level='info', stream=open({str(lost)!r}, 'ab'))\n"
        "log_lines.LineWriter.info = lambda self, line: self._write(line)"
    )
    assert done.returncode == -signal.SIGKILL and lost.read_bytes() == b""


def test_console_lines_to_a_path_are_text(tmp_path: Path) -> None:
    """configure(path=...) without json still writes console lines, one per event."""
    path = tmp_path / "events.log"
    run(
        "from envckpt import logs\n"
        f"logs.configure(level='info', path={str(path)!r})\n"
        "logs.get_logger('envckpt.tests').info('transition', machine='m')\n"
    )
    [line] = path.read_text().splitlines()
    assert "transition" in line and "machine=m" in line and "[info" in line


def test_a_stdlib_level_changed_by_the_host_is_followed(restored_structlog: None) -> None:
    """Under structlog's stdlib BoundLogger, enabled() follows the stdlib logger's level
    as the host changes it; it is not kept like a filtering logger's answer."""
    import logging

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


def test_without_structlogs_config_object_the_config_is_read_through_get_config(
    restored_structlog: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fallback view reads what structlog's object holds, and loggers still follow a
    reconfiguration through it."""
    view = logs._ConfigView()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(20))
    for part in (
        "is_configured",
        "default_processors",
        "default_wrapper_class",
        "logger_factory",
        "default_context_class",
    ):
        assert getattr(view, part) is getattr(structlog._config._CONFIG, part), part
    monkeypatch.setattr(logs, "_STRUCTLOG", view)
    log = logs.get_logger("envckpt.tests.view")
    assert log.enabled("info") is not None
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(30))
    assert log.enabled("info") is None
