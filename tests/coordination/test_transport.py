"""Tests for envckpt.coordination.transport: ControlReply's failure text and error code."""

from __future__ import annotations

import json
import pickle
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envckpt.coordination.transport import ControlReply, TransportFailure
from envckpt.errors import EnvckptError
from envckpt.protocol import error_envelope

from helpers.examples import examples


def test_an_envelope_reply_is_described_by_its_code_and_detail() -> None:
    """The protocol's envelope gives ``code: detail`` and its code."""
    reply = ControlReply(409, error_envelope("stale_attempt", "r-a1 is retired"))
    assert reply.describe() == "stale_attempt: r-a1 is retired"
    assert reply.error_code == "stale_attempt"


def test_an_envelope_without_a_detail_is_described_by_its_code() -> None:
    """A detail is optional in the text; the code alone still names the failure."""
    reply = ControlReply(409, {"error": {"code": "invalid_phase"}})
    assert reply.describe() == "invalid_phase: "
    assert reply.error_code == "invalid_phase"


def test_fastapis_default_422_is_described_by_status_and_body() -> None:
    """A validation reply without the envelope gives ``HTTP 422`` and the JSON body; no code."""
    body = {"detail": [{"loc": ["body", "stop"], "msg": "Extra inputs are not permitted"}]}
    reply = ControlReply(422, body)
    assert reply.describe() == f"HTTP 422 {json.dumps(body)}"
    assert reply.error_code is None


def test_a_plain_text_500_is_described_by_its_raw_text() -> None:
    """Gym's bare 500 page: no JSON body, the raw text is the description."""
    reply = ControlReply(500, None, raw="Internal Server Error")
    assert reply.describe() == "HTTP 500 Internal Server Error"
    assert reply.error_code is None


@pytest.mark.parametrize(
    "body",
    [
        {"error": "boom"},  # error is not an object
        {"error": {"detail": "no code"}},  # no code
        ["error", {"code": "stale_attempt"}],  # not an object at all
    ],
)
def test_a_body_that_only_looks_like_an_envelope_has_no_code(body: Any) -> None:
    """Without ``error.code`` the reply is described by status and body, and has no code."""
    reply = ControlReply(409, body)
    assert reply.describe().startswith("HTTP 409 ")
    assert reply.error_code is None


def test_a_code_that_is_not_a_string_is_no_error_code() -> None:
    """error_code only reports string codes; the text still shows what came."""
    reply = ControlReply(409, {"error": {"code": 7, "detail": "odd"}})
    assert reply.error_code is None
    assert reply.describe() == "7: odd"


def test_the_description_keeps_only_the_first_200_bytes() -> None:
    """A long page is cut at 200 bytes; a character cut in half is replaced, not an error."""
    reply = ControlReply(502, None, raw="é" * 150)  # 300 bytes
    text = reply.describe().removeprefix("HTTP 502 ")
    assert text == "é" * 100
    odd = ControlReply(502, None, raw="x" + "é" * 150).describe().removeprefix("HTTP 502 ")
    assert odd == "x" + "é" * 99 + "\ufffd"


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=20,
)


@settings(max_examples=examples(200), deadline=None)
@given(status=st.integers(100, 599), body=json_values, raw=st.text(max_size=300))
def test_a_non_envelope_reply_is_described_by_status_and_at_most_200_bytes(
    status: int, body: Any, raw: str
) -> None:
    """Any reply without an envelope reads ``HTTP <status> `` plus a prefix of its text."""
    if isinstance(body, dict) and isinstance(body.get("error"), dict) and "code" in body["error"]:
        body = {"wrapped": body}
    reply = ControlReply(status, body, raw=raw)
    described = reply.describe()
    prefix = f"HTTP {status} "
    assert described.startswith(prefix)
    text = described[len(prefix) :]
    source = raw if raw else json.dumps(body, default=str)
    # A character cut at byte 200 (1 to 3 of its bytes kept) becomes one U+FFFD (3 bytes).
    assert len(text.encode()) <= 202
    kept = text.removesuffix("\ufffd")
    assert source.startswith(kept)
    assert reply.error_code is None


def test_a_transport_failure_is_an_envckpt_error_that_pickles() -> None:
    """TransportFailure crosses process boundaries with its message."""
    error = TransportFailure("policy unreachable (connection refused)")
    assert isinstance(error, EnvckptError)
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is TransportFailure and str(copy) == str(error)
