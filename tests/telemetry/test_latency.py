"""Tests for envckpt.telemetry.latency: who held the pause, and the spread over instances."""

from __future__ import annotations

import pytest

from envckpt.telemetry.latency import InstanceTelemetry, LatencySummary, slowest_first

from helpers.telemetry_samples import instance


def test_the_summary_has_nearest_rank_percentiles_and_the_slowest_instance() -> None:
    """Ten latencies 0.1..1.0: p50 0.5, p90 0.9, max 1.0 held by instance 9."""
    latencies = {f"s/replica-{i}": (i + 1) / 10 for i in range(10)}
    summary = LatencySummary.of(latencies)
    assert (summary.count, summary.p50, summary.p90, summary.max) == (10, 0.5, 0.9, 1.0)
    assert summary.slowest == "s/replica-9"
    assert LatencySummary.of({}) == LatencySummary()


def test_slowest_first_orders_by_what_each_instance_held() -> None:
    """Prepare plus commit decides the order; ties go by id; the limit cuts the rest."""
    a, b, c = (
        instance("s/replica-0", 0.1, 0.1),
        instance("s/replica-1", 0.3, 0.0),
        instance("s/replica-2", 0.0, 0.2),
    )
    assert [i.instance_id for i in slowest_first([a, b, c], limit=2)] == [
        "s/replica-1",
        "s/replica-0",
    ]


def test_an_instance_round_trips_through_json() -> None:
    """Participants, None latencies included, come back equal."""
    record = instance("s/replica-0", 0.25, 0.5)
    assert InstanceTelemetry.from_json(record.to_json()) == record
    assert LatencySummary.from_json(LatencySummary(3, 0.1, 0.2, 0.3, "x").to_json()).max == 0.3


def test_a_tampered_instance_is_refused_naming_the_field() -> None:
    """A negative latency or a participant that is not an object is an error, not a value."""
    body = instance("s/replica-0", 0.25, 0.5).to_json()
    with pytest.raises(ValueError, match="prepare_seconds"):
        InstanceTelemetry.from_json({**body, "prepare_seconds": -1})
    with pytest.raises(TypeError, match="participants"):
        InstanceTelemetry.from_json({**body, "participants": ["policy_model"]})
    with pytest.raises(TypeError, match="latency summary"):
        LatencySummary.from_json([1, 2])
