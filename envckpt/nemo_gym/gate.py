"""The protocol's error envelope on nemo-gym data routes, both ways.

A gate that refuses a rollout request answers like a participant's control
route does, ``{"error": {"code", "detail"}}`` with the code's status, and a
caller turns such a reply back into the same ``ParticipantError``::

    await envelope_response(ParticipantError("admission_closed", "..."))(scope, receive, send)
    error = errors.error_from_reply(409, text)   # ParticipantError("admission_closed", ...)

Any other error reply becomes ``checkpoint_error`` with ``HTTP <status>`` and
the first 200 bytes, as protocol.md asks for replies without the envelope
(``envckpt.errors.error_from_reply``, the one decoder of error replies).
"""

from __future__ import annotations

import json

from fastapi.responses import JSONResponse

from envckpt.errors import ParticipantError
from envckpt.protocol import ERROR_STATUS


def refuse(code: str, detail: str) -> ParticipantError:
    return ParticipantError(code, detail)


def envelope_response(error: ParticipantError) -> JSONResponse:
    return JSONResponse(status_code=error.status, content=error.to_wire())


def is_envelope(text: str) -> bool:
    """Whether ``text`` is the protocol's error envelope with a known code."""
    try:
        error = json.loads(text)["error"]
        return isinstance(error, dict) and error.get("code") in ERROR_STATUS
    except (ValueError, TypeError, KeyError, RecursionError):
        return False
