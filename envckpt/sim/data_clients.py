"""Data-plane clients over HTTP: how the agent reaches the model and the tool, and more.

Each client owns its own ``JsonClient`` (envckpt's h11 client, the control
plane's stack; rollout traffic never shares the control plane's pool). An
error reply in the protocol envelope is raised as the same
``ParticipantError(code, detail)`` the server raised, so the agent parks on
``admission_closed`` and stops on ``stale_attempt`` exactly as in process;
any other error reply becomes ``checkpoint_error`` with ``HTTP <status>
<first 200 bytes>``. A call that gets no reply at all (refused connection,
dropped connection, timeout, a reply that is not HTTP) raises
``DataPlaneUnavailable``.
Nothing is retried: a data call may have reached the server::

    agent = AgentServer(model=HttpModelClient(model_url), tools=HttpToolClient(tool_url))
    result = await HttpAgentClient(agent_url).run(episode, task, timeout=600)   # trainer side

    sink = HttpStagingSink("http://trainer:9000/rows", token)   # token rows -> trainer
    model = PolicyModelServer(seed=7, staging_sink=sink)
    model = PolicyModelServer(seed=7, staging_sink=CallbackStagingSink(rows.__setitem__))
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from envckpt.episodes import EnvironmentEpisode
from envckpt.errors import error_from_reply
from envckpt.http.client import checked_base_url
from envckpt.http.closing import AsyncCloseable
from envckpt.http.connections import BadReply, ConnectFailed, ServerDisconnected
from envckpt.http.json_client import JsonClient

DEFAULT_CALL_TIMEOUT = 600.0
# A whole rollout, parked through snapshots included.
DEFAULT_RUN_TIMEOUT = 3600.0
DEFAULT_CONNECT_TIMEOUT = 10.0
DEFAULT_MAX_CONNECTIONS = 256
# An idle pooled connection is dropped after this long: below the keep-alive
# of the servers envckpt starts (30 s, ``http.serve.SERVER_KEEP_ALIVE_SECONDS``),
# so a call is never sent on a connection the server is closing (nothing here
# is retried: a data call may have reached the server).
DEFAULT_KEEPALIVE_SECONDS = 4.0


class DataPlaneUnavailable(ConnectionError):
    """A data-plane call got no reply: the server is down, dropped it, or was too slow."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"POST {url}: {reason}")
        self.url = url
        self.reason = reason

    def __reduce__(self) -> tuple[type[DataPlaneUnavailable], tuple[str, str]]:
        return (type(self), (self.url, self.reason))


class _JsonPoster(AsyncCloseable):
    """POST a JSON object, get a JSON object back; errors raised as described above."""

    def __init__(
        self,
        *,
        timeout: float,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        if timeout <= 0 or connect_timeout <= 0:
            raise ValueError("timeouts must be positive")
        self._timeout = timeout
        self._client = JsonClient(
            headers=headers,
            max_connections=max_connections,
            connect_timeout=connect_timeout,
            keepalive_seconds=DEFAULT_KEEPALIVE_SECONDS,
        )

    async def _post(
        self, url: str, body: Mapping[str, Any], *, timeout: float | None = None
    ) -> dict[str, Any]:
        budget = self._timeout if timeout is None else timeout
        if budget <= 0:
            raise ValueError("timeout must be positive")
        try:
            response = await self._client.post(url, body, timeout=budget)
            reply = response.json() if response.ok else None
        except ConnectFailed as error:
            raise DataPlaneUnavailable(url, f"cannot connect ({error})") from error
        except TimeoutError as error:
            raise DataPlaneUnavailable(url, f"no reply within {budget:g} s") from error
        except (ServerDisconnected, BadReply) as error:
            raise DataPlaneUnavailable(url, f"{type(error).__name__}: {error}") from error
        if not response.ok:
            raise error_from_reply(response.status, response.text)
        if not isinstance(reply, dict):
            raise error_from_reply(response.status, f"not a JSON object: {response.text}")
        return reply

    async def aclose(self) -> None:
        await self._client.aclose()


class _ServerClient(_JsonPoster):
    def __init__(
        self, base_url: str, *, timeout: float = DEFAULT_CALL_TIMEOUT, **options: Any
    ) -> None:
        self.base_url = checked_base_url(base_url, "base URL")
        super().__init__(timeout=timeout, **options)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.base_url!r})"

    async def _call(
        self, route: str, body: Mapping[str, Any], *, timeout: float | None = None
    ) -> dict[str, Any]:
        return await self._post(f"{self.base_url}/{route}", body, timeout=timeout)


class HttpModelClient(_ServerClient):
    """The agent's ``ModelClient`` to a policy model's ``/generate`` and ``/finish``."""

    async def generate(self, request: dict[str, Any]) -> dict[str, Any]:
        return await self._call("generate", request)

    async def finish(self, request: dict[str, Any]) -> dict[str, Any]:
        return await self._call("finish", request)


class HttpToolClient(_ServerClient):
    """The agent's ``ToolClient`` to a tool server's ``/call`` and ``/finish``."""

    async def call(self, request: dict[str, Any]) -> dict[str, Any]:
        return await self._call("call", request)

    async def finish(self, request: dict[str, Any]) -> dict[str, Any]:
        return await self._call("finish", request)


class HttpAgentClient(_ServerClient):
    """The trainer's client to an agent's ``/run``."""

    def __init__(self, base_url: str, *, timeout: float = DEFAULT_RUN_TIMEOUT, **options: Any):
        super().__init__(base_url, timeout=timeout, **options)

    async def run(
        self,
        episode: EnvironmentEpisode,
        task: Mapping[str, Any],
        *,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """Run (or continue) one rollout attempt to its end; the agent's result."""
        return await self._call(
            "run", {"episode": episode.to_wire(), "task": dict(task)}, timeout=timeout
        )


class HttpStagingSink(_JsonPoster):
    """A model's ``StagingSink`` POSTing each row to a trainer endpoint, with a bearer token.

    The endpoint receives ``{capture_key, staging_key, payload}`` (see
    ``envckpt.sim.data_routes.rows_router``) and answers any 2xx JSON object.
    """

    def __init__(
        self, url: str, token: str, *, timeout: float = DEFAULT_CALL_TIMEOUT, **options: Any
    ) -> None:
        if not isinstance(token, str) or not token:
            raise ValueError("HttpStagingSink needs a non-empty bearer token")
        self.url = checked_base_url(url, "rows URL")
        super().__init__(timeout=timeout, headers={"Authorization": f"Bearer {token}"}, **options)

    def __repr__(self) -> str:  # the token stays out of reprs and logs
        return f"HttpStagingSink({self.url!r})"

    async def stage(self, capture_key: str, staging_key: str, payload: str) -> None:
        await self._post(
            self.url,
            {"capture_key": capture_key, "staging_key": staging_key, "payload": payload},
        )


RowCallback = Callable[[str, str, str], "Awaitable[None] | None"]


class CallbackStagingSink:
    """A ``StagingSink`` in this process: ``fn(capture_key, staging_key, payload)``.

    ``fn`` may be a plain function or a coroutine function.
    """

    def __init__(self, fn: RowCallback) -> None:
        self._fn = fn

    async def stage(self, capture_key: str, staging_key: str, payload: str) -> None:
        outcome = self._fn(capture_key, staging_key, payload)
        if inspect.isawaitable(outcome):
            await outcome
