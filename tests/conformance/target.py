"""What the conformance suite talks to: participants under test, and how traffic reaches them.

``Participant`` is one control endpoint under test (its kind, mode, URL and
token) with a synchronous ``ControlClient``. ``SimDriver`` starts rollout
traffic on envckpt's simulated Gym data routes, for rows that need held
state or work in flight; an implementation without those routes runs the
other rows. ``own_participants`` starts envckpt's own deployments as real
processes (``python -m envckpt.sim.server``)::

    with own_participants(tmp_path) as participants:      # or external_participants(...)
        reply = participants["model"].client.call("prepare", {...})
        reply.status, reply.code, reply.body
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from envckpt.episodes import EnvironmentEpisode
from envckpt.protocol import CHECKPOINT_ROUTE_PREFIX, RETIRE_ORDER, Kind

from helpers.server_process import stop, wait_ready

TOKEN_ENV = "ENVCKPT_GYM_TOKEN"
ROOT_ENV = "ENVCKPT_CHECKPOINT_ROOT"
# The simulated Gym's server names, by participant kind.
SIM_SERVERS = {
    Kind.MODEL: "policy_model",
    Kind.AGENT: "simple_agent",
    Kind.RESOURCES: "tool_resources",
}
# An agent task long enough to still be running when a row looks at it.
LONG_TASK = {"prompt": "conformance", "turns": 9_999}
# Deployments of envckpt's own servers: name -> (data-route latency, resources mode).
# "fast" serves most rows; "slow" keeps a turn in flight long enough for the
# rows that start from preparing; "restart" has a restart_only tool server.
OWN_DEPLOYMENTS = {
    "fast": (0.02, "export_restore"),
    "slow": (2.0, "export_restore"),
    "restart": (0.02, "restart_only"),
}
READY_SECONDS = 90.0


@dataclass(frozen=True, slots=True)
class Reply:
    """One HTTP reply: status, parsed JSON body (None if not JSON) and raw text."""

    status: int
    body: Any
    text: str

    @property
    def code(self) -> str | None:
        """The protocol envelope's error code, if the reply carries the envelope."""
        error = self.body.get("error") if isinstance(self.body, dict) else None
        return error.get("code") if isinstance(error, dict) else None

    def describe(self) -> str:
        return f"HTTP {self.status} {self.text[:300]}"


class ControlClient:
    """Synchronous calls to one participant's control routes."""

    def __init__(self, base_url: str, token: str, http: httpx.Client) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.http = http

    def call(
        self,
        route: str,
        body: Any = None,
        *,
        method: str | None = None,
        token: str | None = None,
        raw: bytes | None = None,
        second_token: str | None = None,
    ) -> Reply:
        """One control request; ``token=""`` sends no Authorization header at all;
        ``second_token`` sends a second Authorization header after the first."""
        method = method or ("GET" if route == "status" else "POST")
        secret = self.token if token is None else token
        headers = [("Content-Type", "application/json")]
        if secret:
            headers.append(("Authorization", f"Bearer {secret}"))
        if second_token is not None:
            headers.append(("Authorization", f"Bearer {second_token}"))
        content = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        url = f"{self.base_url}{CHECKPOINT_ROUTE_PREFIX}/{route}"
        response = self.http.request(method, url, content=content, headers=headers)
        return _reply(response)

    def status(self) -> dict[str, Any]:
        reply = self.call("status")
        assert reply.status == 200 and isinstance(reply.body, dict), reply.describe()
        return reply.body

    def post(self, route: str, **fields: Any) -> Reply:
        """A POST with ``checkpoint_id`` and the other fields, deadline 30 s away by default."""
        fields.setdefault("deadline_ts", time.time() + 30)
        return self.call(route, fields)


def _reply(response: httpx.Response) -> Reply:
    try:
        body = response.json()
    except ValueError:
        body = None
    return Reply(response.status_code, body, response.text)


class SimDriver:
    """Rollout traffic on the simulated Gym's data routes of one deployment."""

    def __init__(self, urls: Mapping[Kind, str], control: Mapping[Kind, ControlClient]) -> None:
        self.urls = dict(urls)
        self.control = dict(control)
        self.http = httpx.Client(timeout=60.0)
        self.pool = ThreadPoolExecutor(max_workers=16, thread_name_prefix="conformance-traffic")
        self.running: list[Future[Reply]] = []

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)
        self.http.close()

    def data_call(self, kind: Kind, episode: EnvironmentEpisode | None, *, turn: int = 0) -> Reply:
        """One data-plane call of ``episode`` (None: without a rollout identity)."""
        wire = None if episode is None else episode.to_wire()
        if kind is Kind.MODEL:
            route, body = "generate", {"episode": wire, "turn": turn, "observation": "o"}
        elif kind is Kind.RESOURCES:
            route, body = "call", {"episode": wire, "turn": turn, "action": "a"}
        else:
            route, body = "run", {"episode": wire, "task": LONG_TASK}
        return _reply(self.http.post(f"{self.urls[kind]}/{route}", json=body))

    def start(self, kind: Kind, episode: EnvironmentEpisode) -> Future[Reply]:
        """Start a call of ``episode`` in the background; return once it is in flight."""
        future = self.pool.submit(self.data_call, kind, episode)
        self.running.append(future)
        key = episode.capture_key
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            report = self.control[kind].status().get("report") or {}
            if key in (report.get("blockers") or []):
                return future
            if future.done():
                raise AssertionError(f"{key} ended before it was seen in flight: {future.result()}")
            time.sleep(0.005)
        raise AssertionError(f"{key} never showed up in flight on {kind}")

    def hold(self, kind: Kind, episode: EnvironmentEpisode) -> None:
        """Make the participant hold state for ``episode`` (the agent: a running session)."""
        if kind is Kind.AGENT:
            self.start(kind, episode)
            return
        reply = self.data_call(kind, episode)
        assert reply.status == 200, reply.describe()

    def clean(self, rollout_ids: set[str], *, wait: bool) -> None:
        """Retire every attempt of these rollouts everywhere, callers first; forget if ``wait``.

        Without ``wait`` the retire is given a moment only: work still in flight
        stops on its own (a retired call records nothing), and the marks stay,
        so it can never come back.
        """
        if not rollout_ids:
            return
        cid = f"clean-{uuid.uuid4().hex[:10]}"
        episodes = [{"rollout_id": r, "attempt": 99} for r in sorted(rollout_ids)]
        seconds = 30.0 if wait else 0.05
        for kinds in RETIRE_ORDER:
            for kind in kinds:
                if kind in self.control:
                    self.control[kind].call(
                        "retire",
                        {
                            "checkpoint_id": cid,
                            "deadline_ts": time.time() + seconds,
                            "episode_ids": episodes,
                        },
                    )
        if wait:
            for kind in self.control:
                self.control[kind].post(
                    "forget", checkpoint_id=cid, rollout_ids=sorted(rollout_ids)
                )


@dataclass
class Participant:
    """One participant under test: where it is, what it is, and how to drive it."""

    name: str
    kind: Kind
    mode: str
    client: ControlClient
    profile: str
    driver: SimDriver | None = None
    # The same participant kind on a deployment whose turns last long enough
    # to be caught in flight (rows starting from preparing); envckpt's own only.
    slow: Participant | None = None
    status: dict[str, Any] = field(default_factory=dict)

    def for_inflight(self) -> Participant:
        return self.slow if self.slow is not None else self


def start_sim(
    tmp: Path, name: str, token: str, latency: float, resources_mode: str, workers: int = 1
) -> subprocess.Popen[bytes]:
    ready = tmp / f"{name}.ready.json"
    log = (tmp / f"{name}.log").open("wb")
    # The model waits for a generation in flight (never refuses it), so a
    # prepare can be caught blocked by one, as the rows from preparing need.
    args = [
        sys.executable, "-m", "envckpt.sim.server", "--seed", "7", "--no-judge",
        "--ready-file", str(ready), "--resources-mode", resources_mode,
        "--model-latency", str(latency), "--tool-latency", str(latency),
        "--model-calls", "wait",
        "--workers", str(workers),
    ]  # fmt: skip
    # Rows write their checkpoint directories under ``tmp``: the servers are confined to it.
    env = {**os.environ, TOKEN_ENV: token, ROOT_ENV: str(tmp)}
    return subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT)


@contextlib.contextmanager
def own_participants(
    tmp: Path, http: httpx.Client, *, workers: int = 1
) -> Iterator[dict[str, Participant]]:
    """envckpt's own servers as processes: model, agent, resources, resources@restart_only.

    With ``workers`` > 1 each server runs that many uvicorn workers.
    """
    token = f"conformance-{uuid.uuid4().hex}"
    processes = {
        name: start_sim(tmp, name, token, latency, mode, workers)
        for name, (latency, mode) in OWN_DEPLOYMENTS.items()
    }
    drivers: list[SimDriver] = []
    try:
        deployments: dict[str, dict[Kind, Participant]] = {}
        for name, process in processes.items():
            # Each of N workers imports the whole server: startup grows with N.
            urls: dict[str, str] = wait_ready(
                tmp / f"{name}.ready.json",
                process,
                seconds=READY_SECONDS * 2 * workers,
                log=tmp / f"{name}.log",
            )
            clients = {
                kind: ControlClient(urls[server], token, http)
                for kind, server in SIM_SERVERS.items()
            }
            driver = SimDriver(
                {kind: urls[server] for kind, server in SIM_SERVERS.items()}, clients
            )
            drivers.append(driver)
            deployments[name] = {
                kind: _described(kind.value, client, "envckpt", driver)
                for kind, client in clients.items()
            }
        fast, slow = deployments["fast"], deployments["slow"]
        participants = {}
        for kind, participant in fast.items():
            participant.slow = slow[kind]
            participants[kind.value] = participant
        restart = deployments["restart"][Kind.RESOURCES]
        restart.name = "resources@restart_only"
        participants[restart.name] = restart
        yield participants
    finally:
        for process in processes.values():
            stop(process, seconds=15)
        for driver in drivers:
            driver.close()


def external_participants(
    base_urls: list[str], token: str, profile: str, http: httpx.Client, *, sim_routes: bool
) -> dict[str, Participant]:
    """Participants given as ``KIND=URL`` (named KIND) or a bare URL (named ``urlN``).

    With ``sim_routes`` they also serve envckpt's simulated Gym data routes
    (one deployment: a model, an agent and a resources participant).
    """
    participants: dict[str, Participant] = {}
    for name, url in parse_base_urls(base_urls):
        participants[name] = _described(name, ControlClient(url, token, http), profile, None)
    if sim_routes:
        by_kind = {p.kind: p for p in participants.values()}
        driver = SimDriver(
            {k: p.client.base_url for k, p in by_kind.items()},
            {k: p.client for k, p in by_kind.items()},
        )
        for participant in participants.values():
            participant.driver = driver
    return participants


def parse_base_urls(base_urls: list[str]) -> list[tuple[str, str]]:
    """``[KIND=]URL`` entries as (name, url); a bare URL is named ``urlN``."""
    parsed = []
    for index, entry in enumerate(base_urls):
        head, sep, tail = entry.partition("=")
        named = sep and "://" not in head
        parsed.append((head, tail) if named else (f"url{index}", entry))
    names = [name for name, _ in parsed]
    if len(set(names)) != len(names):
        raise ValueError(f"--base-url names repeat: {names}")
    return parsed


def _described(
    name: str, client: ControlClient, profile: str, driver: SimDriver | None
) -> Participant:
    status = client.status()
    return Participant(
        name=name,
        kind=Kind(status["kind"]),
        # Older Gym builds omit mode: it reads as export_restore.
        mode=status.get("mode") or "export_restore",
        client=client,
        profile=profile,
        driver=driver,
        status=status,
    )
