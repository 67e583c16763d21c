"""Every control request waits at a gate until the explorer decides what happens to it.

``GatedTransport`` sits in front of one instance's ``InProcessTransport``:
each request becomes a ``Pending`` item the explorer sees, and it goes on
only when the explorer resolves it with one of

* ``deliver``: as sent (through the participant's control edge, JSON and all);
* a fault of ``envckpt.coordination.faults`` (``unreachable``, ``drop_reply``,
  ``error``, ``crash_before_publish`` on a commit: the write fails between
  records and manifest), armed for exactly this request;
* ``delayed``: the caller's connection drops at once and the request becomes
  a *late* item, which may arrive inside its deadline;
* ``slow``: the caller waits out its timeout (a timer the explorer ticks to)
  and fails; the request itself becomes a *late* item the explorer may
  deliver at any later point, past its deadline.

    gates = Gates()
    transport = GatedTransport(inner, gates=gates, clock=clock, instance="i0")
    item = gates.items[0]             # i0/agent/prepare, waiting
    gates.resolve(item, "deliver")
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from envckpt.coordination.inprocess import InProcessTransport
from envckpt.coordination.transport import ControlReply, TransportFailure

from helpers.participant_doubles import Sent, TransportDouble
from model_check.clock import ExplorerClock

DELIVER = "deliver"
SLOW = "slow"
# The caller's connection drops at once; the request still arrives later,
# possibly inside its deadline (a late prepare after its checkpoint ended).
DELAYED = "delayed"
LATE = "late"
# Faults the in-process transport injects itself, armed for one request.
ARMED_FAULTS = ("unreachable", "drop_reply", "error", "crash_before_publish")


@dataclass(eq=False)
class Pending:
    """One request (or a trainer or rollout step) waiting for the explorer."""

    seq: int
    label: str
    route: str
    deadline: float | None
    future: asyncio.Future[str]
    late: bool = False

    @property
    def key(self) -> str:
        return f"late {self.label}" if self.late else self.label


@dataclass
class Gates:
    """Everything currently waiting for the explorer, in arrival order."""

    items: list[Pending] = field(default_factory=list)
    _seq: itertools.count[int] = field(default_factory=itertools.count)

    def add(self, label: str, *, route: str = "", deadline: float | None = None) -> Pending:
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        item = Pending(next(self._seq), label, route, deadline, future)
        self.items.append(item)
        return item

    def find(self, key: str) -> Pending | None:
        """The oldest waiting item with ``key``."""
        for item in self.items:
            if item.key == key and not item.future.done():
                return item
        return None

    def resolve(self, item: Pending, decision: str) -> None:
        self.items.remove(item)
        item.future.set_result(decision)

    def close(self) -> None:
        """Drop every waiting item: their process is gone (a crash)."""
        self.items.clear()


class GatedTransport(TransportDouble):
    """``ControlTransport``: the inner in-process transport, one explorer decision per call."""

    def __init__(
        self,
        inner: InProcessTransport,
        *,
        gates: Gates,
        clock: ExplorerClock,
        instance: str,
        late_tasks: list[asyncio.Task[Any]],
        ungated: frozenset[str] = frozenset(),
    ) -> None:
        self.inner = inner
        self._gates = gates
        self._clock = clock
        self._instance = instance
        self._late_tasks = late_tasks
        self._ungated = ungated
        self.requests = 0

    def server_names(self) -> tuple[str, ...]:
        return self.inner.server_names()

    async def answer(self, sent: Sent) -> ControlReply:
        server, method, route, body = sent.server, sent.method, sent.route, sent.body
        timeout, connect_tries, authorization = sent.timeout, sent.connect_tries, sent.authorization
        self.requests += 1
        if route in self._ungated:
            return await self.inner.request(server, method, route, body, timeout=timeout)
        deadline = None if body is None else body.get("deadline_ts")
        item = self._gates.add(f"{self._instance}/{server}/{route}", route=route, deadline=deadline)
        decision = await item.future
        if decision == SLOW:
            # The caller gives up at its timeout; the request arrives later.
            await self._clock.until(self._clock.now() + timeout)
            late = self._gates.add(item.label, route=route, deadline=deadline)
            late.late = True
            self._late_tasks.append(asyncio.ensure_future(self._late(late, server, method, body)))
            raise TransportFailure(f"{server} {route}: no reply within {timeout:.1f} s")
        if decision == DELAYED:
            late = self._gates.add(item.label, route=route, deadline=deadline)
            late.late = True
            self._late_tasks.append(asyncio.ensure_future(self._late(late, server, method, body)))
            raise TransportFailure(f"{server} {route}: connection reset before the reply")
        armed = None
        if decision in ARMED_FAULTS:
            armed = self.inner.faults.add(decision, server=server, route=route, times=1)
        elif decision != DELIVER:
            raise AssertionError(f"unknown decision {decision!r}")
        try:
            return await self.inner.request(
                server,
                method,
                route,
                body,
                timeout=timeout,
                connect_tries=connect_tries,
                authorization=authorization,
            )
        finally:
            # A fault that did not fire (a refused commit never reaches its
            # write) must not linger for a later request.
            if armed is not None and armed in self.inner.faults.faults:
                self.inner.faults.faults.remove(armed)

    async def _late(
        self, item: Pending, server: str, method: str, body: Mapping[str, Any] | None
    ) -> None:
        await item.future
        # Past every fault: the late request simply arrives.
        await self.inner.request(server, method, item.route, body, timeout=0.0)
