"""Tests for envckpt.crashpoints: named points, the nth-time handlers, nothing by default."""

from __future__ import annotations

import pytest

from envckpt import crashpoints
from envckpt.crashpoints import POINTS, SimulatedCrash, crashpoint, install, kill_at, raise_at


def test_without_a_handler_a_crash_point_does_nothing() -> None:
    """Product code calls crashpoint everywhere; by default it has no effect."""
    install(None)
    for point in POINTS:
        crashpoint(point)


def test_raise_at_strikes_only_the_nth_time_at_its_point() -> None:
    """Other points and earlier passes go by; the nth pass raises SimulatedCrash."""
    install(raise_at("restore.validated", nth=2))
    try:
        crashpoint("snapshot.under_cut")
        crashpoint("restore.validated")
        with pytest.raises(SimulatedCrash) as caught:
            crashpoint("restore.validated")
        assert caught.value.point == "restore.validated"
        crashpoint("restore.validated")  # only the nth time
    finally:
        install(None)


@pytest.mark.parametrize("make", [kill_at, raise_at])
def test_an_unknown_point_is_refused(make: object) -> None:
    """A typo in a crash point would silently never strike: refused at once."""
    with pytest.raises(ValueError, match="unknown crash point"):
        make("snapshot.nowhere")  # type: ignore[operator]


def test_the_points_cover_snapshot_restore_and_prune() -> None:
    """The end-to-end sweeps draw from these tuples."""
    assert set(crashpoints.SNAPSHOT_POINTS) | set(crashpoints.RESTORE_POINTS) | set(
        crashpoints.PRUNE_POINTS
    ) == set(POINTS)
    assert "restore.environment_restored" in crashpoints.RESTORE_POINTS
