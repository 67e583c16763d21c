"""Start a nemo-gym deployment without Ray: one process per server.

``ng_run`` always starts Ray and a head server. This launcher instead resolves
the config once (hosts, free ports), then starts ``python -m
envckpt.nemo_gym.serve`` for every server with nemo-gym's own environment
variables (``NEMO_GYM_CONFIG_DICT``, ``NEMO_GYM_CONFIG_PATH``), and waits for
each process's ready file::

    deployment = launch(config_yaml_or_dict, run_dir=run, token_file=run / "token")
    deployment.urls["policy_model"]           # http://127.0.0.1:PORT
    deployment.config                         # the resolved config every server got
    deployment.stop()                         # SIGTERM, then SIGKILL after a grace period

The config's ``envckpt`` block may name model servers under
``scripted_policy``: the launcher then starts the scripted policy endpoint
(``scripted_policy.py``) first and points their ``base_url`` at it.

Secrets never go on a command line: with ``token_file`` the children get the
path of that owner-only file (``ENVCKPT_GYM_TOKEN_FILE``); without it they
inherit ``ENVCKPT_GYM_TOKEN`` from this process's environment. Servers are
forked from a forkserver that imported nemo-gym once (``processes.py``;
``preload=False`` starts fresh interpreters); as with multiprocessing, a
script that launches must guard its entry point with
``if __name__ == "__main__"``. Children stay in the caller's process group,
so killing that group (a node failure) kills the whole deployment at once.

A port the launcher picks (probing port 0, then closing the probe) can be
taken by another socket before its server binds it: every outgoing
connection on the machine draws its local port from the same range. A
launch in which a server could not bind a port the launcher picked is
stopped and started again with fresh ports (``PORT_ATTEMPTS`` in all); a
port the config names is never replaced, so a clash there fails the launch
with ``PortInUse``, naming the port, the server and the process holding it
(``port_holders``: ``/proc/net/tcp`` and the owner's ``/proc/<pid>/fd``),
checked before any server starts and again if a server could not bind.

Every process started here dies with the process that called ``launch``
(``processes.py``, ``envckpt.process_tie``).
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envckpt.http.client import NEMO_GYM_SERVER_TYPES
from envckpt.http.tokens import GYM_TOKEN_ENV, GYM_TOKEN_FILE_ENV
from envckpt.nemo_gym.port_holders import describe, port_holders
from envckpt.nemo_gym.processes import ServerProcess, start_server
from envckpt.nemo_gym.readiness import read_ready_file
from envckpt.nemo_gym.settings import (
    READY_FILE_ENV,
    STAGING_TOKEN_ENV,
    STAGING_TOKEN_FILE_ENV,
    envckpt_block,
)

HOST = "127.0.0.1"
STARTUP_SECONDS = 90.0
STOP_GRACE_SECONDS = 10.0
SCRIPTED_POLICY = "envckpt_scripted_policy"
PORT_ATTEMPTS = 3
# What uvicorn logs when its port is taken (errno EADDRINUSE's text).
_PORT_TAKEN = b"address already in use"


class ServersExited(RuntimeError):
    """Server processes exited before they were ready."""

    def __init__(self, names: list[str], detail: str = "") -> None:
        super().__init__(f"server processes exited during startup: {names}{detail}")
        self.names = names


class PortInUse(ServersExited):
    """A port the config names for ``server`` is held by another process (``holder``)."""

    def __init__(self, server: str, port: int, holder: str) -> None:
        RuntimeError.__init__(self, f"cannot start {server}: {holder}")
        self.names = [server]
        self.server = server
        self.port = port
        self.holder = holder

    def __reduce__(self) -> tuple[type[PortInUse], tuple[str, int, str]]:
        return (PortInUse, (self.server, self.port, self.holder))


def check_named_ports(config: Mapping[str, Any], named: set[str]) -> None:
    """``PortInUse`` for the first server in ``named`` whose configured port is listened on."""
    for name in sorted(named):
        port = int(_inner(config, name)["port"])
        holders = port_holders(port)
        if holders:
            raise PortInUse(name, port, describe(port, holders))


class _PickedPortTaken(Exception):
    """A server could not bind the port the launcher picked for it."""

    def __init__(self, names: list[str]) -> None:
        super().__init__(names)
        self.names = names


def load_config(config: Mapping[str, Any] | str | os.PathLike[str]) -> dict[str, Any]:
    """A nemo-gym config as a plain resolved dict: from a mapping, a YAML file or YAML text."""
    from omegaconf import OmegaConf

    loaded: Any
    if isinstance(config, Mapping):
        loaded = OmegaConf.create(dict(config))
    elif isinstance(config, os.PathLike) or (isinstance(config, str) and "\n" not in config):
        loaded = OmegaConf.load(Path(config))
    else:
        loaded = OmegaConf.create(config)
    plain = OmegaConf.to_container(loaded, resolve=True)
    if not isinstance(plain, dict):
        raise ValueError("a nemo-gym config must be a mapping")
    return {str(key): value for key, value in plain.items()}


def free_port(host: str = HOST) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def server_names(config: Mapping[str, Any]) -> list[str]:
    return [
        name
        for name, entry in config.items()
        if isinstance(entry, Mapping) and any(key in entry for key in NEMO_GYM_SERVER_TYPES)
    ]


def _inner(config: Mapping[str, Any], name: str) -> dict[str, Any]:
    entry = config[name]
    by_impl = next(entry[key] for key in NEMO_GYM_SERVER_TYPES if key in entry)
    inner: dict[str, Any] = next(iter(by_impl.values()))
    return inner


def resolve(
    config: Mapping[str, Any] | str | os.PathLike[str], *, host: str = HOST
) -> dict[str, Any]:
    """A copy of ``config`` with every server's host and port set, as ng_run would."""
    resolved = load_config(config)
    for name in server_names(resolved):
        inner = _inner(resolved, name)
        inner["host"] = inner.get("host") or host
        if not inner.get("port"):
            inner["port"] = free_port(host)
    # Read by nemo-gym at startup but never contacted without Ray.
    resolved.setdefault("head_server", {"host": host, "port": free_port(host)})
    resolved.setdefault("dry_run", False)
    return resolved


@dataclass
class Deployment:
    """The processes of one running deployment."""

    config: dict[str, Any]
    urls: dict[str, str]
    run_dir: Path
    processes: dict[str, ServerProcess] = field(default_factory=dict)

    def pids(self) -> dict[str, int]:
        return {name: process.pid for name, process in self.processes.items()}

    def alive(self) -> dict[str, bool]:
        return {name: process.poll() is None for name, process in self.processes.items()}

    def stop(self, *, grace: float = STOP_GRACE_SECONDS) -> dict[str, int | None]:
        """SIGTERM every process, SIGKILL what is still running after ``grace`` s."""
        for process in self.processes.values():
            if process.poll() is None:
                process.terminate()
        give_up = time.monotonic() + grace
        for process in self.processes.values():
            if process.wait(timeout=max(0.0, give_up - time.monotonic())) is None:
                process.kill()
                process.wait()
        return {name: process.poll() for name, process in self.processes.items()}


def _env(
    config_yaml: str,
    name: str,
    ready_file: Path,
    token_file: Path | None,
    staging_token_file: Path | None,
) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "NEMO_GYM_CONFIG_DICT": config_yaml,
            "NEMO_GYM_CONFIG_PATH": name,
            READY_FILE_ENV: str(ready_file),
            "PYTHONUNBUFFERED": "1",
        }
    )
    # A given file wins: the value variables (read first) are not passed on.
    if token_file is not None:
        env.pop(GYM_TOKEN_ENV, None)
        env[GYM_TOKEN_FILE_ENV] = str(token_file)
    if staging_token_file is not None:
        env.pop(STAGING_TOKEN_ENV, None)
        env[STAGING_TOKEN_FILE_ENV] = str(staging_token_file)
    return env


def _wait_ready(
    pending: Mapping[str, Path], processes: Mapping[str, ServerProcess], timeout: float
) -> dict[str, str]:
    urls: dict[str, str] = {}
    give_up = time.monotonic() + timeout
    while len(urls) < len(pending):
        for name, ready_file in pending.items():
            if name not in urls and ready_file.exists():
                urls[name] = read_ready_file(ready_file)["url"]
        exited = [name for name, p in processes.items() if p.poll() is not None]
        if exited:
            raise ServersExited(sorted(exited))
        if time.monotonic() > give_up:
            missing = sorted(set(pending) - set(urls))
            raise TimeoutError(f"servers not ready after {timeout:.0f} s: {missing}")
        time.sleep(0.05)
    return urls


def launch(
    config: Mapping[str, Any] | str | os.PathLike[str],
    *,
    run_dir: str | os.PathLike[str],
    token_file: str | os.PathLike[str] | None = None,
    staging_token_file: str | os.PathLike[str] | None = None,
    startup_timeout: float = STARTUP_SECONDS,
    preload: bool = True,
) -> Deployment:
    """Resolve ``config`` and start one process per server; see the module docstring."""
    directory = Path(run_dir)
    directory.mkdir(parents=True, exist_ok=True)
    loaded = load_config(config)
    for attempt in range(1, PORT_ATTEMPTS + 1):
        try:
            return _launch_once(
                loaded,
                directory,
                token_file=token_file,
                staging_token_file=staging_token_file,
                startup_timeout=startup_timeout,
                preload=preload,
            )
        except _PickedPortTaken as taken:
            if attempt == PORT_ATTEMPTS:
                detail = f" (a picked port was taken in each of {PORT_ATTEMPTS} attempts)"
                raise ServersExited(taken.names, detail) from taken
    raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises


def _log(directory: Path, name: str) -> Path:
    """Where the server ``name`` writes its output."""
    return directory / f"{name}.log"


def _log_sizes(directory: Path, names: list[str]) -> dict[str, int]:
    """Where each server's log ends before this attempt appends to it."""
    sizes = {}
    for name in names:
        path = _log(directory, name)
        sizes[name] = path.stat().st_size if path.exists() else 0
    return sizes


def _port_taken(directory: Path, name: str, since: int) -> bool:
    """Whether the server's log, from ``since`` on, says its port was taken."""
    try:
        with _log(directory, name).open("rb") as log:
            log.seek(since)
            return _PORT_TAKEN in log.read().lower()
    except FileNotFoundError:
        return False


def _launch_once(
    loaded: dict[str, Any],
    directory: Path,
    *,
    token_file: str | os.PathLike[str] | None,
    staging_token_file: str | os.PathLike[str] | None,
    startup_timeout: float,
    preload: bool,
) -> Deployment:
    from omegaconf import OmegaConf

    names = server_names(loaded)
    # Ports the config leaves out are the launcher's to pick, and to pick again.
    picked = {name for name in names if not _inner(loaded, name).get("port")}
    named = set(names) - picked
    picked.add(SCRIPTED_POLICY)
    logs = _log_sizes(directory, [*names, SCRIPTED_POLICY])
    resolved = resolve(loaded)
    check_named_ports(resolved, named)  # before anything starts: name the holder
    processes: dict[str, ServerProcess] = {}
    deployment = Deployment(config=resolved, urls={}, run_dir=directory, processes=processes)
    try:
        block = envckpt_block(resolved)
        scripted = list(block.get("scripted_policy") or ())
        if scripted:
            port = free_port()
            ready = directory / f"{SCRIPTED_POLICY}.ready"
            ready.unlink(missing_ok=True)
            processes[SCRIPTED_POLICY] = start_server(
                "envckpt.nemo_gym.scripted_policy",
                [
                    "--port",
                    str(port),
                    "--ready-file",
                    str(ready),
                    "--generation-seconds",
                    str(float(block.get("scripted_policy_latency") or 0.0)),
                ],
                env=os.environ,
                log=_log(directory, SCRIPTED_POLICY),
                preload=preload,
            )
            backend = _wait_ready({SCRIPTED_POLICY: ready}, processes, startup_timeout)
            for name in scripted:
                _inner(resolved, name)["base_url"] = f"{backend[SCRIPTED_POLICY]}/v1"
            deployment.urls.update(backend)
        config_yaml = OmegaConf.to_yaml(OmegaConf.create(resolved))
        pending: dict[str, Path] = {}
        for name in server_names(resolved):
            ready = directory / f"{name}.ready"
            ready.unlink(missing_ok=True)  # a killed server leaves its old one
            pending[name] = ready
            env = _env(
                config_yaml,
                name,
                ready,
                None if token_file is None else Path(token_file),
                None if staging_token_file is None else Path(staging_token_file),
            )
            processes[name] = start_server(
                "envckpt.nemo_gym.serve",
                [],
                env=env,
                log=_log(directory, name),
                preload=preload,
            )
        deployment.urls.update(_wait_ready(pending, processes, startup_timeout))
    except ServersExited as exited:
        deployment.stop(grace=2.0)
        taken = [name for name in exited.names if _port_taken(directory, name, logs[name])]
        if any(name in picked for name in taken):
            raise _PickedPortTaken(exited.names) from exited
        for name in taken:  # a named port taken after the check: name its holder now
            port = int(_inner(resolved, name)["port"])
            raise PortInUse(name, port, describe(port, port_holders(port))) from exited
        raise
    except BaseException:
        deployment.stop(grace=2.0)
        raise
    return deployment
