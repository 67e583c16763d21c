"""Tests for envckpt.sim.json_log: every line of a server's log file is one JSON object."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from envckpt.sim.json_log import configure_json_log


@pytest.fixture
def restored_logging(restored_structlog: None) -> Iterator[None]:
    """The root logger's handlers and levels as they were, afterwards."""
    root = logging.getLogger()
    saved = (root.handlers[:], root.level, logging.getLogger("transitions").level)
    servers = [logging.getLogger(name) for name in ("uvicorn", "uvicorn.error", "uvicorn.access")]
    saved_servers = [(log.handlers[:], log.propagate, log.disabled, log.level) for log in servers]
    try:
        yield
    finally:
        for log, (handlers, propagate, disabled, level) in zip(servers, saved_servers, strict=True):
            log.handlers[:], log.propagate, log.disabled = handlers, propagate, disabled
            log.setLevel(level)
        for handler in root.handlers:
            if handler not in saved[0]:
                handler.close()
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
        logging.getLogger("transitions").setLevel(saved[2])


def test_structlog_events_and_stdlib_records_are_json_lines_in_the_file(
    tmp_path: Path, restored_logging: None
) -> None:
    """A structlog event and a stdlib record (uvicorn's kind) each land as one JSON line,
    flushed as logged; the transitions library's INFO narration does not."""
    path = tmp_path / "server.jsonl"
    configure_json_log(path)
    structlog.get_logger("envckpt.test").info("transition", trigger="prepare", dest="preparing")
    logging.getLogger("uvicorn.error").info("Started server process")
    logging.getLogger("transitions").info("Exited state idle")
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["event"] for line in lines] == ["transition", "Started server process"]
    assert lines[0]["trigger"] == "prepare" and lines[0]["level"] == "info"
    assert lines[1]["logger"] == "uvicorn.error" and "timestamp" in lines[1]


def test_uvicorns_records_reach_the_file_after_uvicorn_configured_its_own_logging(
    tmp_path: Path, restored_logging: None
) -> None:
    """A uvicorn.Config built earlier in the process (its default logging config: own
    handlers, no propagation) does not keep uvicorn's records out of the file."""
    import uvicorn

    uvicorn.Config(app=lambda scope, receive, send: None)  # applies uvicorn's LOGGING_CONFIG
    assert logging.getLogger("uvicorn").propagate is False
    path = tmp_path / "server.jsonl"
    configure_json_log(path)
    logging.getLogger("uvicorn.error").info("Started server process")
    logging.getLogger("uvicorn.access").info("GET /status 200")
    events = [json.loads(line)["event"] for line in path.read_text().splitlines()]
    assert events == ["Started server process", "GET /status 200"]


def test_uvicorns_records_reach_the_file_after_uvicorn_raised_its_log_level(
    tmp_path: Path, restored_logging: None
) -> None:
    """A uvicorn.Config with ``log_level="warning"`` earlier in the process (a quiet test
    server) does not keep uvicorn's INFO records out of the file."""
    import uvicorn

    uvicorn.Config(app=lambda scope, receive, send: None, log_level="warning")
    assert logging.getLogger("uvicorn.error").level == logging.WARNING
    path = tmp_path / "server.jsonl"
    configure_json_log(path)
    logging.getLogger("uvicorn.error").info("Started server process")
    events = [json.loads(line)["event"] for line in path.read_text().splitlines()]
    assert events == ["Started server process"]
