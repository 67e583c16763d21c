"""The transitions binding runs exactly the table: legal pairs fire, others are refused."""

from __future__ import annotations

import pickle
from typing import Any

import pytest
import structlog
from structlog.testing import capture_logs

from envckpt import logs
from envckpt.errors import IllegalTransition
from envckpt.machines.binding import BoundMachine, MachineState, TransitionRecord, bind
from envckpt.machines.table import MachineTable
from envckpt.machines.tables import ALL_TABLES, INSTANCE_LIFECYCLE, PARTICIPANT_PHASES

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
    assert machine._machine.models == []
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


def test_a_filtered_transition_builds_no_event(monkeypatch: pytest.MonkeyPatch) -> None:
    """Logging filtered above INFO: the transition fires and no event is even built."""
    built: list[str] = []
    enabled = logs.EnvckptLogger.enabled_fields

    def recording(self: logs.EnvckptLogger, level: str) -> Any:
        if enabled(self, level) is None:
            return None
        return lambda event, fields: built.append(event)

    monkeypatch.setattr(logs.EnvckptLogger, "enabled_fields", recording)
    saved = structlog.get_config()
    try:
        structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(30))
        machine = bind(INSTANCE_LIFECYCLE)
        model = machine.new("a")
        machine.fire(model, "discover")
        assert model.state == "discovered"
        assert built == []
        structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(20))
        machine.fire(machine.new("b"), "discover")
        assert built == ["transition"]
    finally:
        structlog.configure(**saved)


@pytest.mark.parametrize("table", ALL_TABLES, ids=lambda table: table.name)
def test_transitions_runs_each_table_with_state_changes_only(table: MachineTable[Any]) -> None:
    """Every bound table's transitions are the lean state-change kind, with nothing
    registered that the stock Transition.execute would have run."""
    from envckpt.machines.binding import _declares_only_state_changes, _StateChange

    machine = bind(table)._machine
    rows = [t for event in machine.events.values() for ts in event.transitions.values() for t in ts]
    assert rows and all(isinstance(t, _StateChange) for t in rows)
    assert _declares_only_state_changes(machine)


REGISTRATIONS = [
    "before_state_change",
    "after_state_change",
    "prepare_event",
    "finalize_event",
    "on_exception",
    "on_final",
    "state.on_enter",
    "state.on_exit",
    "state.final",
    "transition.prepare",
    "transition.conditions",
    "transition.before",
    "transition.after",
    "transition.dest",
]


@pytest.mark.parametrize("where", REGISTRATIONS)
def test_anything_registered_on_a_bound_machine_is_seen(where: str) -> None:
    """Each kind of callback, condition, final state or internal transition, alone, is
    what the check run when a table is bound refuses (the lean execute would skip it)."""
    from envckpt.machines.binding import _declares_only_state_changes

    machine = bind(PARTICIPANT_PHASES)._machine
    state = machine.states["idle"]
    transition = next(iter(machine.events["prepare"].transitions.values()))[0]
    owner, _, name = where.rpartition(".")
    target = {"": machine, "state": state, "transition": transition}[owner]
    saved = getattr(target, name)
    if name == "final":
        setattr(target, name, True)
    elif name == "dest":
        setattr(target, name, None)
    else:
        getattr(target, name).append(lambda event: None)
    try:
        assert not _declares_only_state_changes(machine)
    finally:
        if name in ("final", "dest"):
            setattr(target, name, saved)
        else:
            getattr(target, name).clear()
    assert _declares_only_state_changes(machine)


def test_transitions_reports_each_fired_row_as_executed() -> None:
    """The lean transition answers transitions as the stock one does: the event ran."""
    bound = bind(PARTICIPANT_PHASES)
    model = bound.new("agent")
    model.state = str(model.state)  # type: ignore[assignment]
    assert bound._machine.events["prepare"].trigger(model) is True
    assert model.state == "preparing"


def test_binding_a_table_whose_machine_carries_a_registration_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Building refuses, naming the table and why, when the check finds a registration."""
    from envckpt.machines import binding as binding_module

    monkeypatch.setattr(binding_module, "_declares_only_state_changes", lambda machine: False)
    with pytest.raises(TypeError) as refused:
        BoundMachine(PARTICIPANT_PHASES)
    assert str(refused.value) == (
        "participant_phases: a callback or condition is registered, which the binding's "
        "state-change-only transitions would skip"
    )
