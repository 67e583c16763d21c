"""How a coordinator reaches participants: one request, one reply.

A transport only moves bytes; it never interprets a reply. The coordinator
(``coordinator.py``) turns statuses and bodies into results and failures, so
the in-process transport and the HTTP transport are judged by the same code.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from envckpt.errors import EnvckptError


@dataclass(frozen=True, slots=True)
class ControlReply:
    """An HTTP status and the reply body: parsed JSON, or the raw text if not JSON."""

    status: int
    body: Any
    raw: str = ""

    def describe(self) -> str:
        """The failure text protocol.md asks for.

        The envelope's code and detail when present, else ``HTTP <status>``
        and the first 200 bytes (Gym answers FastAPI's default 422 and plain
        text 500s without the envelope).
        """
        error = self.body.get("error") if isinstance(self.body, Mapping) else None
        if isinstance(error, Mapping) and "code" in error:
            return f"{error.get('code')}: {error.get('detail', '')}"
        text = self.raw if self.raw else json.dumps(self.body, default=str)
        return f"HTTP {self.status} {text.encode()[:200].decode(errors='replace')}"

    @property
    def error_code(self) -> str | None:
        error = self.body.get("error") if isinstance(self.body, Mapping) else None
        if isinstance(error, Mapping) and isinstance(error.get("code"), str):
            return str(error["code"])
        return None


class TransportFailure(EnvckptError):
    """The request did not produce a reply: refused, reset, or timed out."""


class ControlTransport(Protocol):
    """Carries control requests to the servers of one deployment."""

    def server_names(self) -> tuple[str, ...]:
        """Every configured server, participant or not."""
        ...

    async def request(
        self,
        server: str,
        method: str,
        route: str,
        body: Mapping[str, Any] | None,
        *,
        timeout: float,
        connect_tries: int = 1,
    ) -> ControlReply:
        """Send one control request; raise ``TransportFailure`` if no reply came.

        ``connect_tries`` bounds retries of connection errors only: a request
        that reached the server is never sent twice by the transport.
        """
        ...
