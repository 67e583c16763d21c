"""Tests for envckpt.trainer.ledger_entry: one rollout's entry, restore matching, and the errors."""

from __future__ import annotations

import json
import pickle
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envckpt.episodes import EnvironmentEpisode
from envckpt.errors import CorruptCheckpoint, ProtocolViolation
from envckpt.machines.tables import LedgerStatus
from envckpt.trainer.ledger_entry import (
    LedgerCorrupt,
    LedgerEntry,
    LedgerError,
    RestoreMismatch,
    dropped_to_json,
    parse_dropped_attempt,
    restore_mismatches,
)

from helpers.examples import examples

R, D, S, F, A = (
    LedgerStatus.RESERVED,
    LedgerStatus.DISPATCHED,
    LedgerStatus.SEALED,
    LedgerStatus.FAILED,
    LedgerStatus.ABANDONED,
)

rollout_ids = st.sampled_from(("r0", "r1", "task-7", "x.y"))
instance_ids = st.sampled_from(("i0", "i1", "math/replica-0"))
staging_keys = st.lists(st.text(min_size=1, max_size=6), max_size=4, unique=True).map(tuple)


@st.composite
def entries(draw: st.DrawFn) -> LedgerEntry:
    status = draw(st.sampled_from(list(LedgerStatus)))
    return LedgerEntry(
        rollout_id=draw(rollout_ids),
        attempt=draw(st.integers(0, 50)),
        instance_id=draw(instance_ids),
        status=status,
        staging_keys=draw(staging_keys),
        restored=status is R and draw(st.booleans()),
    )


# ----------------------------------------------------------------- LedgerEntry


def test_entry_validation() -> None:
    """Entries refuse bad ids, a restored mark outside reserved, and repeated keys."""
    with pytest.raises(ValueError):
        LedgerEntry("r-a1", 0, "i0", R)
    with pytest.raises(ValueError):
        LedgerEntry("r", 0, "i0", D, restored=True)
    with pytest.raises(ValueError):
        LedgerEntry("r", 0, "i0", R, staging_keys=("a", "a"))
    with pytest.raises(ValueError):
        LedgerEntry("r", 0, "", R)


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"attempt": -1}, "attempt"),
        ({"attempt": True}, "attempt"),
        ({"instance_id": 3}, "instance_id"),
        ({"status": "reserved"}, "LedgerStatus"),
        ({"staging_keys": ["k"]}, "tuple"),
        ({"staging_keys": ("",)}, "non-empty"),
        ({"restored": 1}, "bool"),
    ],
)
def test_entry_fields_must_have_their_types(fields: dict[str, Any], match: str) -> None:
    """A wrong type in any field is a ValueError naming it, not an entry."""
    values: dict[str, Any] = {"rollout_id": "r", "attempt": 0, "instance_id": "i0", "status": R}
    with pytest.raises(ValueError, match=match):
        LedgerEntry(**(values | fields))


@pytest.mark.parametrize(
    ("status", "restored", "on_instance"),
    [(R, False, False), (R, True, True), (D, False, True), (S, False, False), (F, False, False)],
)
def test_the_instance_holds_a_dispatched_or_a_restored_attempt(
    status: LedgerStatus, restored: bool, on_instance: bool
) -> None:
    """on_instance: dispatched, or reserved by a restore that installed it."""
    entry = LedgerEntry("r", 2, "i0", status, restored=restored)
    assert entry.on_instance is on_instance
    assert entry.episode == EnvironmentEpisode("r", 2)


@settings(max_examples=examples(300), deadline=None)
@given(entry=entries())
def test_an_entry_survives_json(entry: LedgerEntry) -> None:
    """from_json(to_json) through real JSON text gives the same entry back."""
    assert LedgerEntry.from_json(json.loads(json.dumps(entry.to_json()))) == entry


@pytest.mark.parametrize(
    "change",
    [
        lambda raw: raw.pop("restored"),
        lambda raw: raw.update(extra=1),
        lambda raw: raw.update(status="paused"),
        lambda raw: raw.update(staging_keys="k"),
        lambda raw: raw.update(attempt="1"),
        lambda raw: raw.update(restored=True),  # restored, but dispatched
    ],
    ids=["missing", "extra", "status", "keys-not-a-list", "attempt-text", "restored-dispatched"],
)
def test_from_json_refuses_anything_to_json_does_not_write(change: Any) -> None:
    """A missing or extra field, or a bad value, is a ValueError."""
    raw = LedgerEntry("r", 1, "i0", D, staging_keys=("k",)).to_json()
    change(raw)
    with pytest.raises(ValueError):
        LedgerEntry.from_json(raw)


def test_from_json_refuses_a_non_object() -> None:
    """A list is not an entry."""
    with pytest.raises(ValueError, match="exactly"):
        LedgerEntry.from_json(["r", 0])


# ---------------------------------------------------------- dropped attempts


@settings(max_examples=examples(200), deadline=None)
@given(
    dropped=st.dictionaries(
        instance_ids,
        st.frozensets(st.builds(EnvironmentEpisode, rollout_ids, st.integers(0, 5)), max_size=4),
        max_size=3,
    )
)
def test_dropped_attempts_read_back_as_written_in_sorted_order(
    dropped: dict[str, frozenset[EnvironmentEpisode]],
) -> None:
    """Each saved {instance_id, rollout_id, attempt} parses back; the list is sorted."""
    saved = dropped_to_json(dropped)
    parsed = [parse_dropped_attempt(raw) for raw in json.loads(json.dumps(saved))]
    assert parsed == sorted((i, e) for i, episodes in dropped.items() for e in episodes)


@pytest.mark.parametrize(
    "raw",
    [
        ["i0", "r", 0],
        {"instance_id": "i0", "rollout_id": "r"},
        {"instance_id": "i0", "rollout_id": "r", "attempt": 0, "extra": 1},
        {"instance_id": "", "rollout_id": "r", "attempt": 0},
        {"instance_id": 7, "rollout_id": "r", "attempt": 0},
        {"instance_id": "i0", "rollout_id": "r-a1", "attempt": 0},
        {"instance_id": "i0", "rollout_id": "r", "attempt": -1},
    ],
)
def test_a_malformed_dropped_attempt_is_refused(raw: object) -> None:
    """Anything but exactly {instance_id, rollout_id, attempt} with valid values: ValueError."""
    with pytest.raises(ValueError):
        parse_dropped_attempt(raw)


# --------------------------------------------------------- restore_mismatches

LEDGER = {
    "run": LedgerEntry("run", 0, "i0", D),
    "back": LedgerEntry("back", 2, "i1", R, restored=True),
    "new": LedgerEntry("new", 0, "i0", R),
    "done": LedgerEntry("done", 0, "i0", S),
    "lost": LedgerEntry("lost", 1, "i1", F),
    "gone": LedgerEntry("gone", 0, "i1", A),
}


def test_current_held_attempts_on_their_instance_match() -> None:
    """A dispatched attempt and a restored, not yet re-sent one are restorable."""
    assert restore_mismatches(LEDGER, [("i0", "run", 0), ("i1", "back", 2)]) == []


@pytest.mark.parametrize(
    ("triple", "problem"),
    [
        (("i0", "ghost", 0), "ghost: unknown to the ledger"),
        (("i0", "run", 1), "run: restored attempt 1, ledger holds 0"),
        (("i1", "run", 0), "run: restored on i1, ledger places it on i0"),
        (("i0", "new", 0), "new: ledger status reserved is not restorable"),
        (("i0", "done", 0), "done: ledger status sealed is not restorable"),
        (("i1", "lost", 1), "lost: ledger status failed is not restorable"),
        (("i1", "gone", 0), "gone: ledger status abandoned is not restorable"),
    ],
)
def test_each_mismatch_is_named(triple: tuple[str, str, int], problem: str) -> None:
    """Unknown, wrong attempt, wrong instance, or not held: one problem naming the rollout."""
    assert restore_mismatches(LEDGER, [triple]) == [problem]


def test_a_rollout_restored_twice_is_a_mismatch() -> None:
    """Two triples of one rollout: the second is reported as restored more than once."""
    problems = restore_mismatches(LEDGER, [("i0", "run", 0), ("i1", "run", 0)])
    assert problems == ["run: restored more than once"]


@settings(max_examples=examples(200), deadline=None)
@given(
    triples=st.lists(
        st.tuples(
            st.sampled_from(("i0", "i1")),
            st.sampled_from([*sorted(LEDGER), "ghost"]),
            st.integers(0, 3),
        ),
        max_size=5,
    )
)
def test_mismatches_are_empty_exactly_when_every_triple_is_a_held_current_attempt(
    triples: list[tuple[str, str, int]],
) -> None:
    """No problems iff each rollout appears once, as its current held attempt, on its instance."""
    rollouts = [rollout_id for _, rollout_id, _ in triples]
    fits = len(set(rollouts)) == len(rollouts) and all(
        rollout_id in LEDGER
        and LEDGER[rollout_id].attempt == attempt
        and LEDGER[rollout_id].instance_id == instance
        and LEDGER[rollout_id].on_instance
        for instance, rollout_id, attempt in triples
    )
    assert (restore_mismatches(LEDGER, triples) == []) == fits


# ----------------------------------------------------------------------- errors


def test_the_errors_belong_to_the_groups_callers_catch() -> None:
    """LedgerCorrupt is a CorruptCheckpoint; RestoreMismatch a ProtocolViolation."""
    assert issubclass(LedgerCorrupt, CorruptCheckpoint)
    assert issubclass(RestoreMismatch, ProtocolViolation)
    assert issubclass(LedgerError, RuntimeError)


@pytest.mark.parametrize(
    "error",
    [
        LedgerError("bad", rollout_id="r", action="seal", status="reserved"),
        LedgerCorrupt("bad", path="/x/ledger.json"),
        RestoreMismatch("bad", mismatches=("r: unknown",)),
    ],
)
def test_errors_survive_pickle(error: Exception) -> None:
    """Ledger errors round-trip through pickle with every field."""
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error)
    assert vars(copy) == vars(error)
    assert str(copy) == str(error)
