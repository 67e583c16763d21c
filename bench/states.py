"""The parked rollout states every benchmark saves: deterministic, JSON, about N bytes each.

Both server variants (envckpt's participants and the floor's minimal
endpoints) build their states here, so they hold equal objects and write
byte-identical records. Nothing here imports envckpt: the floor uses it too.

    keys = rollout_ids(100)                  # "task-00000", ... (attempt 0)
    state = parked_state(7, state_bytes=1000)
    record_bytes(keys[7], state)             # one records-file line, no newline

Values are ASCII strings and small ints only, so every JSON encoder in use
(stdlib ``json`` compact, ``orjson``) writes the same bytes for them.
"""

from __future__ import annotations

from typing import Any

import orjson

_FILLER = (
    "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor "
    "incididunt ut labore et dolore magna aliqua ut enim ad minim veniam quis nostrud"
)
_WORDS = tuple(_FILLER.split())


def rollout_ids(count: int) -> list[str]:
    """``count`` rollout ids, sorted as the protocol sorts them (plain string order)."""
    return [f"task-{index:05d}" for index in range(count)]


def _text(seed: int, length: int) -> str:
    # A seed-dependent word order, repeated to length: cheap for 100 KB states.
    words = " ".join(_WORDS[(seed + 7 * i) % len(_WORDS)] for i in range(len(_WORDS)))
    return (f"{seed} {words} " * (length // (len(words) + 8) + 1))[:length]


def parked_state(index: int, *, state_bytes: int) -> dict[str, Any]:
    """A multi-turn agent session parked at a turn boundary, about ``state_bytes`` as JSON."""
    # Four messages share the payload; the fixed fields take about 120 bytes.
    share = max(8, (state_bytes - 120) // 4)
    return {
        "turn": 3 + index % 5,
        "messages": [
            {"role": "user", "content": _text(index, share)},
            {"role": "assistant", "content": _text(index + 1, share)},
            {"role": "tool", "content": _text(index + 2, share)},
            {"role": "assistant", "content": _text(index + 3, share)},
        ],
        "tool_calls": index % 3,
    }


def parked_states(count: int, *, state_bytes: int) -> dict[str, dict[str, Any]]:
    """Rollout id -> parked state, for ``count`` rollouts at attempt 0."""
    return {
        rollout_id: parked_state(index, state_bytes=state_bytes)
        for index, rollout_id in enumerate(rollout_ids(count))
    }


def record_bytes(capture_key: str, state: dict[str, Any]) -> bytes:
    """One records-file line as the protocol defines it, without the newline."""
    return orjson.dumps({"capture_key": capture_key, "state": state})


def commit_extras(kind: str, capture_keys: list[str]) -> dict[str, Any]:
    """The kind's extra commit-reply (and manifest) fields for these exported episodes.

    As Gym's kinds answer them: the policy model names the staged token rows
    of each episode, the agent names the episodes its own ``/run`` started.
    """
    if kind == "model":
        by_episode = {key: [f"{key}-row{turn}" for turn in range(3)] for key in capture_keys}
        return {
            "staging_keys": sorted(row for rows in by_episode.values() for row in rows),
            "staging_keys_by_episode": by_episode,
        }
    if kind == "agent":
        return {"run_episode_ids": list(capture_keys)}
    return {}
