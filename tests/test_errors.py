"""Tests for envckpt.errors: every error survives pickle with all its fields."""

from __future__ import annotations

import json
import pickle

import pytest

from envckpt.errors import (
    ALL_ERRORS,
    CoordinationError,
    CorruptCheckpoint,
    DeadlineExceeded,
    EnvckptError,
    GymCheckpointUnavailable,
    IllegalTransition,
    IncompatibleCheckpoint,
    ManifestTooLarge,
    ParticipantError,
    ProtocolViolation,
    SnapshotNotReady,
    UnsupportedDeployment,
    error_from_reply,
)
from envckpt.protocol import ERROR_STATUS

SAMPLES: list[EnvckptError] = [
    EnvckptError("base"),
    IllegalTransition(machine="m", instance="s/replica-0", state="resumed", trigger="commit"),
    GymCheckpointUnavailable(
        "down",
        operation="prepare",
        failures={"agent": "stale_checkpoint: done", "tools": "refused"},
        codes={"agent": "stale_checkpoint"},
    ),
    SnapshotNotReady("blocked", blockers={"s/replica-0": {"agent": ("r1", "r2-a1")}}),
    ProtocolViolation("bad reply"),
    DeadlineExceeded("late", deadline_ts=12.5),
    CorruptCheckpoint("digest mismatch", path="/x/records.jsonl"),
    ManifestTooLarge("too big", path="/x/MANIFEST.json", limit=10, found=11, unit="bytes"),
    IncompatibleCheckpoint("topology"),
    UnsupportedDeployment("environment participants"),
    CoordinationError("commit", {"b": "x", "a": "y"}, {"a": "invalid_phase"}),
    ParticipantError("stale_attempt", "r-a1 retired"),
]


def test_every_error_class_has_a_sample() -> None:
    """The sample list covers every public error class."""
    assert {type(error) for error in SAMPLES} == set(ALL_ERRORS)


@pytest.mark.parametrize("error", SAMPLES, ids=lambda e: type(e).__name__)
def test_pickle_round_trip_keeps_type_fields_and_message(error: EnvckptError) -> None:
    """Ray turns unpicklable errors into untyped ones, so every field must survive."""
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error)
    assert str(copy) == str(error)
    for name in type(error)._fields:
        assert getattr(copy, name) == getattr(error, name)


def test_illegal_transition_names_everything() -> None:
    """The message names machine, instance, trigger and state."""
    error = IllegalTransition(machine="m", instance="i", state="s", trigger="t")
    assert "m" in str(error) and "'i'" in str(error) and "'t'" in str(error)


def test_unavailable_errors_are_runtime_errors() -> None:
    """The seed raised RuntimeError subclasses; callers may catch those."""
    assert issubclass(GymCheckpointUnavailable, RuntimeError)
    assert issubclass(SnapshotNotReady, GymCheckpointUnavailable)


def test_participant_error_status_and_envelope() -> None:
    """Each code maps to its HTTP status and the protocol's envelope."""
    error = ParticipantError("admission_closed", "open")
    assert error.status == 409
    assert error.to_wire() == {"error": {"code": "admission_closed", "detail": "open"}}
    assert ERROR_STATUS["invalid_checkpoint_state"] == 422


def test_unknown_participant_code_is_refused() -> None:
    """Only the protocol's codes exist."""
    with pytest.raises(ValueError):
        ParticipantError("nope", "x")


def test_coordination_error_sorts_failures() -> None:
    """Failures are listed by server name, deterministically."""
    error = CoordinationError("resume", {"b": "1", "a": "2"})
    assert list(error.failures) == ["a", "b"]
    assert "resume" in str(error)


def test_codes_tell_whether_every_failure_was_one_refusal() -> None:
    """all_refused_with reads codes, never text: a transport failure is no refusal."""
    same = CoordinationError(
        "retire", {"a": "whatever", "b": "text"}, {"a": "stale_checkpoint", "b": "stale_checkpoint"}
    )
    assert same.all_refused_with("stale_checkpoint")
    mixed = CoordinationError(
        "retire", {"a": "stale_checkpoint: x", "b": "ConnectError"}, {"a": "stale_checkpoint"}
    )
    assert not mixed.all_refused_with("stale_checkpoint")
    assert not CoordinationError("retire", {}).all_refused_with("stale_checkpoint")


def test_codes_must_belong_to_failing_servers() -> None:
    """A code for a server that did not fail is a caller bug."""
    with pytest.raises(ValueError, match="did not fail"):
        CoordinationError("commit", {"a": "x"}, {"b": "invalid_phase"})


def test_error_from_reply_reads_envelopes_and_bounds_other_text() -> None:
    """Known codes are kept; unknown codes, other shapes and long bodies fall back to
    checkpoint_error with the status and a bounded excerpt."""
    envelope = json.dumps({"error": {"code": "stale_attempt", "detail": "old"}})
    assert (error_from_reply(409, envelope).code, error_from_reply(409, envelope).detail) == (
        "stale_attempt",
        "old",
    )
    for other in (
        json.dumps({"error": {"code": "weird", "detail": "x"}}),
        json.dumps({"error": {"code": "stale_attempt", "detail": 7}}),
        json.dumps({"detail": [{"msg": "bad"}]}),
        json.dumps(["error"]),
        json.dumps({"error": "stale_attempt"}),
        "not json",
    ):
        fallback = error_from_reply(409, other)
        assert fallback.code == "checkpoint_error" and fallback.detail == f"HTTP 409 {other}"
    long = error_from_reply(500, "x" * 1000)
    assert long.detail == "HTTP 500 " + "x" * 200
    assert error_from_reply(500, "é" * 150).detail == "HTTP 500 " + "é" * 100


def test_a_reply_nested_too_deeply_to_decode_is_a_checkpoint_error() -> None:
    """A reply nested deeper than the decoder's recursion limit is checkpoint_error with
    an excerpt, not a bare RecursionError (the decoder alone raises one on it)."""
    deep = '{"error":' * 100_000 + "1" + "}" * 100_000
    with pytest.raises(RecursionError):
        json.loads(deep)
    error = error_from_reply(502, deep)
    assert error.code == "checkpoint_error"
    assert error.detail == "HTTP 502 " + deep[:200]
