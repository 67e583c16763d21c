"""One record line's envelope: which episode attempt it belongs to, and its state.

envckpt writes NeMo Gym's record envelope, so Gym's reader can select and
verify envckpt's records file line by line::

    {"episode_id": {"rollout_id": "r1", "attempt": 2}, <the kind's state fields...>}

The kind's state fields sit beside ``episode_id``, in the order the kind
exported them (restored state must look exactly as exported). envckpt's
earlier shape, ``{"capture_key": "r1-a2", "state": {...}}``, is still read,
so checkpoints written before the change stay restorable::

    record = to_record(episode, state)          # Gym's envelope, for the writer
    episode, state = from_record(record)        # either shape; ValueError if neither

    check_envelope(episode, state)              # what to_record checks, nothing built
    check_envelopes(pairs)                      # the same for many pairs
    line = envelope_line(episode, state)        # to_record's line, encoded (no newline)
    lines = envelope_lines(exported)            # the same for many pairs, lazily
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from envckpt.episodes import EnvironmentEpisode
from envckpt.participant.store.lines import encode_record, encode_records

EPISODE_KEY = "episode_id"
# envckpt's earlier record shape: exactly these two keys.
LEGACY_KEYS = frozenset({"capture_key", "state"})


def check_envelope(episode: EnvironmentEpisode, state: object) -> None:
    """Raise ValueError if ``state`` is not an object or has its own ``episode_id``
    field, which the envelope needs."""
    if type(state) is dict and EPISODE_KEY not in state:
        return  # the usual state: a plain dict, checked without the ABC's isinstance
    if not isinstance(state, Mapping):
        raise ValueError(f"{episode.capture_key}: exported state is not a JSON object")
    if EPISODE_KEY in state:
        raise ValueError(f"{episode.capture_key}: exported state has a field named {EPISODE_KEY!r}")


def check_envelopes(pairs: Iterable[tuple[EnvironmentEpisode, object]]) -> None:
    """``check_envelope`` of each (episode, state) pair: plain dicts without an
    ``episode_id`` field pass in one comprehension, anything else is checked."""
    for episode, state in [
        (episode, state)
        for episode, state in pairs
        if type(state) is not dict or EPISODE_KEY in state
    ]:
        check_envelope(episode, state)


def to_record(episode: EnvironmentEpisode, state: Mapping[str, Any]) -> dict[str, Any]:
    """Gym's envelope for ``episode``'s exported ``state`` (a JSON object).

    Raises ValueError as ``check_envelope`` does.
    """
    check_envelope(episode, state)
    record: dict[str, Any] = {EPISODE_KEY: episode.to_wire()}
    record.update(state)
    return record


def envelope_line(episode: EnvironmentEpisode, state: Mapping[str, Any]) -> bytes:
    """``to_record(episode, state)`` as its records-file line, for a state already checked.

    The envelope is built in one dict display (the hot path of a commit).
    """
    wire = {"rollout_id": episode.rollout_id, "attempt": episode.attempt}
    return encode_record({EPISODE_KEY: wire, **state})


def envelope_lines(
    exported: Iterable[tuple[EnvironmentEpisode, Mapping[str, Any]]], *, allow_nan: bool = False
) -> Iterator[bytes]:
    """``envelope_line`` of each (episode, state) pair, lazily (states already checked).

    A commit's hot loop: the envelopes go to one encoding loop rather than
    through two calls per record.
    """
    return encode_records(
        (
            {EPISODE_KEY: {"rollout_id": episode.rollout_id, "attempt": episode.attempt}, **state}
            for episode, state in exported
        ),
        allow_nan=allow_nan,
    )


def from_record(record: Mapping[str, Any]) -> tuple[EnvironmentEpisode, dict[str, Any]]:
    """The episode attempt and the state of one record, in Gym's shape or envckpt's earlier one.

    Raises ValueError for anything else (the restore reports it as
    ``invalid_checkpoint_state``).
    """
    if EPISODE_KEY in record:
        # Both keys are required, as on the wire (Gym's reader would default
        # a missing attempt to 0; its writer always writes it).
        episode = EnvironmentEpisode.from_wire(record[EPISODE_KEY])
        return episode, {key: value for key, value in record.items() if key != EPISODE_KEY}
    if set(record) == LEGACY_KEYS and isinstance(record["state"], Mapping):
        key = record["capture_key"]
        if not isinstance(key, str):
            raise ValueError(f"record capture_key {key!r} is not a string")
        return EnvironmentEpisode.from_capture_key(key), dict(record["state"])
    raise ValueError(f"malformed record with keys {sorted(record)[:5]}")
