"""What both agent recipes share: the conversation kept in their saved ``loop``, as JSON.

Items are stored as upstream sends them (``model_dump(exclude_unset=True)``,
what ``ServerClient`` posts), so the model receives byte-for-byte the body an
uninterrupted upstream run would send::

    keep_model_output(loop, model_response)           # its output items and usage
    final = response_with_output(last_response_json, loop["outputs"], loop["usage"])

``ForkedRecipe`` is the base of both recipes: the agent's config and its
``/run`` request type, a new run's first loop state, the seed phase's call,
a turn's model call, the checks of a restored loop, the step a run is at.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from nemo_gym.openai_utils import (
    NeMoGymEasyInputMessage,
    NeMoGymFunctionCallOutput,
    NeMoGymResponse,
    NeMoGymResponseUsage,
    accumulate_response_usage,
)
from nemo_gym.server_utils import get_response_json

from envckpt.nemo_gym.calls import EpisodeCalls, keep_application, response_cookies
from envckpt.nemo_gym.run_state import RunState

# The loop state's keys every recipe has (``ForkedRecipe._new_run``), with their types.
CONVERSATION_TYPES: dict[str, type | tuple[type, ...]] = {
    "input": list,
    "outputs": list,
    "step": int,
    "usage": (dict, type(None)),
}


def dump_item(item: Any) -> dict[str, Any]:
    dumped: dict[str, Any] = item.model_dump(mode="json", exclude_unset=True)
    return dumped


def dump_items(items: Iterable[Any]) -> list[dict[str, Any]]:
    return [dump_item(item) for item in items]


def input_items(params: Mapping[str, Any]) -> list[Any]:
    """The conversation a run starts from (upstream turns a string into one user message)."""
    items = params.get("input")
    if isinstance(items, str):
        return [dump_item(NeMoGymEasyInputMessage(role="user", content=items))]
    return list(items or [])


def user_message(text: str) -> dict[str, Any]:
    return dump_item(NeMoGymEasyInputMessage(role="user", content=text))


def tool_output_item(call_id: str, output: str) -> dict[str, Any]:
    """A tool call's output as the conversation item upstream adds after the call."""
    return dump_item(
        NeMoGymFunctionCallOutput(type="function_call_output", call_id=call_id, output=output)
    )


def add_usage(total: Mapping[str, Any] | None, additional: Any) -> dict[str, Any] | None:
    """``accumulate_response_usage`` over the saved JSON total."""
    current = None if total is None else NeMoGymResponseUsage.model_validate(dict(total))
    summed = accumulate_response_usage(current, additional)
    return None if summed is None else dict(summed.model_dump(mode="json"))


def _typed(item: Mapping[str, Any]) -> dict[str, Any]:
    # An exclude_unset dump of a message drops its default ``type``; a
    # response's output items need it to tell the item kinds apart.
    if "type" not in item and "role" in item:
        return {**item, "type": "message"}
    return dict(item)


def response_with_output(
    response: Mapping[str, Any], outputs: Sequence[Mapping[str, Any]], usage: Any
) -> NeMoGymResponse:
    """The last model response carrying every output so far (upstream's final response)."""
    document = {**response, "output": [_typed(item) for item in outputs], "usage": usage}
    return NeMoGymResponse.model_validate(document)


def check_loop(loop: Mapping[str, Any], required: Mapping[str, type | tuple[type, ...]]) -> None:
    """Raise ValueError unless ``loop`` has exactly these keys with these types."""
    if set(loop) != set(required):
        raise ValueError(f"loop state must have exactly {sorted(required)}, got {sorted(loop)}")
    for key, kind in required.items():
        value = loop[key]
        if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
            raise ValueError(f"loop.{key} has the wrong type {type(value).__name__}")
    if loop.get("step", 0) < 0:
        raise ValueError("loop.step must not be negative")


def keep_model_output(loop: dict[str, Any], model_response: NeMoGymResponse) -> None:
    """The model response's output items join the conversation; its usage is summed."""
    loop["outputs"].extend(dump_items(model_response.output))
    loop["usage"] = add_usage(loop["usage"], model_response.usage)


class ForkedRecipe:
    """The base of both agent recipes: the agent's config and its ``/run`` request type."""

    flavor: str
    # The loop state's keys and their types (``check_loop``).
    loop_types: Mapping[str, type | tuple[type, ...]]

    def __init__(self, server: Any, request_type: Any) -> None:
        # request_type: the agent's /run request class (``agents`` pairs it with the recipe).
        self.config = server.config
        self.request_type = request_type

    def _new_run(self, body: dict[str, Any], **own: Any) -> RunState:
        """A run about to seed: its loop holds the conversation it starts from, nothing out
        yet, step 0, no usage; plus the recipe's ``own`` fields."""
        params = body["responses_create_params"]
        loop = {"input": input_items(params), "outputs": [], "step": 0, "usage": None, **own}
        return RunState(flavor=self.flavor, body=body, phase="seed", loop=loop)

    def _request(self, run: RunState) -> Any:
        """The run's body as this agent's ``/run`` request (ValidationError if it is not)."""
        return self.request_type.model_validate(run.body)

    async def _open_session(self, run: RunState, calls: EpisodeCalls, path: str) -> Any:
        """The seed phase's call: the run's request posted to the resources server's
        ``path`` (``/seed_session``, ``/reset``), the cookies it sets and its application
        kept; its reply."""
        reply = await calls.post(
            calls.require_resources(),
            calls.resources_path(path, prefixed=True),
            json=self._request(run).model_dump(),
        )
        run.resources_cookies = response_cookies(reply)
        keep_application(run.applications, reply)
        return reply

    @staticmethod
    async def _call_model(run: RunState, calls: EpisodeCalls) -> Any:
        """A turn's model call as upstream makes it: the step counted, the conversation so
        far posted with the model's cookies (those it sets kept); its reply's JSON."""
        loop = run.loop
        loop["step"] += 1
        new_body = {**run.body["responses_create_params"], "input": loop["input"] + loop["outputs"]}
        model_reply = await calls.post(
            calls.model_server, calls.model_path(), json=new_body, cookies=run.model_cookies or None
        )
        model_response_json = await get_response_json(model_reply)
        run.model_cookies = response_cookies(model_reply)
        return model_response_json

    def validate_loop(self, run: RunState) -> None:
        """ValueError unless the loop state is this recipe's, complete for its phase, and the
        body still parses as this agent's ``/run`` request."""
        check_loop(run.loop, self.loop_types)
        self._check_phase(run)
        self._request(run)

    def _check_phase(self, run: RunState) -> None:
        """ValueError if the loop lacks what ``run.phase`` needs (a recipe's own rule)."""

    def step_of(self, run: RunState) -> int:
        step: int = run.loop.get("step", 0)
        return step
