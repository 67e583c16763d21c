"""Bind a ``MachineTable`` to the ``transitions`` library.

One ``transitions.Machine`` is built per table and shared by every model of
that table (a "compiled" table). Models are not registered with ``add_model``,
which checks membership in a list and so costs O(n) per model; instead each
``MachineState`` is a tiny object that carries its own ``state`` attribute and
events are fired through the shared machine's event objects. Registering a
model is therefore O(1) (see ``bench/scale.py``).

    lifecycle = bind(INSTANCE_LIFECYCLE)
    state = lifecycle.new("shard/replica-0")
    lifecycle.check(state, "prepare")       # IllegalTransition, no side effect
    lifecycle.fire(state, "discover", checkpoint_id=None)

The binding uses no callbacks: the caller does its I/O first and then fires,
so a transition never awaits and cannot be cancelled half-way.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Generic, TypeVar

from transitions import Event, Machine, MachineError, Transition
from transitions.core import EventData

from envckpt import logs
from envckpt.errors import IllegalTransition
from envckpt.machines.table import MachineTable

S = TypeVar("S", bound=StrEnum)
# A lazy proxy: nothing is bound or configured at import time.
_LOG = logs.get_logger("envckpt.transitions")


class MachineState(Generic[S]):
    """The running state of one model of a table (one instance, one participant).

    ``log_fields`` are added to every ``transition`` event of this model (a
    participant names its server and Gym instance there).
    """

    __slots__ = ("entered_at", "log_fields", "name", "state")

    def __init__(self, name: str, initial: S) -> None:
        self.name = name
        self.state = initial
        self.entered_at = time.monotonic()
        self.log_fields: dict[str, Any] = {}

    def __repr__(self) -> str:
        return f"MachineState({self.name!r}, state={self.state!r})"


@dataclass(frozen=True, slots=True)
class TransitionRecord:
    """One fired transition, as logged."""

    machine: str
    instance_id: str
    trigger: str
    source: str
    dest: str
    checkpoint_id: str | None
    elapsed: float


class _StateChange(Transition):  # type: ignore[misc]  # transitions is untyped
    """transitions' ``Transition`` for what the binding declares: a row that moves
    the model and nothing else.

    The binding registers no conditions, callbacks or final states (it fires
    after its caller's I/O instead), so the stock ``execute`` would only walk
    empty callback lists and log each step at DEBUG, about half of a fire's
    cost. ``transitions`` still finds the row for the model's state (or
    raises ``MachineError``) and sets the state, as ``_change_state`` does.
    ``BoundMachine`` checks at build time that nothing is registered.
    """

    def execute(self, event_data: Any) -> bool:
        machine = event_data.machine
        machine.set_state(self.dest, event_data.model)
        event_data.update(getattr(event_data.model, machine.model_attribute))
        return True


class _Trigger(Event):  # type: ignore[misc]  # transitions is untyped
    """transitions' ``Event`` for the binding's machines: finds the row and runs it, directly.

    The stock ``trigger`` wraps the same steps in a partial handed to the
    machine's queue, runs the (empty) prepare and finalize callback lists and
    logs twice at DEBUG: a quarter of a fire's cost, for nothing a binding
    declares. The steps kept are ``Event._trigger``'s: the model's state,
    ``MachineError`` from ``_is_valid_source`` when no row leaves it, then the
    row's ``execute``. ``BoundMachine`` checks at build time that the machine
    has no queue and no callbacks.
    """

    def trigger(self, model: Any, *args: Any, **kwargs: Any) -> bool:
        machine = self.machine
        event_data = EventData(None, self, machine, model, args=args, kwargs=kwargs)
        event_data.state = state = machine.get_model_state(model)
        if self._is_valid_source(state):
            for transition in self.transitions[state.name]:
                event_data.transition = transition
                if transition.execute(event_data):
                    event_data.result = True
                    break
        return bool(event_data.result)


class _Machine(Machine):  # type: ignore[misc]  # transitions is untyped
    transition_cls = _StateChange
    event_cls = _Trigger


def _declares_only_state_changes(machine: Machine) -> bool:
    """No queue, callbacks or conditions anywhere: what ``_Trigger`` and ``_StateChange``
    rely on."""
    if machine.has_queue:
        return False
    machine_level = (
        machine.before_state_change,
        machine.after_state_change,
        machine.prepare_event,
        machine.finalize_event,
        machine.on_exception,
        machine.on_final,
    )
    states = machine.states.values()
    transitions = [
        transition
        for event in machine.events.values()
        for row in event.transitions.values()
        for transition in row
    ]
    return (
        not any(machine_level)
        and not any(state.on_enter or state.on_exit or state.final for state in states)
        and not any(
            t.prepare or t.conditions or t.before or t.after or t.dest is None for t in transitions
        )
    )


class BoundMachine(Generic[S]):
    """A table compiled into one shared ``transitions.Machine``."""

    def __init__(self, table: MachineTable[S]) -> None:
        self.table = table
        # transitions is given plain names (it treats Enum states by member
        # name); the model's state is turned back into the table's value
        # after every fire.
        self._by_name: dict[str, S] = {str(state): state for state in table.states}
        self._machine = _Machine(
            model=None,
            states=[str(state) for state in table.states],
            initial=str(table.initial),
            auto_transitions=False,
            ignore_invalid_triggers=False,
            name=table.name,
        )
        for row in table.rows:
            for source in row.sources:
                dest = str(row.destination_from(source))
                self._machine.add_transition(row.trigger, str(source), dest)
        if not _declares_only_state_changes(self._machine):
            raise TypeError(
                f"{table.name}: a callback or condition is registered, which the binding's "
                "state-change-only transitions would skip"
            )

    def new(self, name: str, state: str | None = None) -> MachineState[S]:
        """A fresh model in the table's initial state (or ``state``, for rebuilds)."""
        start = self.table.initial if state is None else self.table.state(state)
        return MachineState(name, start)

    def can_fire(self, model: MachineState[S], trigger: str) -> bool:
        """Whether ``trigger`` is legal in the model's current state."""
        return self.table.destination(model.state, trigger) is not None

    def check(self, model: MachineState[S], trigger: str) -> None:
        """Raise ``IllegalTransition`` unless ``trigger`` is legal now. No side effect."""
        if not self.can_fire(model, trigger):
            raise self._illegal(model, trigger)

    def fire(
        self, model: MachineState[S], trigger: str, *, checkpoint_id: str | None = None
    ) -> TransitionRecord:
        """Move the model along ``trigger`` and log the transition as one event."""
        source = model.state
        event = self._machine.events.get(trigger)
        if event is None:
            raise self._illegal(model, trigger)
        # transitions reads an Enum state by its member name: hand it the plain
        # value while it runs, and the table's value back afterwards.
        model.state = str(source)  # type: ignore[assignment]
        try:
            event.trigger(model)
        except MachineError:
            raise self._illegal(model, trigger) from None
        finally:
            model.state = self._by_name[str(model.state)]
        now = time.monotonic()
        record = TransitionRecord(
            machine=self.table.name,
            instance_id=model.name,
            trigger=trigger,
            source=str(source),
            dest=str(model.state),
            checkpoint_id=checkpoint_id,
            elapsed=round(now - model.entered_at, 6),
        )
        model.entered_at = now
        emit = _LOG.enabled_fields("info")
        if emit is not None:  # filtered: the fields are never built
            emit(
                "transition",
                {
                    "machine": record.machine,
                    "instance_id": record.instance_id,
                    "trigger": record.trigger,
                    "source": record.source,
                    "dest": record.dest,
                    "checkpoint_id": record.checkpoint_id,
                    "elapsed": record.elapsed,
                    **model.log_fields,
                },
            )
        return record

    def step(self, name: str, state: S, trigger: str) -> S:
        """Fire ``trigger`` on a throwaway model in ``state``; return where it lands.

        For machines whose state lives in an immutable record (the ledger's
        entries): the record is rebuilt with the returned state.
        """
        model = MachineState(name, state)
        self.fire(model, trigger)
        return model.state

    def _illegal(self, model: MachineState[S], trigger: str) -> IllegalTransition:
        return IllegalTransition(
            machine=self.table.name, instance=model.name, state=model.state, trigger=trigger
        )


_BOUND: dict[str, BoundMachine[Any]] = {}


def bind(table: MachineTable[S]) -> BoundMachine[S]:
    """The shared compiled machine for ``table`` (built once per process)."""
    bound = _BOUND.get(table.name)
    if bound is None or bound.table is not table:
        bound = _BOUND[table.name] = BoundMachine(table)
    return bound
