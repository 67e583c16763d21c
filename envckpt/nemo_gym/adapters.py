"""Session adapters for nemo-gym 0.7.0 resources servers that keep JSON-able state.

Each adapter reads and writes the server's own per-session field; nothing in
the server changes. Registered by class (``session_registry.register_adapter``):

| server | state per session |
| --- | --- |
| ``example_session_state_mgmt`` | ``session_id_to_counter[sid]`` |
| ``example_multi_turn_gymnasium`` | ``session_turns[sid]`` |
| ``blackjack`` | hands and the ``random.Random`` (``getstate()``), so the next card matches |

    sessions = CounterSessions(server)
    sessions.export_session(sid) == {"counter": 7}
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from typing import Any

from envckpt.nemo_gym.session_registry import SessionCheckpoint, register_adapter, registered

RANKS = frozenset({"2", "3", "4", "5", "6", "7", "8", "9", "10", "J", "Q", "K", "A"})
# random.Random's Mersenne Twister state: 624 words plus the index.
_MT_WORDS = 625


def _exact(state: Mapping[str, Any], keys: set[str], what: str) -> Mapping[str, Any]:
    if not isinstance(state, Mapping) or set(state) != keys:
        got = sorted(state) if isinstance(state, Mapping) else type(state).__name__
        raise ValueError(f"{what} state must have exactly {sorted(keys)}, got {got}")
    return state


def _int(value: object, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{what} must be an integer, got {value!r}")
    return value


class ServerSessions:
    """The base of each adapter: the resources server object whose sessions it saves
    and restores (``export_restore``)."""

    checkpoint_mode = "export_restore"

    def __init__(self, server: Any) -> None:
        self.server = server


class CounterSessions(ServerSessions):
    """``example_session_state_mgmt``: one integer counter per session."""

    def export_session(self, session_id: str) -> dict[str, Any] | None:
        counters = self.server.session_id_to_counter
        return {"counter": counters[session_id]} if session_id in counters else None

    def validate_session(self, state: Mapping[str, Any]) -> None:
        _int(_exact(state, {"counter"}, "counter")["counter"], "counter")

    def restore_session(self, session_id: str, state: Mapping[str, Any]) -> None:
        self.server.session_id_to_counter[session_id] = int(state["counter"])

    def drop_session(self, session_id: str) -> None:
        self.server.session_id_to_counter.pop(session_id, None)


class MultiTurnSessions(ServerSessions):
    """``example_multi_turn_gymnasium``: how many follow-ups a session has been sent."""

    def export_session(self, session_id: str) -> dict[str, Any] | None:
        turns = self.server.session_turns
        return {"turns": turns[session_id]} if session_id in turns else None

    def validate_session(self, state: Mapping[str, Any]) -> None:
        turns = _int(_exact(state, {"turns"}, "multi-turn")["turns"], "turns")
        if turns < 0:
            raise ValueError("turns must not be negative")

    def restore_session(self, session_id: str, state: Mapping[str, Any]) -> None:
        self.server.session_turns[session_id] = int(state["turns"])

    def drop_session(self, session_id: str) -> None:
        self.server._cleanup_session(session_id)


def rng_state(rng: random.Random) -> dict[str, Any]:
    version, words, gauss_next = rng.getstate()
    return {"version": version, "words": list(words), "gauss_next": gauss_next}


def rng_from_state(state: Mapping[str, Any]) -> random.Random:
    rng = random.Random()
    rng.setstate((state["version"], tuple(state["words"]), state["gauss_next"]))
    return rng


def _check_rng(state: object) -> None:
    body = _exact(state, {"version", "words", "gauss_next"}, "rng")  # type: ignore[arg-type]
    _int(body["version"], "rng version")
    words = body["words"]
    if not isinstance(words, list) or len(words) != _MT_WORDS:
        raise ValueError(f"rng words must be a list of {_MT_WORDS} integers")
    if not all(0 <= _int(word, "rng word") < 1 << 32 for word in words):
        raise ValueError("rng words must be 32-bit unsigned integers")
    gauss = body["gauss_next"]
    if gauss is not None and not isinstance(gauss, float):
        raise ValueError("rng gauss_next must be a float or null")
    rng_from_state(body)  # setstate itself refuses an inconsistent state


def _check_hand(hand: object, what: str) -> list[str]:
    if not isinstance(hand, list) or not all(card in RANKS for card in hand):
        raise ValueError(f"{what} must be a list of card ranks, got {hand!r}")
    return hand


class BlackjackSessions(ServerSessions):
    """``blackjack``: both hands and the session's random generator."""

    def export_session(self, session_id: str) -> dict[str, Any] | None:
        state = self.server.session_state.get(session_id)
        if state is None:
            return None
        return {
            "player": list(state.get("player", [])),
            "dealer": list(state.get("dealer", [])),
            "rng": rng_state(state["rng"]),
        }

    def validate_session(self, state: Mapping[str, Any]) -> None:
        body = _exact(state, {"player", "dealer", "rng"}, "blackjack")
        _check_hand(body["player"], "player")
        _check_hand(body["dealer"], "dealer")
        _check_rng(body["rng"])

    def restore_session(self, session_id: str, state: Mapping[str, Any]) -> None:
        self.server.session_state[session_id] = {
            "player": list(state["player"]),
            "dealer": list(state["dealer"]),
            "rng": rng_from_state(state["rng"]),
        }

    def drop_session(self, session_id: str) -> None:
        self.server._cleanup_session(session_id)


BUILTIN: dict[str, Callable[[Any], SessionCheckpoint]] = {
    "resources_servers.example_session_state_mgmt.app:StatefulCounterResourcesServer": (
        CounterSessions
    ),
    "resources_servers.example_multi_turn_gymnasium.app:ExampleMultiTurnEnv": MultiTurnSessions,
    "resources_servers.blackjack.app:BlackjackEnv": BlackjackSessions,
}
_registered = False


def register_builtin() -> None:
    """Register the adapters above (idempotent; a user's registration wins)."""
    global _registered
    if _registered:
        return
    _registered = True
    for key, factory in BUILTIN.items():
        if registered(key) is None:
            register_adapter(key, factory)
