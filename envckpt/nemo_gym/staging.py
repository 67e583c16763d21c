"""Token rows from the policy model to the trainer's data plane, over HTTP.

The model server ships each captured token row to the trainer while the
rollout runs (NeMo RL's TransferQueue does this in production); the trainer's
end records it under its data-plane cut::

    stager = HttpRowStager("http://trainer:9000/rows", token=token)   # model server side
    await stager.stage(capture_key, staging_key, payload)              # raises ParticipantError

    app.include_router(staging_router(staging.stage, token=token))     # trainer side: POST /rows

A refusal travels in the protocol's envelope (a row of a superseded attempt
is ``stale_attempt``), so the model can fail that generation with the same code.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from envckpt import logs
from envckpt.errors import ParticipantError, error_from_reply
from envckpt.http.connections import BadReply, ConnectFailed, ServerDisconnected
from envckpt.http.json_client import JsonClient
from envckpt.nemo_gym.gate import envelope_response
from envckpt.participant import edge
from envckpt.trainer.row_intake import RowReceiver, receive_row

DEFAULT_TIMEOUT = 60.0


class HttpRowStager:
    """Posts ``{capture_key, staging_key, payload}`` rows to the trainer, bearer-authenticated."""

    def __init__(self, url: str, *, token: str, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.url = url
        self._timeout = timeout
        self._client = JsonClient(headers={"Authorization": f"Bearer {edge.check_token(token)}"})

    def __repr__(self) -> str:  # the token stays out of reprs and logs
        return f"HttpRowStager(url={self.url!r})"

    async def stage(self, capture_key: str, staging_key: str, payload: str) -> None:
        body = {"capture_key": capture_key, "staging_key": staging_key, "payload": payload}
        try:
            reply = await self._client.post(self.url, body, timeout=self._timeout)
        except (ConnectFailed, ServerDisconnected, BadReply, TimeoutError) as error:
            raise ParticipantError(
                "checkpoint_error", f"staging {staging_key}: {type(error).__name__}: {error}"
            ) from error
        if reply.status != 200:
            raise error_from_reply(reply.status, reply.text)

    async def aclose(self) -> None:
        await self._client.aclose()


def staging_router(receive: RowReceiver, *, token: str, path: str = "/rows") -> APIRouter:
    """The trainer's ``POST <path>``: ``receive(capture_key, staging_key, payload)`` per row."""
    token = edge.check_token(token)

    async def endpoint(request: Request) -> JSONResponse:
        try:
            if not edge.authorized(request.headers.get("authorization"), token):
                raise ParticipantError("unauthorized", "missing or wrong bearer token")
            try:
                body: Any = json.loads(await request.body())
            except ValueError as error:
                raise ParticipantError(
                    "invalid_request", f"the body is not JSON: {error}"
                ) from None
            staged = await receive_row(body, receive)
        except ParticipantError as error:
            return envelope_response(error)
        except Exception as error:
            logs.get_logger("envckpt.nemo_gym").exception("staging a row failed")
            return envelope_response(
                ParticipantError("checkpoint_error", f"{type(error).__name__}: {error}")
            )
        return JSONResponse({"staged": staged})

    router = APIRouter()
    router.add_api_route(path, endpoint, methods=["POST"], response_class=JSONResponse)
    return router
