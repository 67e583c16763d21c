"""uvicorn's h11 protocol with a deadline on reading each request, for the servers envckpt starts.

uvicorn times out an idle keep-alive connection (``timeout_keep_alive``) but
not a request that is still arriving: a client that opens a connection and
sends nothing, or trickles its headers or body, holds the connection (and
a buffered request) for as long as it likes. This protocol gives every
request ``read_seconds`` from the first byte (or from the connection's
opening) until it has been received whole; past that the connection is
closed, with a 408 envelope if no response was under way. Headers larger
than uvicorn's ``h11_max_incomplete_event_size`` and malformed requests get
a 400 envelope instead of uvicorn's plain text::

    config = uvicorn.Config(app, http=guarded_h11(read_seconds=30.0), ...)

The app-level body deadline (``bodies.read_body``) covers hosts that run
their own uvicorn; this one also covers headers, before any app code runs.
"""

from __future__ import annotations

import asyncio
import json
from http import HTTPStatus
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from envckpt import logs
from envckpt.protocol import ErrorCode, error_envelope

REQUEST_READ_SECONDS = 30.0
# Between requests the client's side of the connection is in one of these.
_RECEIVED = (h11.DONE, h11.MUST_CLOSE, h11.CLOSED, h11.ERROR)


def _envelope_bytes(detail: str) -> bytes:
    return json.dumps(error_envelope(ErrorCode.INVALID_REQUEST, detail)).encode()


class GuardedH11Protocol(H11Protocol):
    """``H11Protocol`` that closes a connection whose request takes too long to arrive."""

    read_seconds: float = REQUEST_READ_SECONDS
    _read_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_read_timer()

    def data_received(self, data: bytes) -> None:
        if self._read_timer is None and self.conn.their_state is h11.IDLE:
            self._arm_read_timer()  # the first byte of the next request on a kept-alive connection
        super().data_received(data)
        if self.conn.their_state in _RECEIVED:
            self._cancel_read_timer()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        # A pipelined request already buffered may have started arriving.
        if self.conn.their_state is h11.SEND_BODY and self._read_timer is None:
            self._arm_read_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_read_timer()
        super().connection_lost(exc)

    def _arm_read_timer(self) -> None:
        self._cancel_read_timer()
        self._read_timer = self.loop.call_later(self.read_seconds, self._read_timed_out)

    def _cancel_read_timer(self) -> None:
        if self._read_timer is not None:
            self._read_timer.cancel()
            self._read_timer = None

    def _read_timed_out(self) -> None:
        self._read_timer = None
        if self.transport.is_closing():
            return
        logs.get_logger("envckpt.http").warning(
            "request not received in time; closing the connection",
            client=None if self.client is None else self.client[0],
            seconds=self.read_seconds,
        )
        # No app is running for this connection: say why before closing.
        # (A running app sees the disconnect on its next receive.)
        if self.cycle is None or self.cycle.response_complete:
            self._send_envelope(408, f"the request did not arrive within {self.read_seconds:g} s")
        self.transport.close()

    def send_400_response(self, msg: str) -> None:
        self._send_envelope(400, msg)
        self.transport.close()

    def _send_envelope(self, status: int, detail: str) -> None:
        # Written raw: the request may never have parsed, so h11 has no cycle to answer.
        body = _envelope_bytes(detail)
        head = (
            f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\n"
            "content-type: application/json\r\n"
            f"content-length: {len(body)}\r\n"
            "connection: close\r\n\r\n"
        )
        self.transport.write(head.encode("ascii") + body)


def guarded_h11(*, read_seconds: float = REQUEST_READ_SECONDS) -> type[Any]:
    """The protocol class to pass as uvicorn's ``http``, with this read deadline."""
    if not read_seconds > 0:
        raise ValueError(f"read_seconds must be positive, got {read_seconds!r}")
    return type("GuardedH11Protocol", (GuardedH11Protocol,), {"read_seconds": read_seconds})
