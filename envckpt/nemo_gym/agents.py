"""Which agent classes can be made checkpointable, and their ``/run`` override.

``hosting.checkpointable`` asks ``agent_overrides(cls)`` for the agent's
installer and the methods to override. ``SimpleAgent`` and
``GymnasiumAgent`` (and subclasses) get ``/run`` replaced by the phased
runtime (``agent_runtime.py``) with their recipe; any other agent class is
refused, since its loop was not forked::

    install, overrides = agent_overrides(SimpleAgent)
    # overrides["run"]: the /run handler; refusals answer with the protocol envelope
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse

from envckpt.errors import ParticipantError
from envckpt.nemo_gym.agent_runtime import AgentRuntime
from envckpt.nemo_gym.gate import envelope_response
from envckpt.nemo_gym.run_state import ROLLOUT_ID_KEY


def run_body(body: Any) -> dict[str, Any]:
    """A parsed ``/run`` body as the JSON a run state keeps (with its rollout id)."""
    raw: dict[str, Any] = body.model_dump(mode="json", exclude_unset=True)
    rollout_id = getattr(body, "capture_rollout_id", None)
    if rollout_id is not None:
        raw[ROLLOUT_ID_KEY] = rollout_id
    return raw


def _recipes() -> list[tuple[type[Any], type[Any], Callable[[Any, Any], Any]]]:
    from responses_api_agents.gymnasium_agent.app import GymnasiumAgent, GymnasiumAgentRunRequest
    from responses_api_agents.simple_agent.app import SimpleAgent, SimpleAgentRunRequest

    from envckpt.nemo_gym.gymnasium_agent import GymnasiumAgentRecipe
    from envckpt.nemo_gym.simple_agent import SimpleAgentRecipe

    return [
        (SimpleAgent, SimpleAgentRunRequest, SimpleAgentRecipe),
        (GymnasiumAgent, GymnasiumAgentRunRequest, GymnasiumAgentRecipe),
    ]


def agent_overrides(server_cls: type[Any]) -> tuple[Callable[[Any, Any], Any], dict[str, Any]]:
    """The installer and ``/run`` override for a checkpointable agent class."""
    found = [(r, c) for agent_cls, r, c in _recipes() if issubclass(server_cls, agent_cls)]
    if not found:
        raise TypeError(
            f"{server_cls.__name__}: only simple_agent and gymnasium_agent have a "
            "checkpointable /run; other agents' loops were not forked"
        )
    request_type, recipe_cls = found[0]

    def install(server: Any, app: Any) -> AgentRuntime:
        if not getattr(server.config, "execute_tools", True):
            raise ValueError("a checkpointable /run needs execute_tools=true")
        if getattr(server.config, "resources_server", None) is None:
            raise ValueError("a checkpointable /run needs a resources_server")
        return AgentRuntime(
            server=server, recipe=recipe_cls(server, request_type), server_name=server.config.name
        )

    async def run(self: Any, request: Request, body: Any) -> JSONResponse:
        runtime: AgentRuntime = self.envckpt
        try:
            result = await runtime.run(run_body(body))
        except ParticipantError as error:
            return envelope_response(error)
        return JSONResponse(result)

    # FastAPI reads the body's model from the handler's annotations.
    run.__annotations__ = {"request": Request, "body": request_type, "return": JSONResponse}
    return install, {"run": run}
