"""The four machine declarations keep the rules of the architecture."""

from __future__ import annotations

from collections import deque
from enum import StrEnum

import pytest

from envckpt.machines.table import MachineTable
from envckpt.machines.tables import (
    ALL_TABLES,
    INSTANCE_LIFECYCLE,
    PARTICIPANT_PHASES,
    ROLLOUT_LEDGER,
    SNAPSHOT_SESSION,
)

tables = pytest.mark.parametrize("table", ALL_TABLES, ids=lambda table: table.name)


def reachable(table: MachineTable) -> set[str]:
    seen = {table.initial}
    queue = deque([table.initial])
    while queue:
        state = queue.popleft()
        for source, _, dest in table.edges():
            if source == state and dest not in seen:
                seen.add(dest)
                queue.append(dest)
    return seen


def walk(table: MachineTable, *triggers: str, start: str | None = None) -> list[str]:
    state = table.initial if start is None else start
    path = [state]
    for trigger in triggers:
        dest = table.destination(state, trigger)
        assert dest is not None, f"{trigger!r} refused in {state!r}"
        state = dest
        path.append(state)
    return path


def test_table_names_are_unique() -> None:
    """Each table has its own name (file names and log records use it)."""
    assert len({table.name for table in ALL_TABLES}) == len(ALL_TABLES)
    assert list(ALL_TABLES) == [
        INSTANCE_LIFECYCLE,
        PARTICIPANT_PHASES,
        SNAPSHOT_SESSION,
        ROLLOUT_LEDGER,
    ]


@tables
def test_states_are_the_members_of_one_enum(table: MachineTable) -> None:
    """A table's states are exactly the members of one StrEnum, in declaration order."""
    enum_type = type(table.initial)
    assert issubclass(enum_type, StrEnum)
    assert table.states == tuple(enum_type)


@tables
def test_every_pair_is_one_row_or_refused(table: MachineTable) -> None:
    """Each (state, trigger) pair is handled by exactly one row, or refused with no destination."""
    for state in table.states:
        for trigger in table.triggers:
            rows = [row for row in table.rows if row.trigger == trigger and state in row.sources]
            assert len(rows) <= 1
            if rows:
                assert table.destination(state, trigger) is not None
            else:
                assert table.destination(state, trigger) is None


@tables
def test_every_state_is_reachable(table: MachineTable) -> None:
    """Every state can be reached from the initial state."""
    assert reachable(table) == set(table.states)


@tables
def test_non_terminal_states_have_a_way_out(table: MachineTable) -> None:
    """Every non-terminal state has an exit to another state; terminal ones have no exit."""
    terminal = table.terminal
    for state in table.states:
        exits = [dest for source, _, dest in table.edges() if source == state]
        if state in terminal:
            assert exits == [], state
        else:
            assert any(dest != state for dest in exits), state


@tables
def test_every_trigger_is_used(table: MachineTable) -> None:
    """Every trigger is legal from at least one state."""
    used = {trigger for state in table.states for trigger in table.allowed(state)}
    assert used == set(table.triggers)


@tables
def test_state_notes_name_states(table: MachineTable) -> None:
    """Notes are attached to declared states only."""
    assert {state for state, _ in table.state_notes} <= set(table.states)


def test_instance_lifecycle_spine() -> None:
    """discover, prepare, commit, resume walks the card's spine."""
    assert walk(INSTANCE_LIFECYCLE, "discover", "prepare", "commit", "resume") == [
        "undiscovered",
        "discovered",
        "prepared",
        "committed",
        "resumed",
    ]


def test_instance_lifecycle_checkpoints_again_after_resume() -> None:
    """A resumed instance can take the next checkpoint, through blockers too."""
    path = walk(INSTANCE_LIFECYCLE, "prepare_blocked", "prepare", "commit", start="resumed")
    assert path == ["resumed", "preparing", "prepared", "committed"]


def test_fail_only_where_a_checkpoint_is_or_may_be_open() -> None:
    """fail is legal where a checkpoint is open, or where a half-failed prepare may open one."""
    table = INSTANCE_LIFECYCLE
    legal = {state for state in table.states if table.destination(state, "fail")}
    prepare_starts = {state for state in table.states if table.destination(state, "prepare")}
    assert legal == {"preparing", "prepared", "committed"} | prepare_starts
    assert legal.isdisjoint({"undiscovered", "restored", "failed", "restore_failed"})
    assert {table.destination(state, "fail") for state in legal} == {"failed"}


def test_only_resume_leads_out_of_failed() -> None:
    """From failed, resume is the one legal trigger, and it leads to resumed."""
    assert INSTANCE_LIFECYCLE.allowed("failed") == ("resume",)
    assert INSTANCE_LIFECYCLE.destination("failed", "resume") == "resumed"


def test_restore_failed_leaves_only_by_resume() -> None:
    """A failed restore stays put on retire and leaves only by resume."""
    exits = {
        trigger: dest
        for source, trigger, dest in INSTANCE_LIFECYCLE.edges()
        if source == "restore_failed"
    }
    assert exits == {"resume": "resumed", "retire": "restore_failed"}


def test_restore_only_from_a_fresh_deployment() -> None:
    """restore is legal only right after discovery."""
    legal = {s for s in INSTANCE_LIFECYCLE.states if INSTANCE_LIFECYCLE.destination(s, "restore")}
    assert legal == {"discovered"}


def test_ledger_statuses_follow_the_ledger_rules() -> None:
    """A rollout is reserved, dispatched, then sealed; failing or abandoning re-reserves."""
    assert walk(ROLLOUT_LEDGER, "dispatch", "seal") == ["reserved", "dispatched", "sealed"]
    assert walk(ROLLOUT_LEDGER, "dispatch", "fail", "mint_next_attempt")[-1] == "reserved"
    assert walk(ROLLOUT_LEDGER, "abandon", "restart_from_task")[-1] == "reserved"
    assert ROLLOUT_LEDGER.allowed("sealed") == ()
