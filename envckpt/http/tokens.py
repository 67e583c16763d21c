"""Bearer tokens for the servers envckpt starts: strong, and never on a command line.

A token reaches a server process through an environment variable or an
owner-only file (other users can read any process's arguments in ``ps``, but
not its environment or a mode-600 file), and is refused when shorter than
``MIN_TOKEN_LENGTH``::

    token = secret("ENVCKPT_GYM_TOKEN", "ENVCKPT_GYM_TOKEN_FILE")   # env, else the file
    require_strong_token(token, what="control token")              # ValueError if short
    path = write_token_file(run_dir / "control.token", new_token())
    read_token_file(path)                                           # refuses group/other access
"""

from __future__ import annotations

import os
import secrets
import stat
from collections.abc import Mapping
from pathlib import Path

MIN_TOKEN_LENGTH = 16
# What every Gym server envckpt starts reads its secrets from: the token
# itself, or the path of an owner-only file holding it. The control plane's
# token and the trainer's rows endpoint's are different secrets.
GYM_TOKEN_ENV = "ENVCKPT_GYM_TOKEN"
GYM_TOKEN_FILE_ENV = "ENVCKPT_GYM_TOKEN_FILE"
GYM_ROWS_TOKEN_ENV = "ENVCKPT_ROWS_TOKEN"
GYM_ROWS_TOKEN_FILE_ENV = "ENVCKPT_ROWS_TOKEN_FILE"


class TokenUnavailable(RuntimeError):
    """No usable secret was configured for this process."""


def new_token() -> str:
    """A fresh random token (256 bits, URL-safe)."""
    return secrets.token_urlsafe(32)


def require_strong_token(token: object, *, what: str = "bearer token") -> str:
    """``token`` if it is a string of at least ``MIN_TOKEN_LENGTH`` characters."""
    if not isinstance(token, str) or len(token) < MIN_TOKEN_LENGTH:
        length = len(token) if isinstance(token, str) else 0
        raise ValueError(
            f"the {what} has {length} characters; servers need at least {MIN_TOKEN_LENGTH}"
        )
    if token != token.strip() or any(ord(character) < 33 for character in token):
        raise ValueError(f"the {what} may not contain whitespace or control characters")
    return token


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
    """The secret from ``value_env``, else from the owner-only file named by ``file_env``.

    Raises ``TokenUnavailable`` when neither is set or the secret is too short.
    """
    env = os.environ if environ is None else environ
    value = env.get(value_env, "").strip()
    if not value:
        path = env.get(file_env, "").strip()
        if not path:
            raise TokenUnavailable(f"set {value_env} or {file_env} (an owner-only file)")
        value = read_token_file(path)
    try:
        return require_strong_token(value, what=f"secret from {value_env} or {file_env}")
    except ValueError as error:
        raise TokenUnavailable(str(error)) from None


def write_token_file(path: str | os.PathLike[str], token: str) -> Path:
    """Create ``path`` holding ``token``, readable by its owner only."""
    file = Path(path)
    descriptor = os.open(file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as stream:
        stream.write(token)
    os.chmod(file, 0o600)
    return file
