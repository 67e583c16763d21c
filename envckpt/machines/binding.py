"""Bind a ``MachineTable`` to the ``transitions`` library.

One ``transitions.Machine`` is built per table and shared by every model of
that table. Models are not registered with ``add_model``, which checks
membership in a list and so costs O(n) per model; instead each
``MachineState`` is a tiny object that carries its own ``state`` attribute,
and a trigger is fired on it through transitions' public ``Event.trigger(model)``
of the shared machine. Registering a model is therefore O(1) (see
``bench/scale.py``).

    lifecycle = bind(INSTANCE_LIFECYCLE)
    state = lifecycle.new("shard/replica-0")
    lifecycle.check(state, "prepare")       # IllegalTransition, no side effect
    lifecycle.fire(state, "discover", checkpoint_id=None)

The machine is transitions' stock one, with its lean options: no automatic
``to_<state>`` triggers, no queue, event data handed over as one object, and
no callbacks. The caller does its I/O first and then fires, so a transition
never awaits and cannot be cancelled half-way.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Generic, TypeVar

from transitions import Machine, MachineError

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


class BoundMachine(Generic[S]):
    """A table compiled into one shared ``transitions.Machine``."""

    def __init__(self, table: MachineTable[S]) -> None:
        self.table = table
        # The table's enum members are the states: transitions keeps an Enum
        # state as the member itself on the model, so no name is translated.
        self.machine = Machine(
            model=None,
            states=list(table.states),
            initial=table.initial,
            auto_transitions=False,
            ignore_invalid_triggers=False,
            queued=False,
            send_event=True,
            name=table.name,
        )
        for row in table.rows:
            for source in row.sources:
                self.machine.add_transition(row.trigger, source, row.destination_from(source))

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
        event = self.machine.events.get(trigger)
        if event is None:
            raise self._illegal(model, trigger)
        try:
            event.trigger(model)
        except MachineError:
            # transitions refuses before it changes anything.
            raise self._illegal(model, trigger) from None
        now = time.monotonic()
        fields: dict[str, Any] = {
            "machine": self.table.name,
            "instance_id": model.name,
            "trigger": trigger,
            "source": str(source),
            "dest": str(model.state),
            "checkpoint_id": checkpoint_id,
            "elapsed": round(now - model.entered_at, 6),
        }
        model.entered_at = now
        emit = _LOG.enabled("info")
        if emit is not None:  # filtered: the event is never rendered
            emit("transition", **{**fields, **model.log_fields})
        return TransitionRecord(**fields)

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
