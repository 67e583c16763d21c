"""One staging row as a model server posts it to the trainer: three strings, then handed on.

Both HTTP ends of the rows endpoint (``envckpt.sim.data_routes.rows_router`` and
``envckpt.nemo_gym.staging.staging_router``) parse the body their own way, then::

    staging_key = await receive_row(body, data_plane_put)   # ParticipantError if malformed
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from envckpt.errors import ParticipantError

ROW_FIELDS = ("capture_key", "staging_key", "payload")

# ``receive(capture_key, staging_key, payload)``: a plain function or a coroutine function.
RowReceiver = Callable[[str, str, str], "Awaitable[None] | None"]


async def receive_row(body: Any, receive: RowReceiver) -> str:
    """Hand the row ``body`` to ``receive``; its staging key. ``invalid_request`` if ``body``
    is not exactly the three string fields."""
    if not isinstance(body, dict) or set(body) != set(ROW_FIELDS):
        raise ParticipantError("invalid_request", f"a row has exactly {list(ROW_FIELDS)}")
    if not all(isinstance(body[name], str) for name in ROW_FIELDS):
        raise ParticipantError("invalid_request", "row fields must be strings")
    outcome = receive(body["capture_key"], body["staging_key"], body["payload"])
    if inspect.isawaitable(outcome):
        await outcome
    staging_key: str = body["staging_key"]
    return staging_key
