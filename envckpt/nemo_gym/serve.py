"""One nemo-gym server in this process, without Ray or a head server.

The launcher starts ``python -m envckpt.nemo_gym.serve`` once per server with
nemo-gym's own environment variables: ``NEMO_GYM_CONFIG_DICT`` (the whole
resolved config, as YAML) and ``NEMO_GYM_CONFIG_PATH`` (this server's
top-level name). The server class is the one nemo-gym would run for that
entry (``<server type>/<implementation>/<entrypoint>``); it is made
checkpointable (``hosting.checkpointable``) unless the config's ``envckpt``
block lists the server under ``plain_servers``, and started with nemo-gym's
``run_webserver()``::

    NEMO_GYM_CONFIG_DICT="$(cat config.yaml)" NEMO_GYM_CONFIG_PATH=policy_model \\
    ENVCKPT_GYM_TOKEN_FILE=token ENVCKPT_READY_FILE=run/policy_model.ready \\
        python -m envckpt.nemo_gym.serve

uvicorn stops the server on SIGTERM (it installs its own handler).
"""

from __future__ import annotations

import importlib
import inspect
import os
from collections.abc import Mapping
from typing import Any

from envckpt.http.client import NEMO_GYM_SERVER_TYPES
from envckpt.nemo_gym.settings import envckpt_block
from envckpt.process_tie import tie_to_parent

CONFIG_DICT_ENV = "NEMO_GYM_CONFIG_DICT"
CONFIG_PATH_ENV = "NEMO_GYM_CONFIG_PATH"


def server_entry(global_config_dict: Mapping[str, Any], name: str) -> tuple[str, str, Any]:
    """``(server type, implementation, inner config)`` of the server named ``name``."""
    entry = global_config_dict[name]
    types = [key for key in NEMO_GYM_SERVER_TYPES if key in entry]
    if len(types) != 1:
        raise ValueError(f"{name!r} is not a nemo-gym server entry")
    by_impl = entry[types[0]]
    if len(by_impl) != 1:
        raise ValueError(f"{name!r}: {types[0]} must hold exactly one implementation")
    impl = next(iter(by_impl))
    return types[0], str(impl), by_impl[impl]


def server_class_for(global_config_dict: Mapping[str, Any], name: str) -> type[Any]:
    """The server class nemo-gym runs for ``name`` (or the ``server_classes`` override)."""
    overrides = envckpt_block(global_config_dict).get("server_classes") or {}
    target = overrides.get(name)
    if target:
        module_name, _, class_name = str(target).partition(":")
        cls: type[Any] = getattr(importlib.import_module(module_name), class_name)
        return cls
    server_type, impl, inner = server_entry(global_config_dict, name)
    entrypoint = str(inner.get("entrypoint", "app.py"))
    module_name = ".".join([server_type, impl, *entrypoint.removesuffix(".py").split("/")])
    module = importlib.import_module(module_name)
    from nemo_gym.server_utils import SimpleServer

    candidates = [
        value
        for value in vars(module).values()
        if inspect.isclass(value)
        and value.__module__ == module.__name__
        and issubclass(value, SimpleServer)
        and not inspect.isabstract(value)
    ]
    # A module may define a base and a subclass of it: the most derived one runs.
    leaves = [c for c in candidates if not any(o is not c and issubclass(o, c) for o in candidates)]
    if len(leaves) != 1:
        names = sorted(c.__name__ for c in leaves)
        raise ValueError(
            f"{module_name} defines {len(leaves)} server classes {names}; name one under "
            f"envckpt.server_classes.{name}"
        )
    return leaves[0]


def plain(server_cls: type[Any]) -> type[Any]:
    """``server_cls`` without Ray, announcing readiness, and nothing else added."""
    from envckpt.nemo_gym.hosting import same_name_subclass

    def setup_webserver(self: Any) -> Any:
        from envckpt.nemo_gym.readiness import announce_if_asked

        app = server_cls.setup_webserver(self)
        announce_if_asked(app, self)
        return app

    return same_name_subclass(server_cls, {"setup_webserver": setup_webserver})


def main() -> int:
    tie_to_parent()  # dies with the launcher (a no-op when forked: tied already)
    from nemo_gym.global_config import get_global_config_dict

    name = os.environ[CONFIG_PATH_ENV]
    global_config = get_global_config_dict()
    server_cls = server_class_for(global_config, name)
    if name in (envckpt_block(global_config).get("plain_servers") or ()):
        hosted = plain(server_cls)
    else:
        from envckpt.nemo_gym.hosting import checkpointable

        hosted = checkpointable(server_cls)
    hosted.run_webserver()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
