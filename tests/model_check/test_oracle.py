"""The oracle finds each planted bug of issue 23, and passes the engine as it is.

Each bug is planted in a copy inside this process (``plant``); the same
small configuration is explored without it (no violation) and with it (an
oracle violation with its trace).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from model_check.config import TINY, Config
from model_check.explore import explore
from model_check.plant import (
    plant_commit_from_preparing,
    plant_partial_participant_restore,
    plant_prepare_without_finished_check,
)

# A turn in flight while prepare waits: an instance is left preparing.
BLOCKED_PREPARE = TINY.but(name="blocked-prepare", max_turn=2, faults=(), crash_budget=0)
# A crash whose fresh deployment lacks a server that saved state.
PARTIAL = TINY.but(name="partial", faults=(), partial_restore=True)
# A prepare whose connection dropped arrives after its checkpoint was aborted.
DELAYED = TINY.but(name="delayed", faults=("delayed",), crash_budget=0)

CASES = [
    pytest.param(BLOCKED_PREPARE, plant_commit_from_preparing, "commit in preparing", id="a"),
    pytest.param(PARTIAL, plant_partial_participant_restore, "not deployed", id="b"),
    pytest.param(DELAYED, plant_prepare_without_finished_check, "stale_checkpoint", id="c"),
]


@pytest.mark.slow  # explores each configuration whole, twice: make verify
@pytest.mark.parametrize(("config", "plant", "symptom"), CASES)
def test_the_oracle_finds_the_planted_bug(
    config: Config, plant: Callable[[pytest.MonkeyPatch], None], symptom: str
) -> None:
    clean = explore(config, stop_at_first=True)
    assert clean.violations == 0, clean.report()
    assert clean.oracle_violations == 0
    with pytest.MonkeyPatch.context() as patch:
        plant(patch)
        planted = explore(config, stop_at_first=True)
    assert planted.oracle_violations >= 1, planted.report()
    problems = [p for finding in planted.findings for p in finding.problems]
    assert any(symptom in p for p in problems), problems
    again = explore(config, stop_at_first=True)  # restored: the engine passes again
    assert again.violations == 0, again.report()
