"""Tests of how a resources server's sessions are found checkpointable."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import pytest

pytest.importorskip("nemo_gym.base_resources_server")

from nemo_gym.base_resources_server import (
    BaseVerifyRequest,
    BaseVerifyResponse,
    SimpleResourcesServer,
)
from pydantic import Field

from envckpt.nemo_gym import session_registry, sessions
from envckpt.nemo_gym.sessions import register_adapter, session_checkpoint_for

from helpers.nemo_gym_servers import build


class Notes(SimpleResourcesServer):
    ray_enabled = False
    notes: dict[str, str] = Field(default_factory=dict)

    async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
        return BaseVerifyResponse(**body.model_dump(), reward=1.0)


class SelfCheckpointing(Notes):
    """A server that implements the protocol itself."""

    checkpoint_mode: ClassVar[str] = "export_restore"  # ClassVar: not a pydantic field

    def export_session(self, session_id: str) -> dict[str, Any] | None:
        return {"note": self.notes[session_id]} if session_id in self.notes else None

    def restore_session(self, session_id: str, state: Mapping[str, Any]) -> None:
        self.notes[session_id] = str(state["note"])


class NotesAdapter:
    checkpoint_mode = "stateless"

    def __init__(self, server: Any) -> None:
        self.server = server

    def export_session(self, session_id: str) -> dict[str, Any] | None:
        return None

    def restore_session(self, session_id: str, state: Mapping[str, Any]) -> None:
        return None


def test_a_server_implementing_the_protocol_is_its_own_checkpoint() -> None:
    """The server's own methods are used; nothing is looked up."""
    server = build(SelfCheckpointing, "notes")
    assert session_checkpoint_for(server) is server


def test_without_protocol_or_adapter_there_is_none() -> None:
    """No protocol and no adapter: None, which the participant runs as restart_only."""
    assert session_checkpoint_for(build(Notes, "notes")) is None


def test_a_registered_adapter_applies_to_subclasses(monkeypatch: pytest.MonkeyPatch) -> None:
    """An adapter registered for a class serves its subclasses too (hosting subclasses it)."""
    monkeypatch.setattr(session_registry, "_ADAPTERS", dict(session_registry._ADAPTERS))
    register_adapter(sessions.class_key(Notes), NotesAdapter)
    sub = type("Notes", (Notes,), {"ray_enabled": False})
    adapter = session_checkpoint_for(build(sub, "notes"))
    assert isinstance(adapter, NotesAdapter)


def test_an_unknown_mode_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """A declared mode outside the protocol's is refused."""
    server = build(SelfCheckpointing, "notes")
    monkeypatch.setattr(SelfCheckpointing, "checkpoint_mode", "sometimes")
    with pytest.raises(ValueError, match="checkpoint_mode"):
        session_checkpoint_for(server)
