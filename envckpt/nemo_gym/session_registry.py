"""The session protocol a resources-server author implements, and the adapters registered by class.

Below both ``sessions`` (which finds a server's checkpoint) and ``adapters``
(the built-in adapters, which register here)::

    register_adapter("my_pkg.app:MyServer", MySessions)   # "module:QualName"
    registered(class_key(MyServer))                       # MySessions, or None
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class SessionCheckpoint(Protocol):
    """Per-session export and restore of one resources server's state."""

    checkpoint_mode: str

    def export_session(self, session_id: str) -> dict[str, Any] | None: ...

    def restore_session(self, session_id: str, state: Mapping[str, Any]) -> None: ...


AdapterFactory = Callable[[Any], SessionCheckpoint]
_ADAPTERS: dict[str, AdapterFactory] = {}


def class_key(cls: type[Any]) -> str:
    """How a server class is named in the registry: ``"module:QualName"``."""
    return f"{cls.__module__}:{cls.__qualname__}"


def register_adapter(server_class: str, factory: AdapterFactory) -> None:
    """Use ``factory(server)`` for servers of ``server_class`` (``"module:QualName"``)."""
    _ADAPTERS[server_class] = factory


def registered(server_class: str) -> AdapterFactory | None:
    """The adapter registered for exactly ``server_class``, or None."""
    return _ADAPTERS.get(server_class)
