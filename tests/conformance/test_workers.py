"""The conformance suite against envckpt's own servers run with 4 uvicorn workers each.

Every row must hold for a participant whose state is spread over 4 worker
processes, as for one process: the protocol profile and envckpt's stricter
rows (a refused call changes nothing) alike. The suite runs in a child pytest (its participants are
session fixtures started from the command line's options); about 4 minutes
(three deployments of 3 x 4 workers, then every row), so it is a campaign:
``make verify`` runs it (``ENVCKPT_CAMPAIGNS=1``), ``make test`` skips it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.skipif(
    not os.environ.get("ENVCKPT_CAMPAIGNS"), reason="a campaign: make verify (ENVCKPT_CAMPAIGNS=1)"
)
def test_a_four_worker_participant_passes_every_conformance_row(tmp_path: Path) -> None:
    """Every row (protocol and envckpt profiles) holds for the model, agent and resources
    participants (and the restart_only one) when each runs 4 uvicorn workers."""
    command = [
        sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
        str(TESTS / "conformance" / "test_sequences.py"),
        "--sim-workers", "4",
        "--basetemp", str(tmp_path / "run"), "-o", "timeout=900",
    ]  # fmt: skip
    run = subprocess.run(command, cwd=TESTS.parent, capture_output=True, text=True, timeout=3600)
    tail = "\n".join(run.stdout.splitlines()[-30:])
    assert run.returncode == 0, tail
    assert " passed" in tail and " failed" not in tail, tail
