"""A nemo-gym ``ServerClient`` for a simulated Gym deployment served on loopback.

    client = server_client_for(servers.urls)     # servers: envckpt.sim.server.GymServers
    adapter = GymCheckpointAdapter(instance=inst, client=client, auth_token=TOKEN)

The global config lists every server as nemo-gym 0.7.0 writes it (server type,
implementation, host, port). Without nemo-gym installed, a stand-in with the
same ``global_config_dict`` is returned: that is all envckpt reads of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any
from urllib.parse import urlsplit

from envckpt.sim.gym import AGENT_SERVER, JUDGE_SERVER, MODEL_SERVER, RESOURCES_SERVER

SERVER_TYPES = {
    MODEL_SERVER: ("responses_api_models", "sim_model"),
    JUDGE_SERVER: ("responses_api_models", "sim_judge"),
    AGENT_SERVER: ("responses_api_agents", "sim_agent"),
    RESOURCES_SERVER: ("resources_servers", "sim_tool"),
}


def global_config(urls: Mapping[str, str]) -> dict[str, Any]:
    """The nemo-gym global config naming each server of ``urls`` at its host and port."""
    config: dict[str, Any] = {"head_server": {"host": "127.0.0.1", "port": 1}, "dry_run": False}
    for name, url in sorted(urls.items()):
        parts = urlsplit(url)
        server_type, impl = SERVER_TYPES.get(name, ("resources_servers", name))
        inner = {"entrypoint": "app.py", "host": parts.hostname, "port": parts.port}
        config[name] = {server_type: {impl: inner}}
    return config


def server_client_for(urls: Mapping[str, str]) -> Any:
    """nemo-gym's ``ServerClient`` over ``urls`` (a stand-in when nemo-gym is not installed)."""
    config = global_config(urls)
    try:
        from nemo_gym.config_types import BaseServerConfig
        from nemo_gym.server_utils import ServerClient
        from omegaconf import OmegaConf
    except ImportError:
        return SimpleNamespace(global_config_dict=config)
    return ServerClient(
        head_server_config=BaseServerConfig(**config["head_server"]),
        global_config_dict=OmegaConf.create(config),
    )
