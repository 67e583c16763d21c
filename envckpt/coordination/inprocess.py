"""The in-process transport: control requests as direct calls to participant cores.

Bodies are round-tripped through JSON and go through the same control edge
(``participant/edge.py``) as HTTP (auth, validation, error envelope), so the in-process deployment
behaves like the real one, minus sockets. Faults from a ``FaultPlan`` are
applied here.

    transport = InProcessTransport({"policy": core, "judge": None}, token="t")
    coordinator = Coordinator(transport)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import orjson

from envckpt.coordination.faults import FaultPlan
from envckpt.coordination.transport import ControlReply, TransportFailure
from envckpt.participant import edge, store
from envckpt.participant.core import ParticipantCore

# (core, method, route, body) -> (status, reply body), for a non-default delivery.
Deliver = Callable[
    [ParticipantCore, str, str, Mapping[str, Any] | None], Awaitable[tuple[int, dict[str, Any]]]
]


class SimulatedCrash(Exception):
    """A participant 'crashed' at an injected point."""


class InProcessTransport:
    """``ControlTransport`` over participant cores living in this process.

    A server mapped to ``None`` has no control routes (answers 404), like an
    auxiliary judge model.
    """

    def __init__(
        self,
        servers: Mapping[str, ParticipantCore | None],
        *,
        token: str,
        faults: FaultPlan | None = None,
        deliver: Deliver | None = None,
    ) -> None:
        self._servers = dict(servers)
        self._token = edge.check_token(token)
        self._authorization = f"Bearer {self._token}"
        self.faults = faults if faults is not None else FaultPlan()
        self.requests = 0
        # How a request reaches a participant: directly through its control
        # edge by default; a test can route it over real HTTP instead and keep
        # the same faults.
        self._deliver_to = deliver

    def server_names(self) -> tuple[str, ...]:
        return tuple(sorted(self._servers))

    def core(self, server: str) -> ParticipantCore:
        core = self._servers[server]
        if core is None:
            raise KeyError(f"{server} is not a participant")
        return core

    def _fault(self, server: str, route: str, kind: str) -> bool:
        """Whether a ``kind`` fault fires on this request (the plan is read each time)."""
        faults = self.faults
        return bool(faults.faults) and faults.take(server, route, kind) is not None

    async def _deliver(
        self,
        core: ParticipantCore,
        method: str,
        route: str,
        body: Mapping[str, Any] | None,
        authorization: str | None,
    ) -> tuple[int, dict[str, Any]]:
        """The request as the participant's edge sees it: JSON in, through the edge."""
        if self._deliver_to is not None:
            return await self._deliver_to(core, method, route, body)
        # As over HTTP, the participant's parsed copy is held only by the
        # edge, which lets it go once the request is validated.
        return await edge.handle(
            core,
            method,
            route,
            None if body is None else through_json(body),
            authorization=authorization or self._authorization,
            token=self._token,
        )

    async def request(
        self,
        server: str,
        method: str,
        route: str,
        body: Mapping[str, Any] | None,
        *,
        timeout: float,
        connect_tries: int = 1,
        authorization: str | None = None,
    ) -> ControlReply:
        self.requests += 1
        if server not in self._servers:
            raise TransportFailure(f"no server named {server!r} (connection refused)")
        core = self._servers[server]
        if not self.faults.faults:
            # No fault planned (every request of a scale run or a demo): the
            # plain delivery, without asking the plan four times.
            if core is None:
                return ControlReply(404, {"detail": "Not Found"})
            status, reply = await self._deliver(core, method, route, body, authorization)
            if self.faults.faults:  # planned while this request was being delivered
                self._after_delivery(server, core, route, body, status, timeout=timeout)
            return ControlReply(status, through_json(reply))
        return await self._request_with_faults(
            server, core, method, route, body, timeout=timeout, authorization=authorization
        )

    async def _request_with_faults(
        self,
        server: str,
        core: ParticipantCore | None,
        method: str,
        route: str,
        body: Mapping[str, Any] | None,
        *,
        timeout: float,
        authorization: str | None,
    ) -> ControlReply:
        if self._fault(server, route, "unreachable"):
            raise TransportFailure(f"{server} unreachable (connection refused)")
        if core is None:
            return ControlReply(404, {"detail": "Not Found"})
        if self._fault(server, route, "error"):
            return ControlReply(500, None, raw="Internal Server Error")
        if self._fault(server, route, "slow"):
            # The participant is too slow: the caller gives up at its timeout,
            # and the request still arrives, late, past its own deadline.
            await core.clock.wait_for_event(asyncio.Event(), core.clock.now() + timeout)
            late = asyncio.ensure_future(self._deliver(core, method, route, body, authorization))
            late.add_done_callback(_ignore_outcome)
            raise TransportFailure(f"{server} {route}: no reply within {timeout:.1f} s")
        crash = None
        if route == "commit" and self._fault(server, route, "crash_before_publish"):
            crash = _crash_once(core)
            core.before_publish.append(crash)
        status, reply = await self._deliver(core, method, route, body, authorization)
        if crash is not None and crash in core.before_publish and not _still_writing(reply):
            # This commit started no write (refused, or a replay of a finished
            # one): the crash must not linger and hit some later commit.
            core.before_publish.remove(crash)
        self._after_delivery(server, core, route, body, status, timeout=timeout)
        return ControlReply(status, through_json(reply))

    def _after_delivery(
        self,
        server: str,
        core: ParticipantCore,
        route: str,
        body: Mapping[str, Any] | None,
        status: int,
        *,
        timeout: float,
    ) -> None:
        """The faults that strike once the participant has answered."""
        if self._fault(server, route, "drop_reply"):
            raise TransportFailure(f"{server} {route}: no reply within {timeout:.1f} s")
        if status == 200 and route == "commit" and self._fault(server, route, "corrupt_records"):
            checkpoint_dir = str((body or {})["checkpoint_dir"])
            manifest = store.read_manifest(checkpoint_dir, kind=core.kind, instance=core.instance)
            corrupt_records_file(store.records_path(checkpoint_dir, manifest))


def through_json(value: Any) -> Any:
    """``value`` after a trip through JSON, exactly as ``json.loads(json.dumps(value))``.

    orjson makes the trip in a third of the time; where its result could
    differ (NaN, which it writes as null; tuples; what it refuses to write)
    the result is not equal to ``value``, and the standard library decides.
    """
    try:
        trip = orjson.loads(orjson.dumps(value))
    except TypeError:
        trip = _DIFFERS
    if trip == value:
        return trip
    return json.loads(json.dumps(value))


_DIFFERS = object()


def _still_writing(reply: Mapping[str, Any]) -> bool:
    error = reply.get("error")
    return isinstance(error, Mapping) and error.get("code") == "deadline_exceeded"


def _ignore_outcome(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()


def _crash_once(core: ParticipantCore) -> Any:
    def crash() -> None:
        with contextlib.suppress(ValueError):
            core.before_publish.remove(crash)
        raise SimulatedCrash(f"{core.server_name} crashed between records and manifest")

    return crash


def corrupt_records_file(path: Path) -> None:
    """Flip one byte in the middle of a records file (or append one if it is empty)."""
    data = bytearray(path.read_bytes())
    if not data:
        path.write_bytes(b"x")
        return
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
