"""Imported by the launcher's forkserver only: the forkserver dies with the process that started it.

The launcher (``processes.py``) preloads this module into its multiprocessing
forkserver, after writing its own pid to ``FORKSERVER_PARENT_ENV``. Imported
there, it ties the forkserver to that process with a parent watch
(``envckpt.process_tie``; no death signal: the forkserver may have been
started from a worker thread, whose exit would fire it). ``FORKSERVER_PID``
then names the forkserver, so each server it forks can ask for the kernel's
death signal against it (the forkserver forks from its main thread)::

    os.environ[FORKSERVER_PARENT_ENV] = str(os.getpid())   # launcher, before the first start
    forkserver_tie.FORKSERVER_PID                          # in a forked server: its parent

Imported anywhere else (the launcher's own process, a test), it does nothing.
"""

from __future__ import annotations

import os

from envckpt.process_tie import tie_to

FORKSERVER_PARENT_ENV = "ENVCKPT_FORKSERVER_PARENT"

FORKSERVER_PID: int | None = None


def _tie_this_forkserver() -> int | None:
    raw = os.environ.get(FORKSERVER_PARENT_ENV, "")
    try:
        parent = int(raw)
    except ValueError:
        return None
    if parent == os.getpid():
        return None  # the launcher itself
    tie_to(parent, signal_on_death=False)
    return os.getpid()


FORKSERVER_PID = _tie_this_forkserver()
