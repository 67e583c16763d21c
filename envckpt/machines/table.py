"""The shape of a machine declaration: states, rows and the queries on them.

A ``MachineTable`` is pure data (standard library only, no I/O). Its states are
the members of one ``StrEnum``, so code names a state (``Phase.PREPARED``)
instead of spelling it, and a misspelt state is an ``AttributeError`` at
import time rather than a comparison that is silently never true. The binding
to the ``transitions`` library, the statechart generator and the tests all read
the same table, so what reviewers see is what runs.

    table = MachineTable(name="door", title="A door", states=tuple(Door),
                         initial=Door.SHUT, rows=(Row("open", (Door.SHUT,), Door.OPEN),
                                                  Row("knock", (Door.SHUT,), STAYS)))
    table.destination(Door.SHUT, "open")     # Door.OPEN
    table.destination(Door.OPEN, "open")     # None: refused

A table may also say how its chart is drawn (``ChartLayout``: a direction, the
happy path, the failure states and the boxes), which changes the picture and
never what is legal.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import Enum, StrEnum
from typing import Generic, Literal, TypeVar

S = TypeVar("S", bound=StrEnum)


class _Stays(Enum):
    STAYS = "stays"


# The destination of a row that keeps the machine in its source state.
STAYS = _Stays.STAYS


@dataclass(frozen=True, slots=True)
class Row(Generic[S]):
    """``trigger`` moves the machine from any of ``sources`` to ``dest``, for ``why``."""

    trigger: str
    sources: tuple[S, ...]
    dest: S | _Stays
    why: str = ""

    def __post_init__(self) -> None:
        if not self.trigger or not self.sources:
            raise ValueError("a row needs a trigger and at least one source")

    def destination_from(self, source: S) -> S:
        """Where this row takes the machine from ``source``."""
        return source if self.dest is STAYS else self.dest  # type: ignore[return-value]


@dataclass(frozen=True, slots=True)
class StateGroup(Generic[S]):
    """A named set of states (the code asks about it, or a chart draws it as one box)."""

    name: str
    states: frozenset[S]
    why: str = ""

    def __contains__(self, state: object) -> bool:
        return state in self.states

    @property
    def key(self) -> str:
        """The name as an identifier: "checkpoint open" -> "checkpoint_open"."""
        return re.sub(r"\W+", "_", self.name).strip("_")


class Role(StrEnum):
    """What a state means for a reader of the chart (its colour)."""

    HAPPY_PATH = "happy path"
    FAILURE = "failure"
    OTHER = "other"


Direction = Literal["TB", "LR"]


@dataclass(frozen=True, slots=True)
class ChartLayout(Generic[S]):
    """How a table's chart is drawn; nothing here changes what is legal.

    ``happy_path`` lists the states of the main line in order (drawn first and
    green); ``failure`` states remember a failure (drawn red). ``boxes`` are
    drawn as composite states: each is one of the table's ``groups`` (a set the
    code uses) or a set that exists only for the chart; two boxes are disjoint
    or one holds the other. A trigger that every state of a box has, to the
    same destination outside it, is drawn once, from the box.
    """

    direction: Direction = "TB"
    happy_path: tuple[S, ...] = ()
    failure: frozenset[S] = frozenset()
    boxes: tuple[StateGroup[S], ...] = ()

    def role(self, state: S) -> Role:
        if state in self.happy_path:
            return Role.HAPPY_PATH
        return Role.FAILURE if state in self.failure else Role.OTHER

    def problems(self, states: frozenset[S]) -> list[str]:
        """What is wrong with this layout for a table of ``states``; empty when sound."""
        found = []
        for what, named in (
            ("happy path", set(self.happy_path)),
            ("failure", self.failure),
            *((f"box {box.name}", box.states) for box in self.boxes),
        ):
            unknown = set(named) - states
            if unknown:
                found.append(f"chart {what} names unknown states {sorted(unknown)}")
        if len(set(self.happy_path)) != len(self.happy_path):
            found.append("chart happy path names a state twice")
        if set(self.happy_path) & self.failure:
            found.append("chart: a state on the happy path is also a failure")
        keys = [box.key for box in self.boxes]
        if len(set(keys)) != len(keys) or set(keys) & set(states):
            found.append(f"chart box names clash with each other or a state: {keys}")
        for number, box in enumerate(self.boxes):
            if not box.states:
                found.append(f"chart box {box.name} is empty")
            for other in self.boxes[number + 1 :]:
                shared = box.states & other.states
                if shared and shared not in (box.states, other.states):
                    found.append(f"chart boxes {box.name} and {other.name} overlap")
        return found


@dataclass(frozen=True, slots=True)
class MachineTable(Generic[S]):
    """A finite state machine declared as rows ``(trigger, sources, dest)``.

    ``terminal`` states end the machine: they have no exit, and every other
    state must have one (the tests check both). ``groups`` name the sets of
    states the code tests membership of, so that no caller repeats a list of
    states. ``state_notes`` are shown beside their state on the charts, and
    ``chart`` says how the chart is drawn.
    """

    name: str
    title: str
    states: tuple[S, ...]
    initial: S
    rows: tuple[Row[S], ...]
    terminal: frozenset[S] = field(default=frozenset())
    groups: tuple[StateGroup[S], ...] = field(default=())
    state_notes: tuple[tuple[S, str], ...] = field(default=())
    chart: ChartLayout[S] = field(default_factory=ChartLayout)
    # (state, trigger) -> destination, built once: legality is checked on every call.
    _index: dict[tuple[str, str], S] = field(
        init=False, repr=False, compare=False, hash=False, default_factory=dict
    )

    def __post_init__(self) -> None:
        known = set(self.states)
        if len(known) != len(self.states):
            raise ValueError(f"{self.name}: a state is declared twice")
        if self.initial not in known:
            raise ValueError(f"{self.name}: initial state {self.initial!r} is not a state")
        for what, states in (
            ("terminal", self.terminal),
            ("note", {state for state, _ in self.state_notes}),
            *((f"group {group.name}", group.states) for group in self.groups),
        ):
            unknown = set(states) - known
            if unknown:
                raise ValueError(f"{self.name}: {what} names unknown states {sorted(unknown)}")
        problems = self.chart.problems(frozenset(known))
        if problems:
            raise ValueError(f"{self.name}: {'; '.join(problems)}")
        seen: set[tuple[S, str]] = set()
        for row in self.rows:
            for source in row.sources:
                if source not in known:
                    raise ValueError(f"{self.name}: unknown source {source!r} in {row}")
                if (source, row.trigger) in seen:
                    # One (state, trigger) pair has one destination: no guards.
                    raise ValueError(f"{self.name}: {row.trigger!r} twice from {source!r}")
                seen.add((source, row.trigger))
                self._index[(source, row.trigger)] = row.destination_from(source)
            if row.dest is not STAYS and row.dest not in known:
                raise ValueError(f"{self.name}: unknown destination {row.dest!r} in {row}")

    @property
    def triggers(self) -> tuple[str, ...]:
        """Every trigger, in first-declared order."""
        return tuple(dict.fromkeys(row.trigger for row in self.rows))

    def state(self, name: str) -> S:
        """The state called ``name``; ValueError if the table has none."""
        for state in self.states:
            if state == name:
                return state
        raise ValueError(f"{self.name}: unknown state {name!r}")

    def group(self, name: str) -> frozenset[S]:
        """The states of the group called ``name``; KeyError if there is none."""
        for group in self.groups:
            if group.name == name:
                return group.states
        raise KeyError(f"{self.name}: no state group {name!r}")

    def edges(self) -> Iterator[tuple[S, str, S]]:
        """Every ``(source, trigger, dest)`` with STAYS resolved, sorted."""
        resolved = {
            (source, row.trigger, row.destination_from(source))
            for row in self.rows
            for source in row.sources
        }
        yield from sorted(resolved)

    def destination(self, state: str, trigger: str) -> S | None:
        """Where ``trigger`` takes the machine from ``state``; None if illegal."""
        return self._index.get((state, trigger))

    def allowed(self, state: str) -> tuple[str, ...]:
        """Triggers legal in ``state``, in declaration order."""
        return tuple(t for t in self.triggers if self.destination(state, t) is not None)

    def note(self, state: str) -> str:
        for noted, text in self.state_notes:
            if noted == state:
                return text
        return ""
