"""The process demo's secrets: random per run, two of them, never on a command line or in a log.

The demo (``run_processes``) runs for real, killed once so a second incarnation
starts; meanwhile every process of the job's process group (the trainer and
its Gym server children) is sampled from /proc: its command line, and its
environment, which is where the tokens are (readable by the owner only).
Afterwards every file the demo wrote is searched for them.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from envckpt.demo.gym_hosting import CONTROL_TOKEN_ENV, ROWS_TOKEN_ENV
from envckpt.demo.plan import Interruption
from envckpt.demo.processes import run_processes
from envckpt.demo.scenario import DemoSettings
from envckpt.http.tokens import GYM_ROWS_TOKEN_ENV, GYM_TOKEN_ENV, MIN_TOKEN_LENGTH

pytestmark = pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="needs /proc")


def read_proc(pid: int, name: str) -> bytes | None:
    try:
        return Path(f"/proc/{pid}/{name}").read_bytes()
    except OSError:  # gone meanwhile
        return None


def environ_of(raw: bytes) -> dict[str, str]:
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {key.decode(errors="replace"): value.decode(errors="replace") for key, value in pairs}


class JobWatcher:
    """Samples the command line and environment of every process of the demo's job."""

    def __init__(self) -> None:
        self.cmdlines: dict[int, bytes] = {}
        self.environs: dict[int, dict[str, str]] = {}
        self.stop = threading.Event()

    def job_pids(self) -> list[int]:
        """Our trainer children (each leads its process group) and every member of their groups.

        Other children of this process (servers other tests left running) are not the demo's.
        """
        mine = os.getpid()
        stats: dict[int, tuple[int, int]] = {}
        for entry in Path("/proc").iterdir():
            stat = read_proc(int(entry.name), "stat") if entry.name.isdigit() else None
            if stat is not None:
                fields = stat.rsplit(b")", 1)[-1].split()
                stats[int(entry.name)] = (int(fields[1]), int(fields[2]))
        trainers = {
            pid
            for pid, (parent, _) in stats.items()
            if parent == mine
            and b"envckpt.demo.trainer_process" in (read_proc(pid, "cmdline") or b"")
        }
        return [pid for pid, (_, group) in stats.items() if pid in trainers or group in trainers]

    def sample(self) -> None:
        for pid in self.job_pids():
            cmdline, environ = read_proc(pid, "cmdline"), read_proc(pid, "environ")
            if cmdline and environ is not None:
                self.cmdlines[pid] = cmdline
                self.environs[pid] = environ_of(environ)

    def run(self) -> None:
        while not self.stop.is_set():
            self.sample()
            time.sleep(0.02)


def leaks(secrets: tuple[bytes, ...], cmdlines: dict[int, bytes], files: list[Path]) -> list[str]:
    """Where any of ``secrets`` shows: a process's command line or a file's bytes."""
    found = [f"pid {pid}" for pid, line in cmdlines.items() if any(s in line for s in secrets)]
    found += [str(path) for path in files if any(s in path.read_bytes() for s in secrets)]
    return found


def test_the_scan_finds_a_token_on_a_command_line_or_in_a_file(tmp_path: Path) -> None:
    """A child started with a token in its arguments, and a log holding one, are both caught."""
    secret = b"planted-token-0123456789"
    clean, dirty = tmp_path / "clean.log", tmp_path / "dirty.log"
    clean.write_text("nothing here\n")
    dirty.write_bytes(b"token=" + secret + b"\n")
    watcher = JobWatcher()
    child = subprocess.Popen(
        # Looks like a trainer to the watcher (which follows only the demo's processes).
        [
            sys.executable,
            "-c",
            "import time; time.sleep(30)",
            "envckpt.demo.trainer_process",
            secret.decode(),
        ],
        start_new_session=True,
    )
    try:
        give_up = time.monotonic() + 10
        while child.pid not in watcher.cmdlines and time.monotonic() < give_up:
            watcher.sample()
    finally:
        child.kill()
        child.wait()
    assert leaks((secret,), watcher.cmdlines, [clean, dirty]) == [f"pid {child.pid}", str(dirty)]
    assert leaks((secret,), {}, [clean]) == []


def test_demo_tokens_are_random_separate_and_never_on_a_command_line_or_in_a_log(
    tmp_path: Path,
) -> None:
    """Each process gets its tokens through its environment; no cmdline or file holds one."""
    settings = DemoSettings(instances=2, rollouts=8, seed=4, directory=tmp_path,
                            snapshot_every=0.3, min_turns=4, max_turns=8)  # fmt: skip
    watcher = JobWatcher()
    sampler = threading.Thread(target=watcher.run, daemon=True)
    sampler.start()
    try:
        verdict, text = run_processes(settings, [Interruption("kill", after_snapshots=1)])
    finally:
        watcher.stop.set()
        sampler.join()
    assert verdict.passed, text

    trainers = {pid: env for pid, env in watcher.environs.items() if CONTROL_TOKEN_ENV in env}
    gyms = {pid: env for pid, env in watcher.environs.items() if GYM_TOKEN_ENV in env}
    assert len(trainers) >= 2 and len(gyms) >= 2 * settings.instances, watcher.cmdlines
    controls = {env[CONTROL_TOKEN_ENV] for env in trainers.values()}
    rows = {env[ROWS_TOKEN_ENV] for env in trainers.values()}
    assert len(controls) == len(rows) == 1  # one pair per run, both incarnations
    control, row = controls.pop(), rows.pop()
    assert control != row and min(len(control), len(row)) >= MIN_TOKEN_LENGTH
    for env in gyms.values():
        assert (env[GYM_TOKEN_ENV], env[GYM_ROWS_TOKEN_ENV]) == (control, row)
        assert CONTROL_TOKEN_ENV not in env and ROWS_TOKEN_ENV not in env

    written = [path for path in tmp_path.rglob("*") if path.is_file()]
    assert any(path.name.startswith("gym-") and path.suffix == ".log" for path in written)
    assert any(path.name.startswith("trainer-") for path in written)
    assert leaks((control.encode(), row.encode()), watcher.cmdlines, written) == []
