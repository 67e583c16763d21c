"""Tests for envckpt.demo: the in-process demo's own verdict, and the judge behind it.

One small demo run (2 instances, 8 rollouts) is shared by the module; the
judge tests tamper with copies of its real results and audit log.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import structlog

import envckpt.demo
import envckpt.demo.inprocess
from envckpt.demo.report import Verdict
from envckpt.demo.scenario import DemoSettings, judge, make_tasks

Results = dict[str, dict[str, Any]]
Audit = list[dict[str, Any]]


@dataclass(frozen=True)
class DemoRun:
    code: int
    output: str
    settings: DemoSettings
    results: Results
    audit: Audit


@contextlib.contextmanager
def restored_logging() -> Iterator[None]:
    """The demo configures structlog globally; put the previous configuration back."""
    saved = structlog.get_config()
    try:
        yield
    finally:
        structlog.configure(**saved)


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> DemoRun:
    directory = tmp_path_factory.mktemp("demo")
    out = io.StringIO()
    with (
        restored_logging(),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(io.StringIO()),
    ):
        code = envckpt.demo.main(
            ["--in-process", "--instances", "2", "--rollouts", "8", "--dir", str(directory)]
        )
    audit_path = directory / "audit.jsonl"
    return DemoRun(
        code=code,
        output=out.getvalue(),
        settings=DemoSettings(instances=2, rollouts=8, directory=directory),
        results=json.loads((directory / "results.json").read_text()),
        audit=[json.loads(line) for line in audit_path.read_text().splitlines() if line.strip()],
    )


def test_the_demo_passes_its_own_verdict(demo_run: DemoRun) -> None:
    """A small in-process demo exits 0 and prints a passing verdict."""
    assert demo_run.code == 0, demo_run.output
    assert "VERDICT: PASS" in demo_run.output
    assert "FAIL" not in demo_run.output.replace("failed snapshots", "")
    assert len(demo_run.results) == 8


def test_the_demo_exits_non_zero_on_a_failing_verdict(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """main returns 1 and prints VERDICT: FAIL when the verdict fails, and removes its temp dir."""
    seen: list[Path] = []

    async def failing(settings: DemoSettings) -> tuple[Verdict, str]:
        seen.append(settings.directory)
        verdict = Verdict()
        verdict.check("something held", False, "it did not")
        return verdict, "tables"

    monkeypatch.setattr(envckpt.demo.inprocess, "run_demo", failing)
    with restored_logging():
        assert envckpt.demo.main(["--in-process", "--instances", "1", "--rollouts", "1"]) == 1
    output = capsys.readouterr().out
    assert "VERDICT: FAIL" in output and "tables" in output
    assert len(seen) == 1 and not seen[0].exists()


def _judge(run: DemoRun, results: Results, audit: Audit) -> Verdict:
    continued = sum(1 for r in run.results.values() if r.get("resumed_from_turn", 0) > 0)
    return judge(
        run.settings,
        make_tasks(run.settings),
        results,
        continued=continued,
        restarted=0,
        audit=audit,
    )


def _failed(verdict: Verdict) -> list[str]:
    return [name for name, ok, _ in verdict.checks if not ok]


def test_the_judge_passes_the_untampered_run(demo_run: DemoRun) -> None:
    """The real results and audit log pass every check of the judge."""
    verdict = _judge(demo_run, demo_run.results, demo_run.audit)
    assert verdict.passed, verdict.render()
    assert len(verdict.checks) == 5


def _first(results: Results) -> dict[str, Any]:
    return results[sorted(results)[0]]


def _drop_result(results: Results, audit: Audit) -> None:
    del results[sorted(results)[0]]


def _wrong_transcript(results: Results, audit: Audit) -> None:
    _first(results)["transcript"][-1] += " (edited)"


def _turn_twice(results: Results, audit: Audit) -> None:
    turns = _first(results)["turns"]
    turns.append(copy.deepcopy(turns[0]))


def _audit_missing(results: Results, audit: Audit) -> None:
    kept = {turn["application"] for turn in _first(results)["turns"]}
    audit[:] = [entry for entry in audit if entry["application"] != sorted(kept)[0]]


def _audit_doubled(results: Results, audit: Audit) -> None:
    wanted = _first(results)["turns"][0]["application"]
    audit.append(copy.deepcopy(next(e for e in audit if e["application"] == wanted)))


def _audit_disagrees(results: Results, audit: Audit) -> None:
    wanted = _first(results)["turns"][0]["application"]
    next(e for e in audit if e["application"] == wanted)["value"] += 1


def _claims_a_resume(results: Results, audit: Audit) -> None:
    # One result changes its claim: the count no longer matches what the restore continued.
    for result in results.values():
        if result.get("resumed_from_turn", 0) == 0:
            result["resumed_from_turn"] = 3
            return
    _first(results)["resumed_from_turn"] = 0


TAMPERINGS: dict[str, tuple[Callable[[Results, Audit], None], str]] = {
    "missing-result": (_drop_result, "every rollout finished exactly once"),
    "wrong-transcript": (_wrong_transcript, "every transcript equals an uninterrupted run"),
    "turn-applied-twice": (_turn_twice, "no turn's tool effect applied twice in any final result"),
    "audit-entry-missing": (_audit_missing, "tool effects applied exactly once (audit log)"),
    "audit-entry-doubled": (_audit_doubled, "tool effects applied exactly once (audit log)"),
    "audit-entry-disagrees": (_audit_disagrees, "tool effects applied exactly once (audit log)"),
    "resume-miscounted": (_claims_a_resume, "rollouts continued from a saved turn"),
}


@pytest.mark.parametrize("tampering", sorted(TAMPERINGS))
def test_the_judge_fails_every_tampering(demo_run: DemoRun, tampering: str) -> None:
    """Each kind of tampering with results or the audit log fails the named check."""
    results, audit = copy.deepcopy(demo_run.results), copy.deepcopy(demo_run.audit)
    tamper, check = TAMPERINGS[tampering]
    tamper(results, audit)
    verdict = _judge(demo_run, results, audit)
    assert not verdict.passed
    assert check in _failed(verdict), verdict.render()
    assert "VERDICT: FAIL" in verdict.render()


def test_the_process_demo_passes_its_verdict(tmp_path: Path) -> None:
    """The default demo (processes, SIGKILL, fresh processes) passes on small settings."""
    out = io.StringIO()
    with (
        restored_logging(),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(io.StringIO()),
    ):
        code = envckpt.demo.main(
            ["--instances", "2", "--rollouts", "8", "--seed", "2", "--dir", str(tmp_path)]
        )
    text = out.getvalue()
    assert code == 0, text
    assert "VERDICT: PASS" in text
    assert "SIGKILL after" in text
    assert json.loads((tmp_path / "results.json").read_text()).keys() == {
        task.rollout_id for task in make_tasks(DemoSettings(instances=2, rollouts=8, seed=2))
    }
