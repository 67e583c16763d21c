"""The benchmark harness at smoke size: it runs end to end and writes every figure.

Benchmarks print and never assert on speed; this only keeps them from rotting.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
# The figures issue 10 asks ``--json`` for, exactly.
KEYS = (
    "pause_over_floor_1",
    "pause_over_floor_8",
    "pause_over_floor_32",
    "pause_over_floor_256",
    "pause_over_floor_1000",
    "pause_over_floor_large_state_8",
    "trainer_path_over_floor_32",
    "coordinator_over_raw_client",
    "coordinator_cpu_us_per_call_32",
    "coordinator_cpu_over_raw_32",
    "store_over_raw",
    "restore_peak_mib_20mb",
    "restore_peak_mib_200mb",
    "logging_overhead",
    "logging_floor_overhead",
    "register_100k_seconds",
    "discover_100k_seconds",
)


def run_bench(tmp_path: Path, *args: str) -> dict[str, Any]:
    """``python -m bench --smoke --json`` from the checkout; the figures it wrote."""
    out = tmp_path / "figures.json"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH", "")]))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            "--smoke",
            "--json",
            str(out),
            "--dir",
            str(tmp_path),
            *args,
        ],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    figures: dict[str, Any] = json.loads(out.read_text())
    return figures


def problems(figures: dict[str, Any]) -> list[str]:
    """What is wrong with a figures file: keys missing or extra, values not finite numbers."""
    found = [f"missing {key}" for key in KEYS if key not in figures]
    found += [f"unexpected {key}" for key in figures if key not in KEYS]
    for key, value in figures.items():
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            found.append(f"{key} is not a number: {value!r}")
    return found


def test_smoke_run_writes_every_figure(tmp_path: Path) -> None:
    """Every figure of issue 10 is written, each a finite number, and nothing else."""
    figures = run_bench(tmp_path)
    assert problems(figures) == []
    assert list(figures) == list(KEYS)


def test_a_partial_run_is_reported_incomplete(tmp_path: Path) -> None:
    """Tampered: a run of one group leaves figures out, and the check names them."""
    figures = run_bench(tmp_path, "--only", "store")
    assert set(figures) == {"store_over_raw"}
    assert problems(figures) == [f"missing {key}" for key in KEYS if key != "store_over_raw"]
    assert problems({**figures, "store_over_raw": "fast"}) == [
        *(f"missing {key}" for key in KEYS if key != "store_over_raw"),
        "store_over_raw is not a number: 'fast'",
    ]
