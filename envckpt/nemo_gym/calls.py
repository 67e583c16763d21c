"""How a checkpointable agent reaches the model and resources servers for one episode.

Every call goes through nemo-gym's own ``ServerClient`` (the same shared
aiohttp client and server resolution as upstream agents). Model calls and the
resources seed and verify carry the episode's capture key as the
``/ng-rollout/<key>`` prefix (the gates admit by it); tool calls carry only
the session cookie::

    calls = EpisodeCalls.for_agent(agent_server, episode)
    response = await calls.post(model, calls.model_path(), json=body, cookies=cookies)
    keys = await calls.release_model()     # the episode's token rows leave the model

A reply in the protocol's envelope raises that ``ParticipantError`` (so a
closed model parks the run); any other error reply raises as upstream does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from envckpt.episodes import EnvironmentEpisode
from envckpt.errors import ParticipantError, error_from_reply
from envckpt.nemo_gym.gate import is_envelope
from envckpt.nemo_gym.model import RELEASE_PATH
from envckpt.nemo_gym.resources import APPLICATION_HEADER


def keep_application(applications: list[str], response: Any) -> None:
    """Record which audited application a reply came from (resources gate's header)."""
    application = response.headers.get(APPLICATION_HEADER)
    if application:
        applications.append(str(application))


def response_cookies(response: Any) -> dict[str, str]:
    """A reply's ``Set-Cookie`` values by name (what upstream forwards)."""
    return {
        str(name): str(getattr(morsel, "value", morsel))
        for name, morsel in response.cookies.items()
    }


@dataclass(frozen=True, slots=True, kw_only=True)
class EpisodeCalls:
    """Calls of one episode from one agent server."""

    server: Any
    episode: EnvironmentEpisode
    model_server: str
    resources_server: str | None
    token_capture: bool

    @classmethod
    def for_agent(cls, server: Any, episode: EnvironmentEpisode) -> EpisodeCalls:
        resources = getattr(server.config, "resources_server", None)
        return cls(
            server=server,
            episode=episode,
            model_server=server.config.model_server.name,
            resources_server=None if resources is None else resources.name,
            token_capture=bool(server._token_id_capture_enabled()),
        )

    @property
    def capture_key(self) -> str:
        return self.episode.capture_key

    def prefix(self, *, token_capture: bool = False) -> str:
        from nemo_gym.server_utils import rollout_path_prefix

        return str(rollout_path_prefix(self.capture_key, token_capture=token_capture))

    def model_path(self, route: str = "/v1/responses") -> str:
        return f"{self.prefix(token_capture=self.token_capture)}{route}"

    def resources_path(self, route: str, *, prefixed: bool) -> str:
        return f"{self.prefix()}{route}" if prefixed else route

    def require_resources(self) -> str:
        if self.resources_server is None:
            raise ValueError("this agent has no resources_server configured")
        return self.resources_server

    async def post(self, server_name: str, url_path: str, *, json: Any, cookies: Any = None) -> Any:
        """POST through nemo-gym's ServerClient; raise on an error reply."""
        response = await self.server.server_client.post(
            server_name=server_name, url_path=url_path, json=json, cookies=cookies
        )
        await checked(response)
        return response

    async def post_tool(self, url_path: str, *, json: Any, cookies: Any = None) -> Any:
        """A tool call: a resources-server error is a tool output; a gate's refusal raises."""
        response = await self.server.server_client.post(
            server_name=self.require_resources(), url_path=url_path, json=json, cookies=cookies
        )
        if not response.ok:
            text = (await response.read()).decode("utf-8", "replace")
            if is_envelope(text):
                raise error_from_reply(response.status, text)
        return response

    async def release_model(self) -> list[str]:
        """The episode's staging keys; the model forgets its rows."""
        from nemo_gym.server_utils import get_response_json

        response = await self.post(
            self.model_server, RELEASE_PATH, json={"capture_key": self.capture_key}
        )
        payload = await get_response_json(response)
        keys = payload.get("staging_keys") if isinstance(payload, dict) else None
        if not isinstance(keys, list) or not all(isinstance(key, str) for key in keys):
            raise ParticipantError(
                "checkpoint_error", "the model's release reply lacks staging_keys"
            )
        return keys


async def checked(response: Any) -> None:
    """Raise the envelope's ``ParticipantError``, or nemo-gym's own error, for a failed reply."""
    if response.ok:
        return
    from nemo_gym.server_utils import raise_for_status

    content = await response.read()
    text = content.decode("utf-8", "replace")
    if is_envelope(text):
        raise error_from_reply(response.status, text)
    await raise_for_status(response, content)
