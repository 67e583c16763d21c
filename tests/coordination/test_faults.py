"""Tests for envckpt.coordination.faults: fault matching, counting and the fired log."""

from __future__ import annotations

import pytest

from envckpt.coordination.faults import FAULT_KINDS, Fault, FaultPlan


def test_unknown_kinds_and_bad_counts_are_refused() -> None:
    """A fault needs a known kind and times of -1 or a non-negative count."""
    with pytest.raises(ValueError):
        Fault("meteor")
    for times in (-2, True, 1.5):
        with pytest.raises(ValueError):
            Fault("error", times=times)  # type: ignore[arg-type]
    assert {Fault(kind).kind for kind in FAULT_KINDS} == set(FAULT_KINDS)


def test_matching_by_server_and_route() -> None:
    """None matches any server or route; a set field must match exactly."""
    assert Fault("error").matches("policy", "commit")
    assert Fault("error", server="policy").matches("policy", "prepare")
    assert not Fault("error", server="policy").matches("agent", "prepare")
    assert Fault("error", route="commit").matches("agent", "commit")
    assert not Fault("error", server="policy", route="commit").matches("policy", "prepare")


def test_a_fault_fires_its_number_of_times() -> None:
    """times counts down to zero, then the fault no longer matches."""
    plan = FaultPlan()
    fault = plan.add("drop_reply", server="policy", times=2)
    assert plan.take("policy", "commit", "drop_reply") is fault
    assert plan.take("policy", "resume", "drop_reply") is fault
    assert plan.take("policy", "commit", "drop_reply") is None
    assert fault.times == 0


def test_forever_and_never() -> None:
    """times=-1 fires forever; times=0 never fires."""
    plan = FaultPlan()
    plan.add("error", server="never", times=0)
    forever = plan.add("error", times=-1)
    for _ in range(5):
        assert plan.take("never", "status", "error") is forever
    assert forever.times == -1


def test_take_filters_by_kind_and_picks_the_first_match() -> None:
    """take only considers the asked kinds, in the order the faults were added."""
    plan = FaultPlan()
    plan.add("unreachable", server="a")
    first = plan.add("error", route="commit")
    plan.add("error", server="a")
    assert plan.take("a", "commit", "drop_reply") is None
    assert plan.take("a", "commit", "error", "drop_reply") is first
    assert plan.take("a", "commit", "unreachable") is not None


def test_fired_log_and_clear() -> None:
    """Every fired fault is logged as (kind, server, route); clear drops pending faults."""
    plan = FaultPlan()
    plan.add("unreachable", server="a", times=-1)
    plan.take("a", "status", "unreachable")
    plan.take("b", "status", "unreachable")
    plan.take("a", "prepare", "unreachable")
    assert plan.fired == [("unreachable", "a", "status"), ("unreachable", "a", "prepare")]
    plan.clear()
    assert plan.take("a", "status", "unreachable") is None
    assert len(plan.fired) == 2
