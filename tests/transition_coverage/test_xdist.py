"""Under pytest-xdist the workers' shares are merged into one coverage file, nothing lost.

A real pytest run with two workers (``-n 2``, as ``make verify`` runs) over two
small test modules, each firing one row of the participant table.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from envckpt.statecharts.overlay import load_coverage

from transition_coverage.rows import IN_PROCESS

TESTS = Path(__file__).resolve().parents[1]
MODULE = """
from envckpt.machines.binding import BoundMachine
from envckpt.machines.tables import PARTICIPANT_PHASES


def test_fires_{trigger}():
    machine = BoundMachine(PARTICIPANT_PHASES)
    machine.fire(machine.new("{trigger}"), "{trigger}")
"""


def test_two_workers_shares_are_merged_and_removed(tmp_path: Path) -> None:
    """Each worker runs both tests (``--dist each``): every row counts twice, once per share.

    A share left by an earlier run is removed, not merged.
    """
    for trigger in ("prepare", "restore"):
        (tmp_path / f"test_{trigger}.py").write_text(MODULE.format(trigger=trigger))
    target = tmp_path / "out" / "coverage.jsonl"
    target.parent.mkdir()
    stale = target.with_name("coverage.jsonl.gw7")
    stale_row = {"event": "transition", "machine": "participant_phases", "instance_id": "*"}
    stale_row |= {"source": "committed", "trigger": "expire", "dest": "idle", "via": "http"}
    stale.write_text(json.dumps(stale_row) + "\n")
    env = dict(os.environ, PYTHONPATH=str(TESTS))
    env.pop("ENVCKPT_GYM_LOG", None)  # this run's own, not the outer session's
    run = subprocess.run(
        [
            sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2",
            "--dist", "each", "-p", "transition_coverage.plugin",
            f"--transition-coverage={target}", "test_prepare.py", "test_restore.py",
        ],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert "4 passed" in run.stdout
    rows = sorted((e.source, e.trigger, e.dest, e.via, e.count) for e in load_coverage(target))
    assert rows == [
        ("idle", "prepare", "preparing", IN_PROCESS, 2),
        ("idle", "restore", "restored", IN_PROCESS, 2),
    ]
    assert sorted(p.name for p in target.parent.iterdir()) == ["coverage.jsonl"]
