"""Identifier grammar shared by both sides of the protocol.

Rollout ids, checkpoint ids and capture keys cross process boundaries and
become path components, so they are validated once, here, with one grammar.
Nothing in this module does I/O.
"""

from __future__ import annotations

import re
import secrets

# One safe path component: no separators, no leading dot or dash.
# Used with fullmatch: "$" alone would also accept a trailing newline.
ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
# The capture-key suffix that names a later attempt; reserved in rollout ids.
ATTEMPT_SUFFIX = re.compile(r"(?P<base>.+)-a(?P<attempt>[1-9][0-9]*)", re.DOTALL)
MAX_CHECKPOINT_ID_LENGTH = 128


def validate_rollout_id(rollout_id: object) -> str:
    """Return ``rollout_id`` if it is a legal rollout id, else raise ValueError."""
    if not isinstance(rollout_id, str) or not rollout_id:
        raise ValueError("rollout_id must be a non-empty string")
    if not ID_PATTERN.fullmatch(rollout_id):
        raise ValueError(f"rollout_id {rollout_id!r} must match {ID_PATTERN.pattern}")
    if ATTEMPT_SUFFIX.fullmatch(rollout_id):
        # Otherwise "r-a1" attempt 0 and "r" attempt 1 share a capture key.
        raise ValueError(f"rollout_id {rollout_id!r} ends in the reserved suffix -a<N>")
    return rollout_id


def validate_checkpoint_id(checkpoint_id: object) -> str:
    """Return ``checkpoint_id`` if it is a legal checkpoint id, else raise ValueError."""
    if not isinstance(checkpoint_id, str) or not checkpoint_id:
        raise ValueError("checkpoint_id must be a non-empty string")
    if len(checkpoint_id) > MAX_CHECKPOINT_ID_LENGTH:
        raise ValueError(f"checkpoint_id longer than {MAX_CHECKPOINT_ID_LENGTH} characters")
    if not ID_PATTERN.fullmatch(checkpoint_id):
        raise ValueError(f"checkpoint_id {checkpoint_id!r} must match {ID_PATTERN.pattern}")
    return checkpoint_id


def validate_attempt(attempt: object) -> int:
    """Return ``attempt`` if it is a non-negative int (bool refused), else raise ValueError."""
    if not isinstance(attempt, int) or isinstance(attempt, bool) or attempt < 0:
        raise ValueError(f"attempt must be a non-negative integer, got {attempt!r}")
    return attempt


def validate_path_component(name: object, *, what: str) -> str:
    """Return ``name`` if it is one safe path component, else raise ValueError."""
    if not isinstance(name, str) or not name or name in {".", ".."}:
        raise ValueError(f"{what} must be one safe path component, got {name!r}")
    if "/" in name or "\\" in name or "\x00" in name:
        raise ValueError(f"{what} must be one safe path component, got {name!r}")
    return name


def mint_checkpoint_id(hint: str) -> str:
    """A fresh checkpoint id: a readable hint plus a random suffix.

    Participants refuse ids they have finished, so a coordinator never reuses
    one; the random suffix makes that true across restarts too.
    """
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", hint).lstrip("._-") or "ckpt"
    suffix = secrets.token_hex(6)
    return f"{stem[: MAX_CHECKPOINT_ID_LENGTH - len(suffix) - 1]}-{suffix}"
