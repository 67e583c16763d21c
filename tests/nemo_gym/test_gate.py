"""Tests of the protocol envelope on nemo-gym data routes."""

from __future__ import annotations

import json

from envckpt.errors import ParticipantError, error_from_reply
from envckpt.nemo_gym.gate import envelope_response, is_envelope


def test_envelope_round_trip() -> None:
    """A refusal answered with the envelope comes back as the same error."""
    response = envelope_response(ParticipantError("admission_closed", "checkpoint c1 is open"))
    assert response.status_code == 409
    text = bytes(response.body).decode()
    assert is_envelope(text)
    error = error_from_reply(409, text)
    assert (error.code, error.detail) == ("admission_closed", "checkpoint c1 is open")


def test_other_error_replies() -> None:
    """A reply without the envelope is checkpoint_error with the status and an excerpt."""
    for text in (
        "Internal Server Error",
        json.dumps({"detail": []}),
        json.dumps({"error": {"code": "nope"}}),
    ):
        assert not is_envelope(text)
        error = error_from_reply(500, text * 100)
        assert error.code == "checkpoint_error"
        assert error.detail.startswith("HTTP 500 ")
        assert len(error.detail) <= len("HTTP 500 ") + 200
