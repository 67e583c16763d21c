"""The transitions binding runs exactly the table: legal pairs fire, others are refused."""

from __future__ import annotations

import pickle
from typing import Any

import pytest
import structlog
from structlog.testing import capture_logs
from transitions import Machine

from envckpt import logs
from envckpt.errors import IllegalTransition
from envckpt.machines.binding import BoundMachine, MachineState, TransitionRecord, bind
from envckpt.machines.table import MachineTable
from envckpt.machines.tables import ALL_TABLES, INSTANCE_LIFECYCLE, PARTICIPANT_PHASES
from envckpt.protocol import Phase

LEGAL = [
    pytest.param(table, source, trigger, dest, id=f"{table.name}-{source}-{trigger}")
    for table in ALL_TABLES
    for source, trigger, dest in table.edges()
]
ILLEGAL = [
    pytest.param(table, state, trigger, id=f"{table.name}-{state}-{trigger}")
    for table in ALL_TABLES
    for state in table.states
    for trigger in (*table.triggers, "no_such_trigger")
    if table.destination(state, trigger) is None
]


@pytest.mark.parametrize(("table", "source", "trigger", "dest"), LEGAL)
def test_legal_pair_fires_the_tables_destination(
    table: MachineTable, source: str, trigger: str, dest: str
) -> None:
    """Firing a legal trigger moves the model to the table's destination and says so."""
    machine = bind(table)
    model = machine.new("m-1", state=source)
    assert machine.can_fire(model, trigger)
    machine.check(model, trigger)
    record = machine.fire(model, trigger, checkpoint_id="ckpt-1")
    assert model.state == dest
    assert record == TransitionRecord(
        machine=table.name,
        instance_id="m-1",
        trigger=trigger,
        source=source,
        dest=dest,
        checkpoint_id="ckpt-1",
        elapsed=record.elapsed,
    )
    assert record.elapsed >= 0


@pytest.mark.parametrize(("table", "state", "trigger"), ILLEGAL)
def test_illegal_pair_is_refused_without_effect(
    table: MachineTable, state: str, trigger: str
) -> None:
    """An illegal trigger raises IllegalTransition naming it, and the state is unchanged."""
    machine = bind(table)
    model = machine.new("m-1", state=state)
    entered_at = model.entered_at
    assert not machine.can_fire(model, trigger)
    for attempt in (machine.check, machine.fire):
        with pytest.raises(IllegalTransition) as caught:
            attempt(model, trigger)
        error = caught.value
        assert (error.machine, error.instance, error.state, error.trigger) == (
            table.name,
            "m-1",
            state,
            trigger,
        )
        assert model.state == state
        assert model.entered_at == entered_at


def test_illegal_transition_survives_pickle() -> None:
    """IllegalTransition keeps its type, fields and message through pickle."""
    machine = bind(INSTANCE_LIFECYCLE)
    with pytest.raises(IllegalTransition) as caught:
        machine.fire(machine.new("shard/replica-0"), "commit")
    copy = pickle.loads(pickle.dumps(caught.value))
    assert type(copy) is IllegalTransition
    assert (copy.machine, copy.instance, copy.state, copy.trigger) == (
        "instance_lifecycle",
        "shard/replica-0",
        "undiscovered",
        "commit",
    )
    assert str(copy) == str(caught.value)


def test_bind_is_cached_per_table() -> None:
    """bind() builds one machine per table and returns it on every call."""
    assert bind(INSTANCE_LIFECYCLE) is bind(INSTANCE_LIFECYCLE)
    assert isinstance(bind(INSTANCE_LIFECYCLE), BoundMachine)
    assert bind(INSTANCE_LIFECYCLE) is not bind(PARTICIPANT_PHASES)


def test_new_model_starts_in_the_initial_state() -> None:
    """new() without a state starts at the table's initial state."""
    model = bind(INSTANCE_LIFECYCLE).new("a")
    assert isinstance(model, MachineState)
    assert (model.name, model.state) == ("a", "undiscovered")


def test_new_model_refuses_an_unknown_state() -> None:
    """new() rejects a rebuild into a state the table does not have."""
    with pytest.raises(ValueError, match="unknown state 'nowhere'"):
        bind(INSTANCE_LIFECYCLE).new("a", state="nowhere")


def test_each_fired_transition_logs_one_event() -> None:
    """A fired transition is logged as one 'transition' event with its fields."""
    machine = bind(INSTANCE_LIFECYCLE)
    model = machine.new("shard/replica-0", state="prepared")
    with capture_logs() as logs:
        record = machine.fire(model, "commit", checkpoint_id="ckpt-7")
    assert logs == [
        {
            "event": "transition",
            "log_level": "info",
            "machine": "instance_lifecycle",
            "instance_id": "shard/replica-0",
            "trigger": "commit",
            "source": "prepared",
            "dest": "committed",
            "checkpoint_id": "ckpt-7",
            "elapsed": record.elapsed,
        }
    ]


def test_refused_transition_logs_nothing() -> None:
    """An illegal trigger logs no transition event."""
    machine = bind(INSTANCE_LIFECYCLE)
    with capture_logs() as logs, pytest.raises(IllegalTransition):
        machine.fire(machine.new("a"), "commit")
    assert logs == []


def test_models_do_not_touch_the_shared_machines_model_list() -> None:
    """Many models can be created and fired without registering them with transitions."""
    machine = bind(INSTANCE_LIFECYCLE)
    models = [machine.new(f"instance-{i}") for i in range(1_000)]
    with capture_logs():
        for model in models[::2]:
            machine.fire(model, "discover")
    assert machine.machine.models == []
    assert {model.state for model in models[::2]} == {"discovered"}
    assert {model.state for model in models[1::2]} == {"undiscovered"}


def test_fire_restarts_the_elapsed_clock() -> None:
    """Each fire measures time spent in the state it leaves, then restarts the clock."""
    machine = bind(INSTANCE_LIFECYCLE)
    model = machine.new("a")
    before = model.entered_at
    with capture_logs():
        machine.fire(model, "discover")
    assert model.entered_at >= before


def test_a_filtered_transition_builds_no_event(
    monkeypatch: pytest.MonkeyPatch, restored_structlog: None
) -> None:
    """Logging filtered above INFO: the transition fires and no event is even built."""
    built: list[str] = []
    enabled = logs.EnvckptLogger.enabled

    def recording(self: logs.EnvckptLogger, level: str) -> Any:
        if enabled(self, level) is None:
            return None
        return lambda event, **fields: built.append(event)

    monkeypatch.setattr(logs.EnvckptLogger, "enabled", recording)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(30))
    machine = bind(INSTANCE_LIFECYCLE)
    model = machine.new("a")
    machine.fire(model, "discover")
    assert model.state == "discovered"
    assert built == []
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(20))
    machine.fire(machine.new("b"), "discover")
    assert built == ["transition"]


@pytest.mark.parametrize("table", ALL_TABLES, ids=lambda table: table.name)
def test_each_table_runs_on_a_lean_stock_transitions_machine(table: MachineTable[Any]) -> None:
    """The shared machine is transitions' own ``Machine``, with no automatic triggers, no
    queue, event data sent as one object, and nothing registered to run on a transition
    (the caller does its I/O before firing)."""
    machine = bind(table).machine
    assert type(machine) is Machine
    assert not machine.auto_transitions and not machine.has_queue and machine.send_event
    rows = [t for event in machine.events.values() for ts in event.transitions.values() for t in ts]
    assert len(rows) == len(list(table.edges()))
    assert not any(t.prepare or t.conditions or t.before or t.after for t in rows)
    assert not any(state.on_enter or state.on_exit for state in machine.states.values())
    assert not (machine.before_state_change or machine.after_state_change)
    assert not (machine.prepare_event or machine.finalize_event or machine.on_exception)


def test_transitions_decides_each_fire() -> None:
    """A fire follows the transitions machine, not a second lookup of the table: a row
    tampered into the machine alone is what the model follows."""
    bound = BoundMachine(PARTICIPANT_PHASES)
    model = bound.new("agent")
    with capture_logs():
        bound.fire(model, "prepare")
    assert model.state == "preparing"
    tampered = BoundMachine(PARTICIPANT_PHASES)
    tampered.machine.add_transition("detour", Phase.IDLE, Phase.RESTORED)
    model = tampered.new("agent")
    with capture_logs():
        record = tampered.fire(model, "detour")
    assert model.state is Phase.RESTORED and record.dest == "restored"
