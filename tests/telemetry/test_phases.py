"""Tests for envckpt.telemetry.phases: a record's step seconds, in order, through JSON."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from envckpt.telemetry.phases import PhaseSeconds


@dataclass(frozen=True, slots=True)
class TwoSteps(PhaseSeconds):
    first: float = 0.0
    second: float = 0.0


def test_steps_come_in_field_order_and_survive_json() -> None:
    """items() follows the fields' order; from_json(to_json()) gives the phases back."""
    phases = TwoSteps(first=0.25, second=1.5)
    assert phases.items() == (("first", 0.25), ("second", 1.5))
    assert phases.to_json() == {"first": 0.25, "second": 1.5}
    assert TwoSteps.from_json(phases.to_json()) == phases


def test_a_step_left_out_reads_as_not_reached() -> None:
    """A missing step is 0.0 (the step was not reached)."""
    assert TwoSteps.from_json({"second": 2}) == TwoSteps(second=2.0)


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ([0.1, 0.2], TypeError),
        ({"first": 0.1, "third": 0.2}, ValueError),
        ({"first": -1.0}, ValueError),
        ({"first": "slow"}, TypeError),
    ],
)
def test_phases_that_are_not_step_seconds_are_refused(body: object, error: type[Exception]) -> None:
    """Not an object, an unknown step, negative or non-numeric seconds: a typed error."""
    with pytest.raises(error):
        TwoSteps.from_json(body)  # type: ignore[arg-type]
