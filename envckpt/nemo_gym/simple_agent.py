"""``simple_agent`` as phases: nemo-gym's ``SimpleAgent.run`` and one pass of its loop, forked.

Upstream ``run`` seeds the resources server, calls its own ``/v1/responses``
(whose handler ``_create_episode`` loops: model call, then every tool call),
then verifies. Here the same work is cut at its boundaries::

    seed    POST /ng-rollout/<key>/seed_session              (resources cookies saved)
    turn    one pass of _create_episode's loop: model call, tool calls, stop checks
    verify  POST /ng-rollout/<key>/verify with the final response

The fork is kept to the loop body, in upstream's order and with upstream's
stop rules (no tool call, an incomplete response, ``max_steps``); the pieces it
mirrors are fingerprinted in ``upstream.py`` and a test fails when the
installed nemo-gym changes them. Left out: trajectory records (observability)
and agent sessions (``/v1/agent_sessions``), which this fork does not drive.
"""

from __future__ import annotations

import json
from typing import Any

from nemo_gym.openai_utils import (
    NeMoGymResponse,
    NeMoGymResponseFunctionToolCall,
    NeMoGymResponseOutputMessage,
)
from nemo_gym.server_utils import get_response_json
from pydantic import ValidationError

from envckpt.nemo_gym.calls import EpisodeCalls, keep_application, response_cookies
from envckpt.nemo_gym.loop_state import (
    CONVERSATION_TYPES,
    ForkedRecipe,
    keep_model_output,
    response_with_output,
    tool_output_item,
)
from envckpt.nemo_gym.run_state import RunState, plain_json

FLAVOR = "simple_agent"
# Upstream's message for a turn with neither a tool call nor an assistant message.
NO_OUTPUT_MESSAGE = (
    "Ending trajectory: model returned no assistant message or tool calls "
    "(reasoning-only or empty output) without reported truncation. "
    "This is the stop-token case (finish_reason='stop'), not length truncation "
    "(finish_reason='length', handled separately via incomplete_details). "
    "This indicates either a badly trained model requiring training-level fixes "
    "or a bug in the inference engine."
)
_LOOP_TYPES: dict[str, type | tuple[type, ...]] = {
    **CONVERSATION_TYPES,
    "response": (dict, type(None)),
    "result": (dict, type(None)),
}


class SimpleAgentRecipe(ForkedRecipe):
    """The phases of ``SimpleAgent.run`` for one agent config."""

    flavor = FLAVOR
    loop_types = _LOOP_TYPES

    def start(self, body: dict[str, Any]) -> RunState:
        return self._new_run(body, response=None, result=None)

    async def seed(self, run: RunState, calls: EpisodeCalls) -> None:
        await self._open_session(run, calls, "/seed_session")
        run.phase = "loop"

    async def turn(self, run: RunState, calls: EpisodeCalls) -> None:
        """One pass of upstream ``_create_episode``'s ``while True`` loop."""
        loop = run.loop
        model_response_json = await self._call_model(run, calls)
        try:
            model_response = NeMoGymResponse.model_validate(model_response_json)
        except ValidationError as e:
            raise RuntimeError(
                f"Received an invalid response from model server: {json.dumps(model_response_json)}"
            ) from e

        output = model_response.output
        keep_model_output(loop, model_response)
        model_response.usage = None

        if model_response.incomplete_details:
            return self._end_loop(run, model_response)

        all_fn_calls: list[NeMoGymResponseFunctionToolCall] = [
            o for o in output if o.type == "function_call"
        ]
        all_output_messages: list[NeMoGymResponseOutputMessage] = [
            o for o in output if o.type == "message" and o.role == "assistant"
        ]
        if not all_fn_calls:
            if not all_output_messages:
                model_response.status = "incomplete"
                model_response.metadata = {
                    **(model_response.metadata or {}),
                    "ng_termination_reason": "incomplete_reasoning" if output else "empty_output",
                    "ng_termination_message": NO_OUTPUT_MESSAGE,
                }
            return self._end_loop(run, model_response)

        for output_function_call in all_fn_calls:
            try:
                parsed_arguments = json.loads(output_function_call.arguments)
            except (json.JSONDecodeError, TypeError) as e:
                tool_output = json.dumps({"error": f"Invalid tool call arguments: {e!r}"})
            else:
                # Resource-server errors are valid model-visible tool outputs.
                api_response = await calls.post_tool(
                    f"/{output_function_call.name}",
                    json=parsed_arguments,
                    cookies=run.resources_cookies,
                )
                tool_output = (await api_response.read()).decode()
                run.resources_cookies = {**run.resources_cookies, **response_cookies(api_response)}
                keep_application(run.applications, api_response)
            loop["outputs"].append(tool_output_item(output_function_call.call_id, tool_output))

        if self.config.max_steps and loop["step"] >= self.config.max_steps:
            return self._end_loop(run, model_response)
        return None

    def _end_loop(self, run: RunState, model_response: NeMoGymResponse) -> None:
        loop = run.loop
        final = response_with_output(
            model_response.model_dump(mode="json"), loop["outputs"], loop["usage"]
        )
        loop["response"] = final.model_dump(mode="json")
        run.phase = "verify"

    async def verify(self, run: RunState, calls: EpisodeCalls) -> None:
        request = self._request(run)
        response_json = run.loop["response"]
        if self.config.skip_verification:
            result = request.model_dump(mode="json") | {
                "response": response_json,
                "reward": float(self.config.skip_verification_reward),
                "verification_skipped": True,
            }
        else:
            verify_payload = request.model_dump() | {"response": response_json}
            verify_response = await calls.post(
                calls.require_resources(),
                calls.resources_path("/verify", prefixed=True),
                json=verify_payload,
                # Upstream verifies with the self-call's cookies: resources and model ones.
                cookies={**run.resources_cookies, **run.model_cookies},
            )
            keep_application(run.applications, verify_response)
            result = await get_response_json(verify_response)
        run.loop["result"] = plain_json(result)
        run.phase = "return"

    async def close(self, run: RunState, calls: EpisodeCalls) -> None:
        return None

    def result(self, run: RunState) -> dict[str, Any]:
        from responses_api_agents.simple_agent.app import SimpleAgentVerifyResponse

        verified = SimpleAgentVerifyResponse.model_validate(run.loop["result"])
        document: dict[str, Any] = verified.model_dump(mode="json")
        return document

    def _check_phase(self, run: RunState) -> None:
        if run.phase in ("verify", "return") and run.loop["response"] is None:
            raise ValueError(f"a run in phase {run.phase} has no final response")
        if run.phase == "return" and run.loop["result"] is None:
            raise ValueError("a run in phase return has no verify result")
