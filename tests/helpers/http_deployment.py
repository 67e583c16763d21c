"""Helpers for the HTTP tests: a JSON-dict state kind, participant apps and served deployments.

async with deploy({"policy": make_core("policy", "model"), ...}) as d:
    await d.turn("policy", "task-1")                 # one admitted turn
    participants = await d.coordinator.discover()
    reply = await d.post("policy", "prepare", {...})  # a raw ControlReply
"""

from __future__ import annotations

import asyncio
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from envckpt.coordination.coordinator import Coordinator
from envckpt.coordination.transport import ControlReply
from envckpt.episodes import EnvironmentEpisode
from envckpt.errors import ParticipantError
from envckpt.http.client import HttpTransport
from envckpt.http.routes import mount_participant
from envckpt.http.serve import serve_many
from envckpt.participant.core import ParticipantCore
from envckpt.participant.hooks import NoState, StateHooks
from envckpt.protocol import CHECKPOINT_ROUTE_PREFIX

from helpers.participant_doubles import JsonStateHooks

TOKEN = "tok-3f9a1c7e5b2d4680"
TURN_ROUTE = "/test/turn"


class DictState(JsonStateHooks):
    """A participant kind holding one JSON object per episode, with failures on demand.

    ``fail`` names hooks that raise ``RuntimeError`` (``close_admission``,
    ``export``, ``retire``); a saved state must carry an integer ``turns``.
    """

    turn_key = "turns"

    def __init__(self) -> None:
        super().__init__()
        self.fail: set[str] = set()

    async def close_admission(self) -> None:
        self._maybe_fail("close_admission")

    def export(
        self, scope: frozenset[EnvironmentEpisode]
    ) -> Iterator[tuple[EnvironmentEpisode, dict[str, Any]]]:
        self._maybe_fail("export")
        return super().export(scope)

    async def retire(self, episodes: tuple[EnvironmentEpisode, ...]) -> None:
        self._maybe_fail("retire")
        await super().retire(episodes)

    def _maybe_fail(self, hook: str) -> None:
        if hook in self.fail:
            raise RuntimeError(f"injected failure in {hook}")


def make_core(
    server_name: str,
    kind: str,
    *,
    hooks: StateHooks | None = None,
    mode: str = "export_restore",
    instance: str | None = None,
    lease_grace: float = 600.0,
) -> ParticipantCore:
    """A participant core with ``DictState`` hooks unless told otherwise."""
    return ParticipantCore(
        server_name=server_name,
        kind=kind,
        hooks=hooks if hooks is not None else DictState(),
        mode=mode,
        instance=instance,
        lease_grace=lease_grace,
    )


def participant_app(core: ParticipantCore, *, token: str = TOKEN, **mount_options: Any) -> FastAPI:
    """A FastAPI app with ``core``'s control routes and a test-only episode route.

    ``POST /test/turn`` with ``{"rollout_id", "attempt"}`` runs one admitted
    turn (``DictState`` counts it; ``NoState`` records the episode as live);
    without ``rollout_id`` the core is asked to admit ``None``. Refusals come
    back in the protocol envelope.
    """
    app = FastAPI()
    if not mount_options.get("unconfined"):
        # Tests write their checkpoints under pytest's temporary directories.
        mount_options.setdefault("checkpoint_root", tempfile.gettempdir())
    mount_participant(app, core, token=token, **mount_options)
    app.state.gate = asyncio.Event()
    app.state.gate.set()

    @app.post(TURN_ROUTE)
    async def turn(request: Request) -> JSONResponse:
        payload = await request.json()
        episode = None
        if "rollout_id" in payload:
            episode = EnvironmentEpisode(payload["rollout_id"], payload.get("attempt", 0))
        try:
            async with core.admit(episode):
                assert episode is not None
                await app.state.gate.wait()  # a test holds turns in flight by clearing it
                hooks = core.hooks
                if isinstance(hooks, DictState):
                    state = hooks.states.setdefault(episode, {"turns": 0})
                    state["turns"] += 1
                elif isinstance(hooks, NoState):
                    hooks.live.add(episode)
        except ParticipantError as error:
            return JSONResponse(status_code=error.status, content=error.to_wire())
        return JSONResponse({"admitted": episode.capture_key})

    return app


def deadline(seconds: float = 30.0) -> float:
    """An absolute deadline ``seconds`` from now."""
    return time.time() + seconds


def new_id(prefix: str = "ckpt") -> str:
    """A checkpoint id never used before."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def ep(rollout_id: str, attempt: int = 0) -> EnvironmentEpisode:
    return EnvironmentEpisode(rollout_id, attempt)


@dataclass
class Deployment:
    """Served participant apps, one transport and coordinator over them."""

    cores: dict[str, ParticipantCore]
    apps: dict[str, FastAPI]
    urls: dict[str, str]
    transport: HttpTransport
    coordinator: Coordinator
    raw: httpx.AsyncClient
    token: str = TOKEN
    extra: dict[str, Any] = field(default_factory=dict)

    def hooks(self, server: str) -> DictState:
        hooks = self.cores[server].hooks
        assert isinstance(hooks, DictState)
        return hooks

    async def get(self, server: str, route: str, *, timeout: float = 10.0) -> ControlReply:
        return await self.transport.request(server, "GET", route, None, timeout=timeout)

    async def post(
        self, server: str, route: str, body: Mapping[str, Any], *, timeout: float = 10.0
    ) -> ControlReply:
        return await self.transport.request(server, "POST", route, body, timeout=timeout)

    async def status(self, server: str) -> dict[str, Any]:
        reply = await self.get(server, "status")
        assert reply.status == 200, reply.describe()
        assert isinstance(reply.body, dict)
        return reply.body

    async def phase(self, server: str) -> str:
        return str((await self.status(server))["phase"])

    async def send(
        self,
        server: str,
        method: str,
        route: str,
        *,
        content: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        authorized: bool = True,
    ) -> httpx.Response:
        """A raw request to a control route: exact bytes and headers."""
        all_headers = {"Content-Type": "application/json"}
        if authorized:
            all_headers["Authorization"] = f"Bearer {self.token}"
        all_headers.update(headers or {})
        return await self.raw.request(
            method,
            f"{self.urls[server]}{CHECKPOINT_ROUTE_PREFIX}/{route}",
            content=content,
            headers=all_headers,
        )

    async def turn(
        self, server: str, rollout_id: str | None = None, attempt: int = 0
    ) -> httpx.Response:
        payload: dict[str, Any] = {}
        if rollout_id is not None:
            payload = {"rollout_id": rollout_id, "attempt": attempt}
        return await self.raw.post(f"{self.urls[server]}{TURN_ROUTE}", json=payload)


def trio(*, instance_suffix: str = "") -> dict[str, ParticipantCore]:
    """One Gym instance's participants: policy model, agent, resources."""
    return {
        "policy": make_core("policy", "model", instance=f"policy{instance_suffix}"),
        "agent": make_core("agent", "agent", instance=f"agent{instance_suffix}"),
        "resources": make_core("resources", "resources", instance=f"resources{instance_suffix}"),
    }


@asynccontextmanager
async def deploy(
    cores: Mapping[str, ParticipantCore],
    *,
    others: Mapping[str, FastAPI] | None = None,
    token: str = TOKEN,
    transport_token: str | None = None,
    **mount_options: Any,
) -> AsyncIterator[Deployment]:
    """Serve each core on its own app (plus ``others`` as they are); yield the deployment."""
    apps = {
        name: participant_app(core, token=token, **mount_options) for name, core in cores.items()
    }
    served: dict[str, Any] = {**apps, **(others or {})}
    names = list(served)
    async with serve_many([served[name] for name in names]) as url_list:
        urls = dict(zip(names, url_list, strict=True))
        async with (
            HttpTransport(urls, token=transport_token or token) as transport,
            httpx.AsyncClient(timeout=30.0) as raw,
        ):
            yield Deployment(
                cores=dict(cores),
                apps=apps,
                urls=urls,
                transport=transport,
                coordinator=Coordinator(transport),
                raw=raw,
                token=token,
            )
