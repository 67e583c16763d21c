"""What a hosted nemo-gym server process reads besides its nemo-gym config.

Secrets come from the environment or from an owner-only file, never from the
command line (other users can read a process's arguments) nor from the
nemo-gym config (it is passed around and printed)::

    token = control_token()           # ENVCKPT_GYM_TOKEN, else ENVCKPT_GYM_TOKEN_FILE (>= 16 chars)
    root = checkpoint_root(block)     # ENVCKPT_CHECKPOINT_ROOT, else the block's checkpoint_root
    block = envckpt_block(global_config_dict)   # the config's top-level ``envckpt`` mapping
    block.get("audit_dir"), block.get("staging_url")

Non-secret settings live in that ``envckpt`` block of the nemo-gym config, so
one config describes the whole deployment and every server process sees it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from envckpt.http.tokens import (
    GYM_TOKEN_ENV,
    GYM_TOKEN_FILE_ENV,
    TokenUnavailable,
    read_token_file,
    require_strong_token,
    secret,
    write_token_file,
)

STAGING_TOKEN_ENV = "ENVCKPT_STAGING_TOKEN"
STAGING_TOKEN_FILE_ENV = "ENVCKPT_STAGING_TOKEN_FILE"
READY_FILE_ENV = "ENVCKPT_READY_FILE"
# Where the server's participant may write and read checkpoints (or the
# config block's ``checkpoint_root``); a hosted server refuses to start without one.
CHECKPOINT_ROOT_ENV = "ENVCKPT_CHECKPOINT_ROOT"
CHECKPOINT_ROOT_KEY = "checkpoint_root"
# "1" serves FastAPI's /docs, /redoc and /openapi.json (off by default).
EXPOSE_DOCS_ENV = "ENVCKPT_EXPOSE_DOCS"
# The top-level key of the nemo-gym config that holds envckpt's settings.
CONFIG_BLOCK = "envckpt"


def control_token(environ: Mapping[str, str] | None = None) -> str:
    """The bearer token of the checkpoint control routes."""
    return secret(GYM_TOKEN_ENV, GYM_TOKEN_FILE_ENV, environ)


def staging_token(environ: Mapping[str, str] | None = None) -> str:
    """The bearer token of the trainer's token-row endpoint."""
    return secret(STAGING_TOKEN_ENV, STAGING_TOKEN_FILE_ENV, environ)


def envckpt_block(global_config_dict: Any) -> dict[str, Any]:
    """The config's ``envckpt`` settings as a plain dict (empty when absent)."""
    if global_config_dict is None:
        return {}
    try:
        block = global_config_dict.get(CONFIG_BLOCK)
    except AttributeError:
        return {}
    if block is None:
        return {}
    if hasattr(block, "items"):
        try:
            from omegaconf import OmegaConf

            if OmegaConf.is_config(block):
                plain = OmegaConf.to_container(block, resolve=True)
                return {str(k): v for k, v in plain.items()} if isinstance(plain, dict) else {}
        except ImportError:  # pragma: no cover - omegaconf ships with nemo-gym
            pass
        return dict(block.items())
    raise ValueError(f"the config's {CONFIG_BLOCK!r} entry must be a mapping")


def checkpoint_root(block: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> Path:
    """Where this server's participant may write checkpoints; refuses to guess.

    ``ENVCKPT_CHECKPOINT_ROOT`` wins over the config block's ``checkpoint_root``;
    either must be an absolute path.
    """
    env = os.environ if environ is None else environ
    value = env.get(CHECKPOINT_ROOT_ENV, "").strip() or str(block.get(CHECKPOINT_ROOT_KEY) or "")
    if not value:
        raise ValueError(
            f"set {CHECKPOINT_ROOT_ENV} or the config's {CONFIG_BLOCK}.{CHECKPOINT_ROOT_KEY}: "
            "the directory checkpoints may be written under"
        )
    if not os.path.isabs(value):
        raise ValueError(f"the checkpoint root {value!r} must be an absolute path")
    return Path(value)


def expose_docs(environ: Mapping[str, str] | None = None) -> bool:
    """Whether to keep FastAPI's /docs, /redoc and /openapi.json (``ENVCKPT_EXPOSE_DOCS=1``)."""
    env = os.environ if environ is None else environ
    return env.get(EXPOSE_DOCS_ENV, "").strip() == "1"


__all__ = [
    "CHECKPOINT_ROOT_ENV",
    "TokenUnavailable",
    "checkpoint_root",
    "control_token",
    "envckpt_block",
    "expose_docs",
    "read_token_file",
    "require_strong_token",
    "secret",
    "staging_token",
    "write_token_file",
]
