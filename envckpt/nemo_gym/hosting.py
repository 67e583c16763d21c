"""Add envckpt's participant to any nemo-gym server class, with one call.

    Hosted = checkpointable(StatefulCounterResourcesServer)
    Hosted.run_webserver()            # nemo-gym's own entry point, Ray-free

``checkpointable`` returns a subclass that keeps the base class's
``__name__`` (nemo-gym derives the signed session-cookie secret from the
class name and the server name, so a renamed class would reject the cookies
an agent saved before a crash) and overrides ``setup_webserver``: it builds
the base app, adds the participant of the server's kind, then mounts the
control routes (``mount_participant``) with the bearer token from
``ENVCKPT_GYM_TOKEN`` or the owner-only ``ENVCKPT_GYM_TOKEN_FILE`` (at least
16 characters), confined to the checkpoint root from
``ENVCKPT_CHECKPOINT_ROOT`` or the config's ``envckpt.checkpoint_root`` (a
server without one refuses to start). FastAPI's ``/docs``, ``/redoc`` and
``/openapi.json`` are removed unless ``ENVCKPT_EXPOSE_DOCS=1``:

* a resources server gets the session participant (``resources.py``), in the
  mode its checkpoint protocol or adapter declares, else ``restart_only``;
* a model server gets the generation gate and token-row ledger (``model.py``);
* ``simple_agent`` and ``gymnasium_agent`` get their checkpointable runs
  (``simple_agent.py``, ``gymnasium_agent.py``); another agent class is refused.

The participant is reachable as ``server.envckpt`` (tests and adapters). Its
events name the Gym instance the config's ``envckpt.instance_id`` gives
(``shard/replica-0``; the job writes it).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from pydantic import PrivateAttr

from envckpt.http.apps import hide_docs
from envckpt.http.routes import mount_participant
from envckpt.nemo_gym.settings import checkpoint_root as configured_checkpoint_root
from envckpt.nemo_gym.settings import control_token, envckpt_block, expose_docs
from envckpt.participant.json_state import parse_non_finite

T = TypeVar("T")
ATTRIBUTE = "_envckpt"


def same_name_subclass(base: type[T], namespace: Mapping[str, Any]) -> type[T]:
    """A subclass of ``base`` with the same name, module and qualname, Ray disabled."""
    body: dict[str, Any] = {
        "__module__": base.__module__,
        "__qualname__": base.__qualname__,
        "__doc__": base.__doc__,
        # Without Ray, ServerClient never needs a head server (see serve.py).
        "ray_enabled": False,
        ATTRIBUTE: PrivateAttr(default=None),
        **namespace,
    }
    return type(base.__name__, (base,), body)


def kind_of(server_cls: type[Any]) -> str:
    """The participant kind of a nemo-gym server class."""
    from nemo_gym.base_resources_server import SimpleResourcesServer
    from nemo_gym.base_responses_api_agent import SimpleResponsesAPIAgent
    from nemo_gym.base_responses_api_model import SimpleResponsesAPIModel

    if issubclass(server_cls, SimpleResourcesServer):
        return "resources"
    if issubclass(server_cls, SimpleResponsesAPIModel):
        return "model"
    if issubclass(server_cls, SimpleResponsesAPIAgent):
        return "agent"
    raise TypeError(f"{server_cls.__name__} is not a nemo-gym resources, model or agent server")


# Installs the kind's participant on (server, app) and returns it; it has a ``core``.
Installer = Callable[[Any, Any], Any]


def _installer(server_cls: type[Any], kind: str) -> tuple[Installer, dict[str, Any]]:
    if kind == "resources":
        from envckpt.nemo_gym.resources import install_resources_participant

        return install_resources_participant, {}
    if kind == "model":
        from envckpt.nemo_gym.model import install_model_participant

        return install_model_participant, {}
    from envckpt.nemo_gym.agents import agent_overrides

    return agent_overrides(server_cls)


def checkpointable(
    server_cls: type[T],
    *,
    token: str | None = None,
    checkpoint_root: str | os.PathLike[str] | None = None,
) -> type[T]:
    """``server_cls`` with envckpt's participant; see the module docstring.

    ``token`` and ``checkpoint_root`` override the environment and the config
    (tests, a host that builds the server itself).
    """
    kind = kind_of(server_cls)
    install, overrides = _installer(server_cls, kind)

    def setup_webserver(self: Any) -> Any:
        # Both settings first: a server missing one refuses before it builds anything.
        secret = token or control_token()
        block = envckpt_block(self.server_client.global_config_dict)
        root = checkpoint_root or configured_checkpoint_root(block)
        app = server_cls.setup_webserver(self)  # type: ignore[attr-defined]
        if not expose_docs():
            hide_docs(app)
        participant = install(self, app)
        block = envckpt_block(getattr(self.server_client, "global_config_dict", None))
        participant.core.set_gym_instance(block.get("instance_id"))  # named in its events
        # NaN in exported state: refused by name (default), or written as Gym writes it.
        participant.core.non_finite = parse_non_finite(block.get("non_finite"))
        setattr(self, ATTRIBUTE, participant)
        mount_participant(app, participant.core, token=secret, checkpoint_root=root)
        from envckpt.nemo_gym.readiness import announce_if_asked

        announce_if_asked(app, self)
        return app

    def envckpt(self: Any) -> Any:
        return getattr(self, ATTRIBUTE)

    return same_name_subclass(
        server_cls,
        {"setup_webserver": setup_webserver, "envckpt": property(envckpt), **overrides},
    )
