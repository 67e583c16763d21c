"""Child processes that die with the process that started them.

A trainer SIGKILLed on its own (by a scheduler, by the OOM killer) must not
leave its Gym servers behind: they keep their ports, and a relaunch on the
configured ports then fails. Linux lets a child ask to be killed when its
parent dies (``prctl(PR_SET_PDEATHSIG, SIGKILL)``), with two gaps this module
closes:

* the signal fires when the **thread** that forked the child exits, not the
  process: a child forked from an executor thread would die with that
  thread. The parent says in the child's environment whether it forked from
  its main thread; only then is the signal asked for;
* a parent that dies before the child asks is never signalled for. So every
  tied child also runs a **parent watch**: a daemon thread that compares
  ``getppid()`` with the parent it was told about and SIGKILLs its own process
  once they differ (a dead parent's children are re-parented).

::

    env = child_env(os.environ)            # parent: names itself as the one to follow
    subprocess.Popen(cmd, env=env)         # ... or any way of starting the child
    tie_to_parent()                        # child, first thing: dies with that parent

``tie_to(parent_pid, signal_on_death=...)`` is the same with the parent given
(a forkserver's children know the forkserver's pid). Without the variables
``tie_to_parent`` does nothing, so a process started by hand is never tied.
On systems without ``prctl`` only the watch runs.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import threading
from collections.abc import Mapping

PARENT_PID_ENV = "ENVCKPT_PARENT_PID"
PARENT_MAIN_THREAD_ENV = "ENVCKPT_PARENT_MAIN_THREAD"
PR_SET_PDEATHSIG = 1
# How often the watch looks at the parent: a dead parent is noticed within this.
WATCH_SECONDS = 0.2

_tied: int | None = None  # the parent this process follows, once tied


def child_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` plus the variables that tie a child started now to this process."""
    tied = dict(env)
    tied[PARENT_PID_ENV] = str(os.getpid())
    on_main = threading.current_thread() is threading.main_thread()
    tied[PARENT_MAIN_THREAD_ENV] = "1" if on_main else "0"
    return tied


def tie_to_parent(environ: dict[str, str] | None = None) -> int | None:
    """Tie this process to the parent its environment names; the parent's pid, or None.

    The variables are removed from the environment afterwards, so a process
    this one starts without ``child_env`` is not mistaken for its child.
    """
    env = os.environ if environ is None else environ
    raw = env.pop(PARENT_PID_ENV, None)
    main_thread = env.pop(PARENT_MAIN_THREAD_ENV, "0") == "1"
    if not raw:
        return None
    try:
        parent = int(raw)
    except ValueError:
        return None
    if parent == os.getpid():
        return None  # the variables were set for this process's own children
    tie_to(parent, signal_on_death=main_thread)
    return parent


def tie_to(parent: int, *, signal_on_death: bool) -> None:
    """Die with ``parent`` (this process's parent): the kernel's signal if safe, and a watch."""
    global _tied
    if signal_on_death:
        _set_pdeathsig(signal.SIGKILL)
    if os.getppid() != parent:
        _die()  # it died before we could ask: nothing would ever tell us
    if _tied == parent:
        return
    _tied = parent
    watch = threading.Thread(
        target=_watch, args=(parent,), name="envckpt-parent-watch", daemon=True
    )
    watch.start()


def tied_parent() -> int | None:
    """The parent this process follows (None: not tied)."""
    return _tied


def _watch(parent: int) -> None:
    stop = threading.Event()
    while not stop.wait(WATCH_SECONDS):
        if os.getppid() != parent:
            _die()


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _set_pdeathsig(signum: int) -> bool:
    """``prctl(PR_SET_PDEATHSIG, signum)``; False where there is no prctl."""
    with contextlib.suppress(OSError, AttributeError):
        # The process's own symbols: libc's prctl on Linux, without a library search.
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(PR_SET_PDEATHSIG, signum, 0, 0, 0) == 0)
    return False
