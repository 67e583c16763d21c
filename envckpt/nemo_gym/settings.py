"""What a hosted nemo-gym server process reads besides its nemo-gym config.

Secrets come from the environment or from an owner-only file, never from the
command line (other users can read a process's arguments) nor from the
nemo-gym config (it is passed around and printed)::

    token = control_token()           # ENVCKPT_GYM_TOKEN, else ENVCKPT_GYM_TOKEN_FILE
    block = envckpt_block(global_config_dict)   # the config's top-level ``envckpt`` mapping
    block.get("audit_dir"), block.get("staging_url")

Non-secret settings live in that ``envckpt`` block of the nemo-gym config, so
one config describes the whole deployment and every server process sees it.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

TOKEN_ENV = "ENVCKPT_GYM_TOKEN"
TOKEN_FILE_ENV = "ENVCKPT_GYM_TOKEN_FILE"
STAGING_TOKEN_ENV = "ENVCKPT_STAGING_TOKEN"
STAGING_TOKEN_FILE_ENV = "ENVCKPT_STAGING_TOKEN_FILE"
READY_FILE_ENV = "ENVCKPT_READY_FILE"
# The top-level key of the nemo-gym config that holds envckpt's settings.
CONFIG_BLOCK = "envckpt"


class TokenUnavailable(RuntimeError):
    """No usable secret was configured for this process."""


def read_token_file(path: str | os.PathLike[str]) -> str:
    """The secret in ``path``; refuse a file other users could read or write."""
    file = Path(path)
    info = file.stat()
    if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise TokenUnavailable(f"{file} is readable or writable by others; chmod 600 it")
    if hasattr(os, "getuid") and info.st_uid != os.getuid():
        raise TokenUnavailable(f"{file} is not owned by this user")
    token = file.read_text(encoding="utf-8").strip()
    if not token:
        raise TokenUnavailable(f"{file} is empty")
    return token


def secret(value_env: str, file_env: str, environ: Mapping[str, str] | None = None) -> str:
    """The secret from ``value_env``, else from the owner-only file named by ``file_env``."""
    env = os.environ if environ is None else environ
    value = env.get(value_env, "").strip()
    if value:
        return value
    path = env.get(file_env, "").strip()
    if path:
        return read_token_file(path)
    raise TokenUnavailable(f"set {value_env} or {file_env} (an owner-only file)")


def control_token(environ: Mapping[str, str] | None = None) -> str:
    """The bearer token of the checkpoint control routes."""
    return secret(TOKEN_ENV, TOKEN_FILE_ENV, environ)


def staging_token(environ: Mapping[str, str] | None = None) -> str:
    """The bearer token of the trainer's token-row endpoint."""
    return secret(STAGING_TOKEN_ENV, STAGING_TOKEN_FILE_ENV, environ)


def write_token_file(path: str | os.PathLike[str], token: str) -> Path:
    """Create ``path`` holding ``token``, readable by its owner only."""
    file = Path(path)
    descriptor = os.open(file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as stream:
        stream.write(token)
    os.chmod(file, 0o600)
    return file


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
