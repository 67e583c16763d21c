"""nemo-gym server objects and hosted apps in this process, for tests that need no other server.

    server = build(StatefulCounterResourcesServer, "counter")        # the server object
    server, app = hosted(StatefulCounterResourcesServer, "counter")  # checkpointable, mounted
    async with serve(app) as url: ...

Servers that call other servers (agents, models) go through nemo-gym's
process-wide aiohttp client and config; tests run those as processes (launcher).
"""

from __future__ import annotations

import tempfile
from typing import Any

from envckpt.nemo_gym.hosting import checkpointable

from helpers.http_deployment import TOKEN

HOST = "127.0.0.1"


def global_config(name: str, server_type: str, impl: str, **extra: Any) -> dict[str, Any]:
    inner = {"entrypoint": "app.py", "host": HOST, "port": 1, **extra}
    return {
        "head_server": {"host": HOST, "port": 1},
        "dry_run": False,
        name: {server_type: {impl: inner}},
    }


def server_client(config: dict[str, Any]) -> Any:
    from nemo_gym.config_types import BaseServerConfig
    from nemo_gym.server_utils import ServerClient
    from omegaconf import OmegaConf

    return ServerClient(
        head_server_config=BaseServerConfig(**config["head_server"]),
        global_config_dict=OmegaConf.create(config),
    )


def build(cls: type[Any], name: str, *, config: dict[str, Any] | None = None, **extra: Any) -> Any:
    """An instance of the resources server class ``cls`` named ``name``."""
    extra.setdefault("domain", "other")
    config_cls = cls.model_fields["config"].annotation
    settings = config_cls(host=HOST, port=1, entrypoint="app.py", name=name, **extra)
    whole = config or global_config(name, "resources_servers", "test", **extra)
    return cls(config=settings, server_client=server_client(whole))


def hosted(
    cls: type[Any], name: str, *, config: dict[str, Any] | None = None, **extra: Any
) -> tuple[Any, Any]:
    """``checkpointable(cls)`` built and its app set up, control routes on ``TOKEN``."""
    hosted_cls = checkpointable(cls, token=TOKEN, checkpoint_root=tempfile.gettempdir())
    server = build(hosted_cls, name, config=config, **extra)
    return server, server.setup_webserver()
