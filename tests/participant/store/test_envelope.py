"""Tests for envckpt.participant.store.envelope: Gym's record envelope, and the earlier shape."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest

from envckpt.episodes import EnvironmentEpisode
from envckpt.participant import store
from envckpt.participant.store.envelope import from_record, to_record


def test_to_record_puts_the_episode_first_and_keeps_the_state_order() -> None:
    """The envelope is {"episode_id": {rollout_id, attempt}, ...state} in export order."""
    record = to_record(EnvironmentEpisode("r1", 2), {"zeta": 1, "alpha": {"b": 1, "a": 2}})
    assert record == {
        "episode_id": {"rollout_id": "r1", "attempt": 2},
        "zeta": 1,
        "alpha": {"b": 1, "a": 2},
    }
    assert list(record) == ["episode_id", "zeta", "alpha"]
    assert list(record["episode_id"]) == ["rollout_id", "attempt"]


@pytest.mark.parametrize("state", [{"episode_id": 1, "turn": 2}, [1, 2], "text"])
def test_to_record_refuses_a_state_the_envelope_cannot_hold(state: Any) -> None:
    """A state that is not an object, or has its own episode_id, is refused."""
    with pytest.raises(ValueError):
        to_record(EnvironmentEpisode("r1", 0), state)


def test_from_record_reads_both_shapes_back() -> None:
    """Gym's envelope and envckpt's earlier {capture_key, state} give episode and state."""
    episode = EnvironmentEpisode("r1", 3)
    state = {"zeta": 1, "turn": 3}
    episode_back, state_back = from_record(to_record(episode, state))
    assert (episode_back, state_back) == (episode, state)
    assert list(state_back) == ["zeta", "turn"]
    legacy = {"capture_key": "r1-a3", "state": {"zeta": 1, "turn": 3}}
    assert from_record(legacy) == (episode, state)


@pytest.mark.parametrize(
    "record",
    [
        {"episode_id": {"rollout_id": "r1"}, "turn": 1},
        {"episode_id": {"rollout_id": "r1", "attempt": 0, "x": 1}},
        {"episode_id": {"rollout_id": "r1", "attempt": True}},
        {"episode_id": {"rollout_id": "r1", "attempt": -1}},
        {"episode_id": {"rollout_id": "../r1", "attempt": 0}},
        {"episode_id": {"rollout_id": "r1-a2", "attempt": 0}},
        {"episode_id": "r1"},
        {"capture_key": "r1", "state": [1]},
        {"capture_key": 7, "state": {}},
        {"capture_key": "r1", "state": {}, "extra": 1},
        {"capture_key": "r1"},
        {"turn": 1},
    ],
)
def test_from_record_refuses_anything_else(record: dict[str, Any]) -> None:
    """A record that is in neither shape, or names no valid episode, is a ValueError."""
    with pytest.raises(ValueError):
        from_record(record)


def test_a_written_checkpoint_meets_what_gyms_reader_checks(tmp_path: Path) -> None:
    """Every line names its episode, the manifest has exactly Gym's fields, and the digest
    and count cover the whole file under a digest-named records file."""
    records = [to_record(EnvironmentEpisode(f"r{i}", i), {"turn": i}) for i in range(3)]
    manifest = store.write_checkpoint(
        tmp_path, kind="model", instance="policy", checkpoint_id="c1", records=records
    )
    directory = store.participant_dir(tmp_path, "model", "policy")
    body = json.loads((directory / store.MANIFEST_NAME).read_text())
    assert set(body) == set(store.STANDARD_FIELDS)
    assert (body["schema_version"], body["kind"], body["instance"]) == (1, "model", "policy")
    assert re.fullmatch(r"records-[0-9a-f]{64}\.jsonl", body["records_file"])
    raw = (directory / body["records_file"]).read_bytes()
    assert hashlib.sha256(raw).hexdigest() == body["records_sha256"] == manifest.records_sha256
    lines = raw.splitlines()
    assert len(lines) == body["record_count"] == 3
    for i, line in enumerate(lines):
        assert json.loads(line)["episode_id"] == {"rollout_id": f"r{i}", "attempt": i}


@pytest.mark.parametrize("state", [{"episode_id": 1, "turn": 2}, [1, 2], "text", None])
def test_check_envelope_refuses_what_to_record_refuses(state: Any) -> None:
    """check_envelope raises for exactly the states to_record raises for."""
    episode = EnvironmentEpisode("r1", 0)
    with pytest.raises(ValueError):
        store.check_envelope(episode, state)
    with pytest.raises(ValueError):
        to_record(episode, state)


@pytest.mark.parametrize(
    "state", [{}, {"zeta": 1, "alpha": {"b": 1, "a": 2}}, {"text": "é", "none": None, "n": 2**70}]
)
def test_envelope_line_is_the_records_line(state: dict[str, Any]) -> None:
    """envelope_line writes the bytes encode_record writes for to_record's record."""
    episode = EnvironmentEpisode("r1", 3)
    assert store.envelope_line(episode, state) == store.encode_record(to_record(episode, state))


def test_envelope_lines_are_envelope_line_of_each_pair() -> None:
    """The lazy many-pair form writes exactly envelope_line's bytes, in order."""
    pairs = [
        (EnvironmentEpisode("r1", 0), {"turn": 1, "none": None}),
        (EnvironmentEpisode("r2", 4), {"n": 2**70, "text": "é"}),
        (EnvironmentEpisode("r3", 0), {}),
    ]
    assert list(store.envelope_lines(pairs)) == [store.envelope_line(e, s) for e, s in pairs]


def test_envelope_lines_refuse_nan_when_reached() -> None:
    """A NaN in any state is refused by the lazy form too, at that state."""
    pairs = [
        (EnvironmentEpisode("r1", 0), {"ok": 1}),
        (EnvironmentEpisode("r2", 0), {"x": float("nan")}),
    ]
    lines = store.envelope_lines(pairs)
    assert next(lines) == store.envelope_line(*pairs[0])
    with pytest.raises(ValueError):
        next(lines)


def test_check_envelope_accepts_plain_and_other_mappings() -> None:
    """A dict and a read-only mapping without an episode_id field both pass."""
    from types import MappingProxyType

    store.check_envelope(EnvironmentEpisode("r1", 0), {"turn": 1})
    store.check_envelope(EnvironmentEpisode("r1", 0), MappingProxyType({"turn": 1}))
    with pytest.raises(ValueError):
        store.check_envelope(EnvironmentEpisode("r1", 0), MappingProxyType({"episode_id": 1}))


def test_envelope_line_refuses_nan() -> None:
    """A NaN in a state is refused on the envelope's fast path too."""
    with pytest.raises(ValueError):
        store.envelope_line(EnvironmentEpisode("r1", 0), {"reward": float("nan")})


def test_check_envelopes_refuses_the_first_unfit_state_and_passes_the_rest() -> None:
    """Each pair gets check_envelope's verdict: fit states pass, an unfit one raises."""
    from types import MappingProxyType

    fit = [
        (EnvironmentEpisode("r1", 0), {"turn": 1}),
        (EnvironmentEpisode("r2", 0), MappingProxyType({"turn": 2})),
    ]
    store.check_envelopes(fit)
    for bad in ({"episode_id": 1}, [1], MappingProxyType({"episode_id": 2})):
        with pytest.raises(ValueError, match="r3"):
            store.check_envelopes([*fit, (EnvironmentEpisode("r3", 0), bad)])
