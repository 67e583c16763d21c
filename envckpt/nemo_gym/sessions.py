"""The small protocol a resources-server author implements to make sessions checkpointable.

nemo-gym 0.7.0 resources servers keep per-rollout state in their own fields,
keyed by the session id of the signed session cookie. A server (or an adapter
registered for it) exposes that state per session::

    class MyServer(SimpleResourcesServer):
        checkpoint_mode: ClassVar[str] = "export_restore"   # ClassVar: not a pydantic field
        def export_session(self, session_id: str) -> dict | None: ...  # None: holds nothing
        def restore_session(self, session_id: str, state: dict) -> None: ...
        def validate_session(self, state: dict) -> None: ...          # optional; raise ValueError
        def drop_session(self, session_id: str) -> None: ...          # optional; free it

    sessions = session_checkpoint_for(server)    # the server itself, a registered adapter, or None

A server with neither the protocol nor an adapter takes part as
``restart_only``: its rollouts are reported as restarts, never silently lost.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from envckpt.nemo_gym import adapters
from envckpt.nemo_gym.session_registry import (
    AdapterFactory,
    SessionCheckpoint,
    class_key,
    register_adapter,
    registered,
)
from envckpt.protocol import MODES

# The author's names, where the module docstring shows them.
__all__ = [
    "AdapterFactory",
    "SessionCheckpoint",
    "class_key",
    "drop",
    "register_adapter",
    "registered_adapter",
    "session_checkpoint_for",
    "validate_state",
]


def registered_adapter(server_cls: type[Any]) -> AdapterFactory | None:
    """The adapter registered for ``server_cls`` or the nearest base class that has one."""
    adapters.register_builtin()
    for base in server_cls.__mro__:
        factory = registered(class_key(base))
        if factory is not None:
            return factory
    return None


def session_checkpoint_for(server: Any) -> SessionCheckpoint | None:
    """How ``server``'s sessions are checkpointed: itself, an adapter, or None (restart_only)."""
    if isinstance(server, SessionCheckpoint):
        sessions: SessionCheckpoint = server
    else:
        factory = registered_adapter(type(server))
        if factory is None:
            return None
        sessions = factory(server)
    if sessions.checkpoint_mode not in MODES:
        raise ValueError(f"checkpoint_mode must be one of {sorted(MODES)}")
    return sessions


def validate_state(sessions: SessionCheckpoint, state: Mapping[str, Any]) -> None:
    """Run the optional ``validate_session``; raise ValueError for an unusable state."""
    validate = getattr(sessions, "validate_session", None)
    if validate is not None:
        validate(state)


def drop(sessions: SessionCheckpoint | None, session_id: str) -> None:
    """Run the optional ``drop_session``."""
    dropper = getattr(sessions, "drop_session", None)
    if dropper is not None:
        dropper(session_id)
