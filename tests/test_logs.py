"""Tests for envckpt.logs: silent inside a host by default, stdlib or JSON when asked."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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
