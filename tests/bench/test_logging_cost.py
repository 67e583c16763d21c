"""bench/logging_cost.py at its smallest: what it measures, and that it leaves nothing behind."""

from __future__ import annotations

import json
import os
from pathlib import Path

import structlog

from envckpt.machines import binding

from helpers.repository_bench import repository_bench

logging_cost = repository_bench("logging_cost")


def _lines(path: Path) -> int:
    return len(path.read_bytes().splitlines())


def _open_files() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_run_logs_every_transition_as_json_and_leaks_no_file(
    tmp_path: Path, restored_structlog: None
) -> None:
    """Each cycle writes its 15 transitions as JSON lines; rounds close their files and put
    structlog and the binding's logger back."""
    logger, config = binding._LOG, structlog.get_config()
    logging_cost.run(tmp_path, rounds=1, cycles=1)  # warm: imports, thread pool
    before, logged = _open_files(), _lines(tmp_path / "transitions.jsonl")
    cpu, wall, events = logging_cost.run(tmp_path, rounds=3, cycles=2)
    assert _open_files() == before
    assert events == 15
    assert {name: len(values) for name, values in cpu.items()} == {
        "on": 3,
        "off": 3,
        "floor": 3,
        "absent": 3,
    }
    assert set(wall) == set(cpu)
    assert binding._LOG is logger and structlog.get_config() == config
    lines = (tmp_path / "transitions.jsonl").read_bytes().splitlines()
    # A warm-up round and three rounds of "on" and of "floor" each, then the
    # counting run: two cycles each.
    assert len(lines) - logged == 15 * 2 * (2 * (1 + 3) + 1)
    event = json.loads(lines[-1])
    assert event["event"] == "transition" and event["level"] == "info"
    assert {"machine", "trigger", "source", "dest", "timestamp"} <= set(event)


def test_a_run_without_absent_leaves_only_that_variant_out(
    tmp_path: Path, restored_structlog: None
) -> None:
    """``absent=False`` (what --quick runs) leaves that variant out and nothing else."""
    cpu, wall, events = logging_cost.run(tmp_path, rounds=2, cycles=1, absent=False)
    assert events == 15
    assert {name: len(values) for name, values in cpu.items()} == {"on": 2, "off": 2, "floor": 2}
    assert set(wall) == set(cpu)


def test_the_file_count_sees_a_leak(tmp_path: Path) -> None:
    """Tampered: a file left open between two counts is seen."""
    before = _open_files()
    with open(tmp_path / "leak", "ab"):
        assert _open_files() == before + 1
