"""Tests for envckpt.crashpoints: named points where a real crash can be injected."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import envckpt
from envckpt import crashpoints
from envckpt.crashpoints import POINTS, SimulatedCrash, crashpoint, install, kill_at, raise_at


@pytest.fixture(autouse=True)
def no_handler() -> Iterator[None]:
    """Every test starts and ends without a process-wide handler."""
    install(None)
    yield
    install(None)


def test_without_a_handler_a_crashpoint_does_nothing() -> None:
    """The default is a no-op, for every known point."""
    for point in POINTS:
        crashpoint(point)


def test_an_installed_handler_sees_every_point_until_removed() -> None:
    """install() routes each reached point to the handler; install(None) stops that."""
    seen: list[str] = []
    install(seen.append)
    crashpoint("snapshot.before_prepare")
    crashpoint("restore.after")
    install(None)
    crashpoint("snapshot.after_publish")
    assert seen == ["snapshot.before_prepare", "restore.after"]


@pytest.mark.parametrize("make", [kill_at, raise_at])
def test_kill_at_refuses_an_unknown_point(make: object) -> None:
    """A typo in a point name is refused up front, listing the known points."""
    with pytest.raises(ValueError, match=r"snapshot\.under_cut"):
        make("snapshot.undercut")  # type: ignore[operator]


def test_raise_at_strikes_only_the_nth_time_at_its_point() -> None:
    """Other points and earlier passes go by; the nth pass raises SimulatedCrash, once."""
    install(raise_at("restore.validated", nth=2))
    crashpoint("snapshot.under_cut")
    crashpoint("restore.validated")
    with pytest.raises(SimulatedCrash) as caught:
        crashpoint("restore.validated")
    assert caught.value.point == "restore.validated"
    crashpoint("restore.validated")


def test_every_crashpoint_called_in_the_library_is_a_known_point() -> None:
    """Call sites and POINTS agree, so every point a test may choose is reachable and named."""
    root = Path(envckpt.__file__).parent
    called = {
        name
        for path in root.rglob("*.py")
        for name in re.findall(r'crashpoint\("([^"]+)"\)', path.read_text())
    }
    assert called == set(POINTS)
    assert crashpoints.SNAPSHOT_POINTS + crashpoints.RESTORE_POINTS + crashpoints.PRUNE_POINTS == (
        POINTS
    )


def test_kill_at_kills_the_whole_process_group_at_the_nth_reach(tmp_path: Path) -> None:
    """The second reach SIGKILLs the process and its child; other points do not count."""
    child_pid = tmp_path / "child.pid"
    script = textwrap.dedent(
        f"""
        import subprocess, sys
        from envckpt.crashpoints import crashpoint, install, kill_at
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        open({str(child_pid)!r}, "w").write(str(child.pid))
        install(kill_at("snapshot.under_cut", nth=2))
        crashpoint("snapshot.under_cut")
        print("survived the first reach", flush=True)
        crashpoint("snapshot.after_publish")
        crashpoint("snapshot.under_cut")
        print("survived the second reach", flush=True)
        """
    )
    # A session of its own: the kill must not reach pytest's process group.
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        start_new_session=True,
    )
    assert done.returncode == -9, done.stderr
    assert done.stdout == "survived the first reach\n"
    # The child dies with the group (gone, or a zombie until init reaps it); the
    # signal lands when the kernel next schedules it.
    pid = int(child_pid.read_text())
    give_up = time.monotonic() + 20
    while alive(pid):
        assert time.monotonic() < give_up, "the child outlived the process group kill"
        time.sleep(0.01)


def alive(pid: int) -> bool:
    """Whether ``pid`` is a process that has not died (a zombie has)."""
    try:
        return "State:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
