"""Exported state that JSON cannot carry: refused by name, or NaN written as Gym writes it.

Records are JSON. A state holding a NaN or an infinity (a pandas-backed tool
table holds many), a key that is not a string, or an object JSON has no form
for cannot be written as it is. A commit that meets one fails with
``UnencodableState`` naming the server, the episode (and the session, for a
resources server), the key path and what is there, instead of a bare
``ValueError``::

    problem = find_unencodable(state, allow_nan=False)   # ("tables.sales[3].price", "NaN") or None
    raise UnencodableState(server="tools", episode="r-a1", session="s1", key=..., reason=...)

``NonFinite`` is the participant's setting: ``refuse`` (the default, JSON's
own rule) or ``gym``: write NaN, Infinity and -Infinity as Python's ``json``
writes them (the tokens ``NaN``, ``Infinity``, ``-Infinity``), as NeMo Gym's
own store does, and read them back the same way. Such a records file is
readable by Gym and by envckpt participants with the same setting only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from enum import StrEnum
from typing import Any, ClassVar

from envckpt.errors import EnvckptError


class NonFinite(StrEnum):
    """How a participant writes NaN and infinities in exported state."""

    REFUSE = "refuse"
    GYM = "gym"


def parse_non_finite(value: object) -> NonFinite:
    """The setting from its name (None: refuse); ValueError names the choices."""
    if value is None:
        return NonFinite.REFUSE
    try:
        return NonFinite(str(value))
    except ValueError:
        raise ValueError(f"non_finite must be 'refuse' or 'gym', got {value!r}") from None


class UnencodableState(EnvckptError, ValueError):
    """Exported state JSON cannot carry: which server, episode, session and key, and why."""

    _fields: ClassVar[tuple[str, ...]] = ("server", "episode", "session", "key", "reason")

    def __init__(self, *, server: str, episode: str, session: str, key: str, reason: str) -> None:
        where = f"episode {episode}" + (f", session {session}" if session else "")
        super().__init__(
            f"server {server}: the state of {where} cannot be written as JSON: "
            f"key {key or '(the state itself)'} holds {reason}"
        )
        self.server = server
        self.episode = episode
        self.session = session
        self.key = key
        self.reason = reason


_PLAIN = (str, bool, int, type(None))


def find_unencodable(value: Any, *, allow_nan: bool, path: str = "") -> tuple[str, str] | None:
    """The first key path under ``value`` JSON cannot carry, and what is there; None if none."""
    stack: list[tuple[str, Any]] = [(path, value)]
    while stack:
        where, item = stack.pop()
        if isinstance(item, _PLAIN):
            continue
        if isinstance(item, float):
            if not allow_nan and not math.isfinite(item):
                return where, repr(item).replace("nan", "NaN").replace("inf", "Infinity")
            continue
        if isinstance(item, Mapping):
            children = []
            for key, child in item.items():
                if not isinstance(key, str):
                    return f"{where}[{key!r}]", f"a {type(key).__name__} key"
                children.append((f"{where}.{key}" if where else key, child))
            stack.extend(reversed(children))
            continue
        if isinstance(item, list | tuple):
            stack.extend(reversed([(f"{where}[{i}]", child) for i, child in enumerate(item)]))
            continue
        return where, f"a {type(item).__name__}, which JSON has no form for"
    return None


def unencodable_error(*, server: str, pairs: Any, allow_nan: bool) -> UnencodableState | None:
    """``UnencodableState`` for the first (episode, state) pair JSON cannot carry, or None."""
    for episode, state in pairs:
        problem = find_unencodable(state, allow_nan=allow_nan)
        if problem is not None:
            session = state.get("session_id") if isinstance(state, Mapping) else None
            return UnencodableState(
                server=server,
                episode=episode.capture_key,
                session=session if isinstance(session, str) else "",
                key=problem[0],
                reason=problem[1],
            )
    return None
