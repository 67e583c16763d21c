"""The README's example runs as written, and its prose names what the example uses."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def example() -> str:
    """The first Python block of the section "A trainer's view"."""
    section = README.read_text().split("## A trainer's view", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match is not None, "the section has no python block"
    return match.group(1)


def test_the_readme_example_runs_as_written(tmp_path: Path) -> None:
    """Copied out and run by itself, it snapshots a rollout in flight at step 1."""
    script = tmp_path / "readme_example.py"
    script.write_text(example())
    done = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={**os.environ, "TMPDIR": str(tmp_path)},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    first, second = done.stdout.splitlines()
    assert re.fullmatch(
        r"rollouts-step0000000001-[0-9a-f]{12} \d+\.\d{3} s paused, "
        r"slowest prepare \d+\.\d{3} s, 3 records",
        first,
    ), first
    assert second == "[(1, 1)]"
    assert done.stderr == "", "the library printed something nobody asked for"


def test_the_readme_says_what_gyms_is() -> None:
    """The example's gyms, and how a real deployment replaces it, are explained."""
    text = README.read_text()
    assert "`gyms` maps each Gym instance" in text
    assert "client=server_client, auth_token=token" in text
    assert "gyms = {" in example()
