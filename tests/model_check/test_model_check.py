"""The model check itself: it passes the real engine, and it finds seeded bugs with a trace."""

from __future__ import annotations

import dataclasses

import pytest

from envckpt.machines.binding import BoundMachine
from envckpt.machines.table import Row
from envckpt.machines.tables import PARTICIPANT_PHASES
from envckpt.participant import core as participant_core
from envckpt.participant import rules
from envckpt.protocol import Phase

from model_check.__main__ import main
from model_check.config import TINY
from model_check.digest import describe, digest
from model_check.explore import _quiet_logs, _scratch, _Worlds, explore
from model_check.world import deterministic

SMALL = TINY.but(crash_budget=0, name="small")


def test_replaying_a_path_reaches_the_same_state() -> None:
    """Two replays of one action path digest alike: the world is deterministic."""
    with _scratch() as scratch, _quiet_logs():
        worlds = _Worlds(TINY, scratch)
        with deterministic(lambda: worlds.current):
            world = worlds.replay(())
            path: list[str] = []
            for _ in range(12):
                action = next(a for a in world.actions() if a != "crash")
                path.append(action)
                world.apply(action)
            first = digest(world)
            assert describe(world)[0][1] == 0  # still the first generation
            again = worlds.replay(tuple(path))
            assert digest(again) == first
            other = worlds.replay(tuple(path[:-1]))
            assert digest(other) != first
            worlds.close()


@pytest.mark.slow  # every interleaving: make verify
def test_the_tiny_configuration_keeps_every_invariant() -> None:
    """Every interleaving of one snapshot, a crash and a fault over 2 instances holds."""
    result = explore(TINY)
    assert not result.findings, result.report()
    assert not result.truncated
    assert result.states > 300 and result.transitions > result.states
    assert result.summary() == f"states explored: {result.states}, violations: 0"


def test_a_seeded_rule_bug_is_found_with_its_shortest_trace(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Admission left open during a checkpoint is caught, with the shortest trace printed."""
    real = rules.admission_refusal

    def ignores_the_phase(episode, fence, phase, checkpoint_id):  # type: ignore[no-untyped-def]
        return real(episode, fence, Phase.IDLE, checkpoint_id)

    monkeypatch.setattr(rules, "admission_refusal", ignores_the_phase)
    result = explore(SMALL, stop_at_first=True)
    assert result.violations == 1
    finding = result.findings[0]
    assert any("turn of r0 while prepared" in p and "accepted" in p for p in finding.problems)
    # Breadth first: the snapshot starts, then the stages before the agent's prepare.
    assert finding.trace[0] == "trainer snapshot"
    assert finding.trace[-1] == "deliver i0/agent/prepare"
    assert len(finding.trace) == 3
    monkeypatch.setattr("model_check.__main__.TINY", SMALL)
    assert main(["--tiny", "--quiet"]) == 1
    out = capsys.readouterr().out
    assert "VIOLATION after 3 actions" in out and "shortest trace:" in out
    assert out.splitlines()[-2].startswith("states explored: ")
    assert not out.splitlines()[-2].endswith("violations: 0")
    assert out.splitlines()[-1].startswith("oracle violations: ")


def test_a_mutated_table_row_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    """A participant table whose resume leaves the phase prepared fails "ends idle"."""
    rows = tuple(
        dataclasses.replace(row, dest=Phase.PREPARED) if row.trigger == "resume" else row
        for row in PARTICIPANT_PHASES.rows
    )
    assert any(isinstance(row, Row) and row.dest is Phase.PREPARED for row in rows)
    mutated = dataclasses.replace(PARTICIPANT_PHASES, rows=rows)
    monkeypatch.setattr(participant_core, "_PHASES", BoundMachine(mutated))
    result = explore(SMALL, stop_at_first=True)
    assert result.violations == 1, result.report()
    report = result.findings[0].report()
    assert "ends prepared" in report or "prepared" in report, report
    assert "shortest trace:" in report


def test_the_cli_prints_the_summary_last(capsys: pytest.CaptureFixture[str]) -> None:
    """``python -m model_check`` ends with the states/violations line and exits 0 when clean."""
    assert main(["--tiny", "--quiet", "--max-states", "40"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-2:] == ["states explored: 40, violations: 0", "oracle violations: 0"]
    assert "stopped at max_states" in lines[-3]


@pytest.mark.parametrize(
    ("flag", "name"),
    [("--full", "full"), ("--full-unbounded", "full-unbounded"), (None, "bounded")],
)
def test_the_cli_picks_the_configuration(
    flag: str | None, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each flag explores its configuration (here its first few states)."""
    assert main([*([flag] if flag else []), "--quiet", "--max-states", "5"]) == 0
    assert capsys.readouterr().out.splitlines()[-3].startswith(f"model check {name}: 5 states")
