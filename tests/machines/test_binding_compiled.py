"""A freshly compiled ``BoundMachine`` (not the cached one) fires exactly each table's rows,
through a trigger that answers as ``transitions``' own."""

from __future__ import annotations

from typing import Any

import pytest
from transitions import Event, MachineError

from envckpt.errors import IllegalTransition
from envckpt.machines.binding import (
    BoundMachine,
    _declares_only_state_changes,
    _Machine,
    _StateChange,
    _Trigger,
)
from envckpt.machines.table import MachineTable
from envckpt.machines.tables import ALL_TABLES


@pytest.mark.parametrize("table", ALL_TABLES, ids=[t.name for t in ALL_TABLES])
def test_a_fresh_binding_fires_every_row_and_refuses_the_rest(table: MachineTable[Any]) -> None:
    """Every (source, trigger) lands on the table's destination; every other pair is refused."""
    machine = BoundMachine(table)
    assert machine.table is table
    for source in table.states:
        for trigger in table.triggers:
            model = machine.new("m", str(source))
            dest = table.destination(source, trigger)
            if dest is None:
                with pytest.raises(IllegalTransition):
                    machine.fire(model, trigger)
                assert model.state is source
                continue
            record = machine.fire(model, trigger, checkpoint_id="c")
            assert model.state is dest
            assert (record.source, record.trigger, record.dest) == (source, trigger, dest)
            assert (record.machine, record.instance_id, record.checkpoint_id) == (
                table.name,
                "m",
                "c",
            )
    with pytest.raises(IllegalTransition):
        machine.fire(machine.new("m"), "no-such-trigger")


class _Model:
    def __init__(self, state: str) -> None:
        self.state = state


def _outcome(trigger_fn: Any, event: Any, state: str) -> tuple[object, str]:
    model = _Model(state)
    try:
        result: object = trigger_fn(event, model)
    except MachineError as error:
        result = ("MachineError", str(error))
    return result, model.state


@pytest.mark.parametrize("table", ALL_TABLES, ids=[t.name for t in ALL_TABLES])
def test_the_lean_trigger_answers_as_transitions_stock_trigger(table: MachineTable[Any]) -> None:
    """For every state and every event of every table, the binding's ``_Trigger``
    returns, raises (with the same message) and moves the model exactly as
    ``transitions``' own ``Event.trigger`` does on the same machine."""
    machine = BoundMachine(table)._machine
    assert all(isinstance(event, _Trigger) for event in machine.events.values())
    compared = 0
    for event in machine.events.values():
        for source in table.states:
            lean = _outcome(_Trigger.trigger, event, str(source))
            stock = _outcome(Event.trigger, event, str(source))
            assert lean == stock, (table.name, event.name, source)
            compared += 1
    assert compared == len(machine.events) * len(table.states)


def test_a_queued_machine_is_refused_by_the_build_check() -> None:
    """The lean trigger runs a row at once; a queued machine would defer it, so the
    check run when a table is bound refuses a machine with a queue."""
    for queued in (False, True):
        machine = _Machine(
            model=None, states=["a", "b"], initial="a", auto_transitions=False, queued=queued
        )
        machine.add_transition("go", "a", "b")
        assert _declares_only_state_changes(machine) is not queued


def test_the_lean_trigger_hands_execute_what_the_stock_trigger_does() -> None:
    """A row's ``execute`` sees the same event data through either trigger: the event,
    the trigger's arguments, the row itself and the source state."""
    seen: list[tuple[object, ...]] = []

    class Recording(_StateChange):
        def execute(self, event_data: Any) -> bool:
            seen.append(
                (
                    event_data.event,
                    event_data.args,
                    event_data.kwargs,
                    event_data.transition,
                    event_data.state.name,
                    event_data.model.state,
                )
            )
            return bool(super().execute(event_data))

    class RecordingMachine(_Machine):
        transition_cls = Recording

    machine = RecordingMachine(model=None, states=["a", "b"], initial="a", auto_transitions=False)
    machine.add_transition("go", "a", "b")
    event = machine.events["go"]
    results = [
        trigger(event, _Model("a"), 7, why="test") for trigger in (Event.trigger, _Trigger.trigger)
    ]
    assert results == [True, True]
    row = event.transitions["a"][0]
    assert seen == [(event, (7,), {"why": "test"}, row, "a", "a")] * 2
