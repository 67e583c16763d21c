"""Tests for envckpt.demo and envckpt.demo.inprocess: the CLI, its directory, the in-process run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import envckpt.demo
import envckpt.demo.inprocess
from envckpt.demo.plan import Interruption
from envckpt.demo.report import NUMBERS, Verdict
from envckpt.demo.scenario import DemoSettings

from helpers.demo_cli import restored_logging, run_main

SMALL = ["--instances", "2", "--rollouts", "12", "--snapshot-every", "0.2"]


def test_the_in_process_demo_kills_twice_restores_and_passes(tmp_path: Path) -> None:
    """Default kills (mid-run, then inside the restore): PASS, tables, verdict.json."""
    code, output, _ = run_main(["--in-process", *SMALL, "--seed", "1", "--dir", str(tmp_path)])
    assert code == 0, output
    assert "VERDICT: PASS" in output and "FAIL" not in output.replace("failed snapshots", "")
    assert "SIGKILL after" in output and "SIGKILL inside the restore" in output
    assert "work saved:" in output
    # Tables and text within 100 columns (the line naming the directory holds its path).
    lines = [line for line in output.splitlines() if str(tmp_path) not in line]
    assert max(len(line) for line in lines) <= 100, "CI logs never wrap"
    verdict = json.loads((tmp_path / "verdict.json").read_text())
    assert set(verdict) == {"passed", "checks", *NUMBERS}
    assert verdict["passed"] is True and verdict["kills"] == 2 and verdict["restores"] == 1
    assert verdict["continued_from_saved_turn"] > 0
    # Snapshots go directly under --dir, not under snapshots/snapshots.
    published = list((tmp_path / "snapshots").iterdir())
    assert published and all((p / "MANIFEST.json").is_file() for p in published)
    assert not (tmp_path / "snapshots" / "snapshots").exists()
    assert len(json.loads((tmp_path / "results.json").read_text())) == 12


def test_the_in_process_demo_with_preemption_redoes_no_turn(tmp_path: Path) -> None:
    """--preempt: the final snapshot is restored and no turn is recomputed."""
    code, output, _ = run_main(["--in-process", *SMALL, "--preempt", "--dir", str(tmp_path)])
    assert code == 0, output
    assert "SIGTERM: final snapshot" in output
    verdict = json.loads((tmp_path / "verdict.json").read_text())
    assert verdict["passed"] and verdict["turns_recomputed"] == 0
    checks = {c["check"]: c["passed"] for c in verdict["checks"]}
    assert checks["no turn was redone after a preemption"]
    assert checks["each preemption published a final snapshot the restart used"]


def test_a_non_empty_dir_is_refused_and_force_clears_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reused directory would mix two runs: refused with a clear message, unless --force."""
    (tmp_path / "events.jsonl").write_text('{"event": "from another run"}\n')
    (tmp_path / "old").mkdir()
    code, output, errors = run_main(["--in-process", *SMALL, "--dir", str(tmp_path)])
    assert code == 2 and output == ""
    assert "is not empty" in errors and "--force" in errors and "Traceback" not in errors
    assert (tmp_path / "old").is_dir()

    seen: list[list[str]] = []

    async def fake(settings: DemoSettings, plan: list[Interruption]) -> tuple[Verdict, str]:
        seen.append(sorted(p.name for p in settings.directory.iterdir()))
        verdict = Verdict()
        verdict.check("ran", True)
        return verdict, "tables"

    monkeypatch.setattr(envckpt.demo.inprocess, "run_demo", fake)
    (tmp_path / "snapshots").mkdir()
    code, output, errors = run_main(["--in-process", *SMALL, "--dir", str(tmp_path), "--force"])
    # The previous run's entries go; "old" is not a demo's: left, and named.
    assert code == 0 and seen == [["old"]]
    assert f"--force left {tmp_path.resolve() / 'old'}" in errors


def test_force_never_clears_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--force refuses to clear the working directory (or one above it)."""
    (tmp_path / "precious.txt").write_text("keep me")
    monkeypatch.chdir(tmp_path)
    code, _, errors = run_main(["--in-process", *SMALL, "--dir", ".", "--force"])
    assert code == 2 and "refusing to clear" in errors
    assert (tmp_path / "precious.txt").read_text() == "keep me"


def test_a_dir_that_is_a_file_is_refused(tmp_path: Path) -> None:
    """--dir naming a file is a clear refusal, not a traceback."""
    target = tmp_path / "a-file"
    target.write_text("x")
    code, _, errors = run_main(["--in-process", *SMALL, "--dir", str(target)])
    assert code == 3 and "not a directory" in errors  # an unusable directory: exit 3


def test_the_demo_exits_non_zero_on_a_failing_verdict(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """main returns 1 and prints VERDICT: FAIL when the verdict fails; its temporary directory
    is kept and named, with its verdict.json."""
    seen: list[Path] = []

    async def failing(settings: DemoSettings, plan: list[Interruption]) -> tuple[Verdict, str]:
        seen.append(settings.directory)
        verdict = Verdict()
        verdict.check("something held", False, "it did not")
        return verdict, "tables"

    monkeypatch.setattr(envckpt.demo.inprocess, "run_demo", failing)
    with restored_logging():
        assert envckpt.demo.main(["--in-process", "--instances", "1", "--rollouts", "1"]) == 1
    output = capsys.readouterr().out
    assert "VERDICT: FAIL" in output and "tables" in output
    assert len(seen) == 1 and seen[0].is_dir()
    assert f"run directory: {seen[0]}" in output
    assert f"verdict: {seen[0] / 'verdict.json'}" in output
    shutil.rmtree(seen[0])


@pytest.mark.parametrize("argv", [["--kills", "0"], ["--in-process", "--ray"]])
def test_arguments_that_cannot_make_a_demo_are_refused(argv: list[str]) -> None:
    """No interruption means no restore to show; in-process and Ray exclude each other."""
    with restored_logging(), pytest.raises(SystemExit) as caught:
        envckpt.demo.main(argv)
    assert caught.value.code == 2
