"""A minimal keep-alive HTTP/1.1 client, and the snapshot cycle it drives: no envckpt code.

The floor's client (and the yardstick for envckpt's coordinator): one
persistent connection per server, requests written as one buffer, replies
read by ``Content-Length``, bodies encoded once per fan-out with orjson,
replies parsed with orjson and checked for the phase the protocol promises::

    client = RawClient(urls, token=token)         # server name -> base URL
    await raw_cycle(client, checkpoint_id=cid, checkpoint_dir=d, rollout_ids=ids,
                    deadline_ts=time.time() + 60)
    await client.aclose()

The cycle is the protocol's (protocol.md section 5): prepare stage by stage
(model, agent, resources), commit to everyone at once, resume in reverse.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

import orjson

PREFIX = "/ng-control/v1/checkpoint"
# An idle connection is dropped after this long: envckpt's control client's
# policy (``http.client.DEFAULT_KEEPALIVE_SECONDS``), below the bench servers'
# 30 s keep-alive (nemo-gym's).
IDLE_SECONDS = 25.0
# Prepare order by server name; resume runs it backwards.
STAGE_ORDER: tuple[str, ...] = ("policy", "agent", "resources")


class RawConnection:
    """One persistent HTTP/1.1 connection to one server; one request at a time."""

    def __init__(self, base_url: str, *, token: str) -> None:
        parts = urlsplit(base_url)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 80
        self._fixed = (
            f"Host: {self.host}:{self.port}\r\n"
            f"Authorization: Bearer {token}\r\n"
            "Content-Type: application/json\r\n"
        ).encode()
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._lock = asyncio.Lock()
        self._last_used = 0.0

    async def request(self, method: str, path: str, body: bytes | None) -> tuple[int, bytes]:
        """Send one request on the kept-alive connection; return status and body."""
        payload = body or b""
        message = (
            f"{method} {path} HTTP/1.1\r\n".encode()
            + self._fixed
            + f"Content-Length: {len(payload)}\r\n\r\n".encode()
            + payload
        )
        async with self._lock:
            # Like any keep-alive client: drop a connection idle long enough for
            # the server (here: 30 s) to close it soon, and resend once if a
            # reused one turns out closed before any reply byte.
            if time.monotonic() - self._last_used > IDLE_SECONDS:
                await self._close()
            reused = self._writer is not None
            try:
                reply = await self._exchange(message)
            except (asyncio.IncompleteReadError, ConnectionError):
                if not reused:
                    raise
                await self._close()
                reply = await self._exchange(message)
            self._last_used = time.monotonic()
            return reply

    async def _exchange(self, message: bytes) -> tuple[int, bytes]:
        if self._writer is None:
            self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
        assert self._reader is not None
        self._writer.write(message)
        head = await self._reader.readuntil(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        status = int(lines[0].split(b" ", 2)[1])
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        return status, await self._reader.readexactly(length)

    async def _close(self) -> None:
        writer, self._writer, self._reader = self._writer, None, None
        if writer is not None:
            writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await writer.wait_closed()

    async def aclose(self) -> None:
        await self._close()


class RawClient:
    """One ``RawConnection`` per server of one Gym instance."""

    # What frames each server's requests (bench/h11_floor.py gives another).
    connection_class: type[RawConnection] = RawConnection

    def __init__(self, urls: Mapping[str, str], *, token: str) -> None:
        self.connections = {
            name: self.connection_class(url, token=token) for name, url in urls.items()
        }

    async def post(self, server: str, route: str, body: bytes, *, expect_phase: str) -> Any:
        status, raw = await self.connections[server].request("POST", f"{PREFIX}/{route}", body)
        reply = orjson.loads(raw)
        if status != 200 or reply.get("phase") != expect_phase:
            raise RuntimeError(f"{server} {route}: HTTP {status} {raw[:200]!r}")
        return reply

    async def aclose(self) -> None:
        await asyncio.gather(*(c.aclose() for c in self.connections.values()))


async def raw_cycle(
    client: RawClient,
    *,
    checkpoint_id: str,
    checkpoint_dir: str,
    rollout_ids: Sequence[str],
    deadline_ts: float,
) -> None:
    """Prepare (staged), commit (all at once), resume (reverse): one snapshot's round trips."""
    # The same fields in the same order as envckpt's coordinator sends them.
    control = orjson.dumps({"checkpoint_id": checkpoint_id, "deadline_ts": deadline_ts})
    for server in STAGE_ORDER:
        await client.post(server, "prepare", control, expect_phase="prepared")
    commit = orjson.dumps(
        {
            "checkpoint_id": checkpoint_id,
            "deadline_ts": deadline_ts,
            "checkpoint_dir": checkpoint_dir,
            "episode_ids": [{"rollout_id": rid, "attempt": 0} for rid in rollout_ids],
        }
    )
    await asyncio.gather(
        *(client.post(s, "commit", commit, expect_phase="committed") for s in STAGE_ORDER)
    )
    for server in reversed(STAGE_ORDER):
        await client.post(server, "resume", control, expect_phase="idle")
