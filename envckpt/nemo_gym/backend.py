"""The trainer's ``RolloutBackend`` over nemo-gym agents: ``POST /run`` per attempt.

    backend = NemoGymBackend({"counter/replica-0": "http://127.0.0.1:PORT"})
    summary = await backend.run("counter/replica-0", EnvironmentEpisode("r1", 0), task)
    summary["reward"], summary["staging_keys"], summary["envckpt"]["continued"]

The task is the nemo-gym ``/run`` body (``responses_create_params`` and the
task's own fields); the attempt rides in ``_ng_rollout_id`` and
``_ng_attempt_index``, from which the agent derives the capture key. The
reply is summarized (reward, final text, staging keys, the agent's envckpt
record): the token rows reach the trainer through the data plane, so results
stay small. A refusal in the protocol's envelope raises that
``ParticipantError`` (the job re-mints a ``stale_attempt``); a reply that is
not a JSON object is ``checkpoint_error``; no reply raises what
``http.json_client.JsonClient`` raises (``ConnectFailed``, ``TimeoutError``...).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from envckpt.episodes import EnvironmentEpisode
from envckpt.errors import error_from_reply
from envckpt.http.closing import AsyncCloseable
from envckpt.http.json_client import JsonClient
from envckpt.nemo_gym.run_state import ATTEMPT_KEY, ROLLOUT_ID_KEY

DEFAULT_RUN_TIMEOUT = 3600.0


def final_text(response: Mapping[str, Any]) -> str:
    """The text of the last assistant message of a response's output."""
    text = ""
    for item in response.get("output") or ():
        if isinstance(item, Mapping) and item.get("type") == "message":
            if item.get("role") not in (None, "assistant"):
                continue
            content = item.get("content")
            if isinstance(content, str):
                text = content
            elif isinstance(content, list):
                text = "".join(
                    str(part.get("text", ""))
                    for part in content
                    if isinstance(part, Mapping) and part.get("type") == "output_text"
                )
    return text


def summarize(result: Mapping[str, Any]) -> dict[str, Any]:
    """What the trainer keeps of a ``/run`` reply."""
    response = result.get("response")
    response = response if isinstance(response, Mapping) else {}
    return {
        "reward": result.get("reward"),
        "final_text": final_text(response),
        "output_types": [
            str(item.get("type"))
            for item in response.get("output") or ()
            if isinstance(item, Mapping)
        ],
        "staging_keys": list(result.get("staging_keys") or ()),
        "envckpt": result.get("envckpt"),
    }


def run_body(task: Mapping[str, Any], episode: EnvironmentEpisode) -> dict[str, Any]:
    return {**task, ROLLOUT_ID_KEY: episode.rollout_id, ATTEMPT_KEY: episode.attempt}


class NemoGymBackend(AsyncCloseable):
    """``RolloutBackend``: each instance's agent ``/run`` over its own connection pool."""

    def __init__(self, agents: Mapping[str, str], *, timeout: float = DEFAULT_RUN_TIMEOUT) -> None:
        if timeout <= 0:
            raise ValueError("timeout must be positive")
        self.agents = {instance: url.rstrip("/") for instance, url in agents.items()}
        self._timeout = timeout
        self._client = JsonClient(max_connections=256)

    async def run(
        self, instance_id: str, episode: EnvironmentEpisode, task: Mapping[str, Any]
    ) -> dict[str, Any]:
        url = f"{self.agents[instance_id]}/run"
        reply = await self._client.post(url, run_body(task, episode), timeout=self._timeout)
        if reply.status != 200:
            raise error_from_reply(reply.status, reply.text)
        result = reply.json()
        if not isinstance(result, Mapping):
            raise error_from_reply(reply.status, f"not a JSON object: {reply.text}")
        return summarize(result)

    async def aclose(self) -> None:
        await self._client.aclose()
