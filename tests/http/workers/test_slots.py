"""Tests for envckpt.http.workers.slots: slots claimed by lock, registrations, rollout owners."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from envckpt.http.workers.slots import (
    WORKER_DIR_ENV,
    WORKERS_ENV,
    Registration,
    WorkerDirectory,
    owner_slot,
)


@pytest.fixture
def directory(tmp_path: Path) -> WorkerDirectory:
    return WorkerDirectory(tmp_path)


def test_owner_slot_is_stable_in_range_and_spreads() -> None:
    """Every rollout has one owner among N, the same each time, and owners spread."""
    owners = [owner_slot(f"rollout-{i}", 4) for i in range(400)]
    assert owners == [owner_slot(f"rollout-{i}", 4) for i in range(400)]
    assert set(owners) == {0, 1, 2, 3}
    assert min(Counter(owners).values()) > 60
    assert {owner_slot(f"x{i}", 1) for i in range(10)} == {0}


def test_claims_take_distinct_slots_and_a_full_server_refuses(directory: WorkerDirectory) -> None:
    """Two workers get slots 0 and 1; a third of two waits, then refuses; release frees one."""
    first, second = directory.claim(expected=2), directory.claim(expected=2)
    assert (first.slot, second.slot) == (0, 1)
    with pytest.raises(RuntimeError, match="taken"):
        directory.claim(expected=2, within=0.1)
    first.release()
    again = directory.claim(expected=2, within=0.1)
    assert again.slot == 0
    again.release()
    second.release()


def test_a_dead_workers_slot_is_taken_back(directory: WorkerDirectory) -> None:
    """The kernel drops a killed process's lock, so its replacement claims the same slot."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from envckpt.http.workers.slots import WorkerDirectory\n"
            f"claim = WorkerDirectory({str(directory.path)!r}).claim(expected=1)\n"
            "print(claim.slot, flush=True)\n"
            "time.sleep(60)\n",
        ],
        stdout=subprocess.PIPE,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == b"0"
        with pytest.raises(RuntimeError):
            directory.claim(expected=1, within=0.1)
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
    claim = directory.claim(expected=1, within=5.0)
    assert claim.slot == 0
    claim.release()


def test_registrations_round_trip_and_skip_what_is_not_one(directory: WorkerDirectory) -> None:
    """Registered workers read back by slot; a torn or foreign file is ignored."""
    one = Registration(1, 4242, "b" * 32, str(directory.path / "w1.sock"))
    directory.register(one)
    (directory.path / "slot-0.json").write_text("{not json")
    (directory.path / "slot-2.json").write_text('{"slot": 5, "pid": 1, "boot": "x", "socket": "s"}')
    assert directory.registrations(expected=3) == {1: one}
    directory.unregister(Registration(1, 1, "c" * 32, "other.sock"))  # not its own: kept
    assert directory.registrations(expected=3) == {1: one}
    directory.unregister(one)
    assert directory.registrations(expected=3) == {}


def test_a_registration_must_name_a_worker() -> None:
    """Negative slots, no pid, no boot id or no socket are refused."""
    for bad in ((-1, 1, "b", "s"), (0, 0, "b", "s"), (0, 1, "", "s"), (0, 1, "b", "")):
        with pytest.raises(ValueError):
            Registration(*bad)


def test_the_environment_round_trips_and_a_worker_without_it_refuses(tmp_path: Path) -> None:
    """What the launcher hands down is what a worker reads; nothing, or a bad count, refuses."""
    env = WorkerDirectory(tmp_path).environment(workers=3)
    assert WorkerDirectory.from_environment(env) == (tmp_path, 3)
    for bad in ({}, {WORKER_DIR_ENV: str(tmp_path), WORKERS_ENV: "0"}, {WORKERS_ENV: "2"}):
        with pytest.raises(ValueError):
            WorkerDirectory.from_environment(bad)


def test_created_directories_are_short_and_owner_only() -> None:
    """A new worker directory sits in /tmp (socket paths stay short), mode 0700."""
    created = WorkerDirectory.create()
    try:
        assert created.path.parent == Path("/tmp")
        assert created.path.stat().st_mode & 0o777 == 0o700
        assert len(created.socket_path(3, "f" * 32)) < 100
    finally:
        created.remove()
    assert not created.path.exists()
