"""BoundMachine beyond legality: the bind cache, step, the record's timing and the log fields."""

from __future__ import annotations

import dataclasses
import time
from enum import StrEnum
from typing import Any

import pytest
from structlog.testing import capture_logs

from envckpt.errors import IllegalTransition
from envckpt.machines.binding import BoundMachine, bind
from envckpt.machines.table import MachineTable, Row
from envckpt.machines.tables import ALL_TABLES, ROLLOUT_LEDGER, LedgerStatus


class Door(StrEnum):
    SHUT = "shut"
    OPEN = "open"


# A name no engine table has, so binding it never disturbs the shared machines.
DOOR = MachineTable(
    name="test-binding-door",
    title="A door",
    states=tuple(Door),
    initial=Door.SHUT,
    rows=(Row("open", (Door.SHUT,), Door.OPEN), Row("shut", (Door.OPEN,), Door.SHUT)),
)


def test_bind_compiles_a_new_table_once_and_a_changed_one_again() -> None:
    """A new table is compiled, the same table is cached, a changed one is recompiled."""
    first = bind(DOOR)
    assert isinstance(first, BoundMachine) and first.table is DOOR
    assert bind(DOOR) is first
    one_way = dataclasses.replace(DOOR, rows=DOOR.rows[:1])
    second = bind(one_way)
    assert second is not first and second.table is one_way
    model = second.new("door-1")
    with capture_logs():
        second.fire(model, "open")
        with pytest.raises(IllegalTransition):
            second.fire(model, "shut")
    assert model.state is Door.OPEN


def test_step_fires_on_a_throwaway_model_and_returns_the_destination() -> None:
    """step() returns where a legal trigger lands, logs it under the name, refuses the rest."""
    ledger = bind(ROLLOUT_LEDGER)
    with capture_logs() as logs:
        landed = ledger.step("r7", LedgerStatus.RESERVED, "dispatch")
    assert landed is LedgerStatus.DISPATCHED
    assert [(e["instance_id"], e["source"], e["trigger"], e["dest"]) for e in logs] == [
        ("r7", "reserved", "dispatch", "dispatched")
    ]
    with pytest.raises(IllegalTransition) as caught:
        ledger.step("r7", LedgerStatus.SEALED, "dispatch")
    assert (caught.value.instance, caught.value.state) == ("r7", "sealed")


@pytest.mark.parametrize("table", ALL_TABLES, ids=[t.name for t in ALL_TABLES])
def test_no_automatic_to_state_triggers(table: MachineTable[Any]) -> None:
    """transitions' to_<state> shortcuts do not exist: only the table's triggers fire."""
    machine = BoundMachine(table)
    for state in table.states:
        for target in table.states:
            model = machine.new("m", str(state))
            with pytest.raises(IllegalTransition):
                machine.fire(model, f"to_{target}")
            assert model.state is state


def test_the_record_times_the_state_it_leaves_to_the_microsecond() -> None:
    """elapsed is the time since the model entered its state, rounded to 6 decimals."""
    machine = BoundMachine(DOOR)
    model = machine.new("door-2")
    with capture_logs():
        for trigger in ("open", "shut", "open", "shut", "open"):
            model.entered_at = time.monotonic() - 5.25
            record = machine.fire(model, trigger)
            assert 5.25 <= record.elapsed < 6.0
            assert record.elapsed == round(record.elapsed, 6)
            assert model.entered_at >= time.monotonic() - 1.0


def test_a_model_s_log_fields_go_on_its_transition_events() -> None:
    """log_fields (a participant names its server there) are added to every event."""
    machine = BoundMachine(DOOR)
    model = machine.new("door-3")
    model.log_fields = {"server": "policy", "gym_instance_id": "shard/replica-0"}
    with capture_logs() as logs:
        machine.fire(model, "open")
    assert logs[0]["server"] == "policy"
    assert logs[0]["gym_instance_id"] == "shard/replica-0"
    assert logs[0]["instance_id"] == "door-3"
