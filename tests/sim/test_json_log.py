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
    try:
        yield
    finally:
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
