"""Tests of the session protocol and the adapter registry below sessions and adapters."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from envckpt.nemo_gym import session_registry
from envckpt.nemo_gym.session_registry import (
    SessionCheckpoint,
    class_key,
    register_adapter,
    registered,
)


def sessions_of(server: Any) -> SessionCheckpoint:
    """A stateless adapter: holds nothing, restores nothing."""
    return SimpleNamespace(  # type: ignore[return-value]
        checkpoint_mode="stateless",
        export_session=lambda session_id: None,
        restore_session=lambda session_id, state: None,
    )


class Server:
    class Inner:
        pass


def test_a_class_is_keyed_by_module_and_qualified_name() -> None:
    """The key names the module and the qualified name, nested classes included."""
    assert class_key(Server) == f"{__name__}:Server"
    assert class_key(Server.Inner) == f"{__name__}:Server.Inner"


def test_a_registered_adapter_is_found_by_its_exact_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """What is registered under a key is found under that key only; a later registration wins."""
    monkeypatch.setattr(session_registry, "_ADAPTERS", {})
    assert registered(class_key(Server)) is None
    register_adapter(class_key(Server), sessions_of)
    assert registered(class_key(Server)) is sessions_of
    assert registered(class_key(Server.Inner)) is None

    def other(server: Any) -> SessionCheckpoint:
        return sessions_of(server)

    register_adapter(class_key(Server), other)
    assert registered(class_key(Server)) is other


def test_the_protocol_is_checked_at_run_time() -> None:
    """An object with the mode and both methods is a SessionCheckpoint; one without
    restore_session is not."""
    assert isinstance(sessions_of(None), SessionCheckpoint)
    half = SimpleNamespace(checkpoint_mode="stateless", export_session=lambda session_id: None)
    assert not isinstance(half, SessionCheckpoint)
