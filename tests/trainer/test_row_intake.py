"""A posted staging row: exactly three strings, handed to a plain or a coroutine receiver."""

from __future__ import annotations

from typing import Any

import pytest

from envckpt.errors import ParticipantError
from envckpt.trainer.row_intake import ROW_FIELDS, receive_row

ROW = {"capture_key": "r1#0", "staging_key": "r1#0/t1", "payload": "tokens"}


async def test_a_row_reaches_a_plain_and_a_coroutine_receiver() -> None:
    """Either kind of receiver gets the fields in order; the answer is the staging key."""
    received: list[tuple[str, str, str]] = []

    def plain(capture_key: str, staging_key: str, payload: str) -> None:
        received.append((capture_key, staging_key, payload))

    async def awaited(capture_key: str, staging_key: str, payload: str) -> None:
        received.append((capture_key, staging_key, payload))

    assert await receive_row(dict(ROW), plain) == "r1#0/t1"
    assert await receive_row(dict(ROW), awaited) == "r1#0/t1"
    assert received == [("r1#0", "r1#0/t1", "tokens")] * 2


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (["r1#0", "r1#0/t1", "tokens"], f"a row has exactly {list(ROW_FIELDS)}"),
        ({"capture_key": "r1#0", "staging_key": "r1#0/t1"}, "a row has exactly"),
        ({**ROW, "extra": "x"}, "a row has exactly"),
        ({**ROW, "payload": b"tokens"}, "row fields must be strings"),
        ({**ROW, "staging_key": 7}, "row fields must be strings"),
    ],
)
async def test_a_malformed_row_is_refused_before_the_receiver(body: Any, message: str) -> None:
    """Not exactly the three string fields: invalid_request, and the receiver is never called."""
    called: list[object] = []
    with pytest.raises(ParticipantError) as refused:
        await receive_row(body, lambda *row: called.append(row))
    assert refused.value.code == "invalid_request" and message in refused.value.message
    assert called == []
