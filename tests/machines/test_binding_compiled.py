"""A freshly compiled ``BoundMachine`` (not the cached one) fires exactly each table's rows."""

from __future__ import annotations

from typing import Any

import pytest

from envckpt.errors import IllegalTransition
from envckpt.machines.binding import BoundMachine
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
