"""Server processes for the launcher: a fresh interpreter each, or forked from a preloaded one.

Importing nemo-gym takes a few CPU seconds (scipy, pandas, openai, ...), paid
again by every server process. With ``preload`` the launcher forks servers
from a multiprocessing *forkserver* that imported nemo-gym once; each child
still is its own process, gets its own environment and log, and runs the same
entry point as ``python -m``::

    child = start_server("envckpt.nemo_gym.serve", [], env=env, log=path, preload=True)
    child.poll(), child.pid, child.terminate(), child.kill(), child.wait(timeout=10)

Children stay in the caller's process group either way (the forkserver does
too), so one ``killpg`` of the job takes them all down. And every one dies
with the process that started it (``envckpt.process_tie``): a fresh
interpreter follows the launcher; the forkserver follows the launcher by a
parent watch (``forkserver_tie``), and each server forked from it asks the
kernel for SIGKILL when the forkserver dies, plus a watch of its own. So a
SIGKILL of the trainer's pid alone leaves no server, forkserver or
multiprocessing helper behind (the resource tracker exits once every holder
of its pipe is gone).
"""

from __future__ import annotations

import contextlib
import importlib
import multiprocessing
import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from envckpt.nemo_gym.forkserver_tie import FORKSERVER_PARENT_ENV
from envckpt.process_tie import PARENT_MAIN_THREAD_ENV, PARENT_PID_ENV, child_env, tie_to

# Imported once by the forkserver; what every nemo-gym server process needs.
# First: the forkserver's tie to the launcher (its import is the tie).
PRELOAD = (
    "envckpt.nemo_gym.forkserver_tie",
    "nemo_gym.server_utils",
    "nemo_gym.base_resources_server",
    "nemo_gym.base_responses_api_model",
    "nemo_gym.base_responses_api_agent",
    "nemo_gym.token_id_capture",
    "envckpt.nemo_gym.hosting",
    "envckpt.http.routes",
    "uvicorn",
)
_context: Any = None


class ServerProcess(Protocol):
    @property
    def pid(self) -> int: ...

    def poll(self) -> int | None: ...

    def terminate(self) -> None: ...

    def kill(self) -> None: ...

    def wait(self, timeout: float | None = None) -> int | None: ...


class _Subprocess:
    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self._process = process

    @property
    def pid(self) -> int:
        return self._process.pid

    def poll(self) -> int | None:
        return self._process.poll()

    def terminate(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self._process.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self._process.kill()

    def wait(self, timeout: float | None = None) -> int | None:
        try:
            return self._process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None


class _Forked:
    def __init__(self, process: Any) -> None:
        self._process = process

    @property
    def pid(self) -> int:
        pid: int = self._process.pid
        return pid

    def poll(self) -> int | None:
        code: int | None = self._process.exitcode
        return code

    def terminate(self) -> None:
        with contextlib.suppress(ProcessLookupError, AttributeError):
            self._process.terminate()

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, AttributeError):
            self._process.kill()

    def wait(self, timeout: float | None = None) -> int | None:
        self._process.join(timeout)
        return self.poll()


def _forkserver() -> Any:
    global _context
    if _context is None:
        # Read by forkserver_tie inside the forkserver: the process it follows.
        os.environ[FORKSERVER_PARENT_ENV] = str(os.getpid())
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(list(PRELOAD))
        _context = context
    return _context


def run_child(module: str, argv: Sequence[str], env: Mapping[str, str], log: str) -> None:
    """The forked child: tied to the forkserver, own environment and log, ``module.main(argv)``."""
    from envckpt.nemo_gym import forkserver_tie

    if forkserver_tie.FORKSERVER_PID is not None:
        # Forked by the forkserver's main thread: the kernel's signal is safe.
        tie_to(forkserver_tie.FORKSERVER_PID, signal_on_death=True)
    os.environ.clear()
    os.environ.update(env)
    for name in (PARENT_PID_ENV, PARENT_MAIN_THREAD_ENV, FORKSERVER_PARENT_ENV):
        os.environ.pop(name, None)  # tied already; its own children must not follow these
    descriptor = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(descriptor, 1)
    os.dup2(descriptor, 2)
    os.close(descriptor)
    os.chdir(Path(log).parent)
    # Default SIGTERM handling until uvicorn installs its own.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    entry = importlib.import_module(module)
    code = entry.main(list(argv)) if argv else entry.main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(int(code or 0))


def start_server(
    module: str,
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    log: Path,
    preload: bool,
) -> ServerProcess:
    """Start ``python -m module argv`` with ``env``, output appended to ``log``."""
    if preload:
        process = _forkserver().Process(
            target=run_child, args=(module, list(argv), dict(env), str(log)), daemon=True
        )
        process.start()
        return _Forked(process)
    with log.open("ab") as stream:
        popen = subprocess.Popen(
            [sys.executable, "-m", module, *argv],
            env=child_env(env),  # the entry point's tie_to_parent() follows this process
            stdout=stream,
            stderr=subprocess.STDOUT,
            cwd=log.parent,
        )
    return _Subprocess(popen)
