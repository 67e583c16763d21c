"""One rollout attempt, and the capture-key codec both protocol sides share.

The capture key names an attempt on rollout rows and on the wire:
``rollout_id`` for attempt 0, ``<rollout_id>-a<attempt>`` after that. Because
rollout ids may not end in ``-a<N>``, the key parses back unambiguously.

    episode = EnvironmentEpisode("task-7", 0)
    episode.capture_key                      # "task-7"
    episode.next_attempt().capture_key       # "task-7-a1"
    EnvironmentEpisode.from_capture_key("task-7-a1") == episode.next_attempt()
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from envckpt.ids import ATTEMPT_SUFFIX, validate_attempt, validate_rollout_id


@dataclass(frozen=True, order=True, slots=True)
class EnvironmentEpisode:
    """One attempt of one rollout: ``(rollout_id, attempt)``, attempt 0 first."""

    rollout_id: str
    attempt: int

    def __post_init__(self) -> None:
        validate_rollout_id(self.rollout_id)
        validate_attempt(self.attempt)

    @property
    def capture_key(self) -> str:
        """The attempt's key on rollout rows and on the wire."""
        if self.attempt == 0:
            return self.rollout_id
        return f"{self.rollout_id}-a{self.attempt}"

    def next_attempt(self) -> EnvironmentEpisode:
        """The attempt a restore continues this one as."""
        return EnvironmentEpisode(self.rollout_id, self.attempt + 1)

    @classmethod
    def from_capture_key(cls, capture_key: str) -> EnvironmentEpisode:
        """Parse a capture key; raise ValueError for one no episode produces."""
        if not isinstance(capture_key, str):
            raise ValueError(f"capture key must be a string, got {capture_key!r}")
        return _parse_capture_key(capture_key)

    def to_wire(self) -> dict[str, Any]:
        """The protocol's JSON form: both keys always present."""
        return {"rollout_id": self.rollout_id, "attempt": self.attempt}

    @classmethod
    def from_wire(cls, value: object) -> EnvironmentEpisode:
        """Parse ``{"rollout_id": str, "attempt": int}``; raise ValueError otherwise."""
        if not isinstance(value, Mapping) or set(value) != {"rollout_id", "attempt"}:
            raise ValueError(f"episode must be {{rollout_id, attempt}}, got {value!r}")
        return cls(value["rollout_id"], value["attempt"])


@functools.lru_cache(maxsize=1 << 16)
def _parse_capture_key(capture_key: str) -> EnvironmentEpisode:
    # Cached: the same keys come back in every reply of every snapshot, and
    # episodes are immutable, so a parsed one can be handed out again.
    match = ATTEMPT_SUFFIX.fullmatch(capture_key)
    if match is None:
        return EnvironmentEpisode(capture_key, 0)
    return EnvironmentEpisode(match["base"], int(match["attempt"]))


def sort_key(episode: EnvironmentEpisode) -> tuple[str, int]:
    """The episodes' order as a plain tuple: sorting with it avoids the
    dataclass comparison methods, which rebuild tuples on every comparison."""
    return (episode.rollout_id, episode.attempt)


# ``sort_key`` in C: sorting with it calls no Python function per episode.
_SORT_KEY = operator.attrgetter("rollout_id", "attempt")
_ROLLOUT_ID = operator.attrgetter("rollout_id")


def sorted_episodes(episodes: Iterable[EnvironmentEpisode]) -> tuple[EnvironmentEpisode, ...]:
    """``episodes`` deduplicated and in episode order."""
    items = list(episodes)
    # Rollout ids strictly increasing (a scope the coordinator sorted, a kind
    # that holds its episodes in order, one attempt each): already in order
    # and each once, so no sort, and no key tuple per episode for the
    # collector to count.
    rollout_ids = list(map(_ROLLOUT_ID, items))
    if all(map(operator.lt, rollout_ids, rollout_ids[1:])):
        return tuple(items)
    ordered = sorted(items, key=_SORT_KEY)
    keys = list(map(_SORT_KEY, ordered))
    # Sorted, equal episodes are neighbours: without any (the usual case, as
    # a scope names each episode once) no episode needs hashing.
    if all(map(operator.ne, keys, keys[1:])):
        return tuple(ordered)
    return tuple(sorted(set(ordered), key=_SORT_KEY))


def capture_keys(episodes: Iterable[EnvironmentEpisode]) -> list[str]:
    """Sorted capture keys of ``episodes``, the order the protocol replies in (each once)."""
    # ``capture_key`` spelled out: a commit lists every exported episode, and
    # the property's call per episode was most of this function's time.
    keys = sorted(
        [
            f"{episode.rollout_id}-a{episode.attempt}" if episode.attempt else episode.rollout_id
            for episode in episodes
        ]
    )
    # Sorted, a repeated key sits beside itself: without any (a restore's
    # reply lists each installed attempt once) no set of every key is built,
    # which at 50,000 episodes is 2 MiB more at a restore's peak.
    if all(map(operator.ne, keys, keys[1:])):
        return keys
    return sorted(set(keys))


def episodes_from_keys(keys: Iterable[str]) -> tuple[EnvironmentEpisode, ...]:
    """Sorted episodes parsed from capture keys."""
    return sorted_episodes(EnvironmentEpisode.from_capture_key(key) for key in keys)


def excluding(
    episodes: Iterable[EnvironmentEpisode], excluded: Iterable[EnvironmentEpisode]
) -> tuple[EnvironmentEpisode, ...]:
    """``episodes`` in their order, without ``excluded`` (a commit scope minus its restarts)."""
    dropped = frozenset(excluded)
    if not dropped:  # the usual scope has no restarts: no episode is hashed
        return tuple(episodes)
    return tuple(episode for episode in episodes if episode not in dropped)


def retired_by(held: EnvironmentEpisode, retired: Iterable[EnvironmentEpisode]) -> bool:
    """Whether retiring ``retired`` retires ``held``: an attempt and every earlier one."""
    return any(held.rollout_id == r.rollout_id and held.attempt <= r.attempt for r in retired)
