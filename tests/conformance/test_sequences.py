"""The protocol, row by row (cases.py), against every participant under test.

Each test reaches the row's starting phase with real control calls, sends
the row's request, and checks the reply, the phase after and the row's
follow-ups (checks.py). See conftest.py for what is under test.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance.cases import CASES, Case
from conformance.runner import require_applicable, run_case
from conformance.target import Participant


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_row(participant: Participant, case: Case, conformance_dir: Path) -> None:
    """The participant answers the row as the protocol says."""
    require_applicable(participant, case)
    problems = run_case(participant, case, conformance_dir)
    assert not problems, "\n".join(problems)
