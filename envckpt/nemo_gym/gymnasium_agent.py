"""``gymnasium_agent`` as phases: nemo-gym's ``GymnasiumAgent.run`` and its step loop, forked.

Upstream ``run`` resets the environment, then ``_run_open_episode`` loops up
to ``max_steps``: one model call, then ``/step`` with the model's response,
stopping when the step says terminated or truncated. Here::

    seed    POST /ng-rollout/<key>/reset  (cookies and the reset observation saved)
    turn    one pass of the step loop: model call, /step, rewards summed
    close   at return, POST /close when the environment advertised it

There is no verify phase: the environment's ``/step`` rewards the run. The
mirrored pieces are fingerprinted in ``upstream.py``.
"""

from __future__ import annotations

import uuid
from typing import Any

from nemo_gym.openai_utils import NeMoGymResponse
from nemo_gym.server_utils import get_response_json

from envckpt.nemo_gym.calls import EpisodeCalls, keep_application, response_cookies
from envckpt.nemo_gym.loop_state import (
    CONVERSATION_TYPES,
    ForkedRecipe,
    keep_model_output,
    response_with_output,
    tool_output_item,
    user_message,
)
from envckpt.nemo_gym.run_state import RunState, plain_json

FLAVOR = "gymnasium_agent"
_LOOP_TYPES: dict[str, type | tuple[type, ...]] = {
    **CONVERSATION_TYPES,
    "last_response": (dict, type(None)),
    "reward": (int, float),
    "step_data": dict,
    "supports_close": bool,
    "idempotent_steps": bool,
}


class GymnasiumAgentRecipe(ForkedRecipe):
    """The phases of ``GymnasiumAgent.run`` for one agent config."""

    flavor = FLAVOR
    loop_types = _LOOP_TYPES

    def start(self, body: dict[str, Any]) -> RunState:
        from resources_servers.gymnasium import EnvStepResponse

        # Upstream's step_data before the first step.
        before_first = EnvStepResponse(terminated=False, truncated=True, reward=0.0)
        return self._new_run(
            body,
            last_response=None,
            reward=0.0,
            step_data=before_first.model_dump(mode="json"),
            supports_close=False,
            idempotent_steps=False,
        )

    async def seed(self, run: RunState, calls: EpisodeCalls) -> None:
        from resources_servers.gymnasium import EnvResetResponse

        reset_resp = await self._open_session(run, calls, "/reset")
        reset_payload = await get_response_json(reset_resp)
        info = reset_payload.get("info") if isinstance(reset_payload, dict) else None
        if isinstance(info, dict):
            run.loop["supports_close"] = info.get("supports_explicit_close") is True
            run.loop["idempotent_steps"] = info.get("supports_step_idempotency") is True
        reset_data = EnvResetResponse.model_validate(reset_payload)
        if reset_data.observation:
            run.loop["input"].append(user_message(reset_data.observation))
        run.phase = "loop"

    async def turn(self, run: RunState, calls: EpisodeCalls) -> None:
        """One pass of upstream ``_run_open_episode``'s ``for`` loop."""
        from resources_servers.gymnasium import EnvStepResponse

        loop = run.loop
        model_response = NeMoGymResponse.model_validate(await self._call_model(run, calls))
        loop["last_response"] = model_response.model_dump(mode="json")
        keep_model_output(loop, model_response)

        step_body = self._request(run).model_dump() | {"response": model_response.model_dump()}
        if loop["idempotent_steps"]:
            step_body["_ng_step_request_id"] = uuid.uuid4().hex
        step_resp = await calls.post(
            calls.require_resources(), "/step", json=step_body, cookies=run.resources_cookies
        )
        step_data = EnvStepResponse.model_validate(await get_response_json(step_resp))
        keep_application(run.applications, step_resp)
        loop["reward"] += step_data.reward
        run.resources_cookies = {**run.resources_cookies, **response_cookies(step_resp)}
        loop["step_data"] = step_data.model_dump(mode="json")

        if step_data.terminated or step_data.truncated:
            run.phase = "return"
            return

        for tool_output in (step_data.info or {}).get("tool_outputs", []):
            loop["outputs"].append(tool_output_item(tool_output["call_id"], tool_output["output"]))
        if step_data.observation:
            loop["outputs"].append(user_message(step_data.observation))

        if loop["step"] >= self.config.max_steps:
            loop["step_data"] = {**loop["step_data"], "truncated": True}
            run.phase = "return"

    async def verify(self, run: RunState, calls: EpisodeCalls) -> None:
        run.phase = "return"  # the environment's /step already rewarded the run

    async def close(self, run: RunState, calls: EpisodeCalls) -> None:
        if not run.loop["supports_close"]:
            return
        try:
            await calls.post(
                calls.require_resources(), "/close", json={}, cookies=run.resources_cookies
            )
        except Exception as exc:
            info = run.loop["step_data"].get("info") or {}
            info["cleanup_warning"] = {
                "operation": "close",
                "error_type": type(exc).__name__,
                "message": str(exc),
            }
            run.loop["step_data"]["info"] = plain_json(info)

    def result(self, run: RunState) -> dict[str, Any]:
        from responses_api_agents.gymnasium_agent.app import GymnasiumRunResponse

        loop = run.loop
        base_body = {**run.body["responses_create_params"], "input": loop["input"]}
        last = response_with_output(loop["last_response"], loop["outputs"], loop["usage"])
        step_data = loop["step_data"]
        document: dict[str, Any] = GymnasiumRunResponse(
            responses_create_params=base_body,
            response=last,
            reward=loop["reward"],
            terminated=step_data.get("terminated", False),
            truncated=step_data.get("truncated", False),
            info=step_data.get("info") or {},
        ).model_dump(mode="json")
        return document

    def _check_phase(self, run: RunState) -> None:
        if run.phase == "return" and run.loop["last_response"] is None:
            raise ValueError("a finished gymnasium run has no model response")
