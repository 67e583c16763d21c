"""The shape of a machine declaration: states, rows and the queries on them.

A ``MachineTable`` is pure data (standard library only, no I/O). The binding
to the ``transitions`` library, the statechart generator and the tests all read
the same table, so what reviewers see is what runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

# A row whose destination is SAME keeps the machine in its source state.
SAME = "="


@dataclass(frozen=True, slots=True)
class Row:
    """``trigger`` moves the machine from any of ``sources`` to ``dest``."""

    trigger: str
    sources: tuple[str, ...]
    dest: str
    why: str = ""

    def __post_init__(self) -> None:
        if not self.trigger or not self.sources:
            raise ValueError("a row needs a trigger and at least one source")


@dataclass(frozen=True, slots=True)
class MachineTable:
    """A finite state machine declared as rows ``(trigger, sources, dest)``."""

    name: str
    title: str
    states: tuple[str, ...]
    initial: str
    rows: tuple[Row, ...]
    state_notes: tuple[tuple[str, str], ...] = field(default=())

    def __post_init__(self) -> None:
        if self.initial not in self.states:
            raise ValueError(f"{self.name}: initial state {self.initial!r} is not a state")
        seen: set[tuple[str, str]] = set()
        for row in self.rows:
            for source in row.sources:
                if source not in self.states:
                    raise ValueError(f"{self.name}: unknown source {source!r} in {row}")
                if (source, row.trigger) in seen:
                    # One (state, trigger) pair has one destination: no guards.
                    raise ValueError(f"{self.name}: {row.trigger!r} twice from {source!r}")
                seen.add((source, row.trigger))
            if row.dest != SAME and row.dest not in self.states:
                raise ValueError(f"{self.name}: unknown destination {row.dest!r} in {row}")

    @property
    def triggers(self) -> tuple[str, ...]:
        """Every trigger, in first-declared order."""
        return tuple(dict.fromkeys(row.trigger for row in self.rows))

    def edges(self) -> Iterator[tuple[str, str, str]]:
        """Every ``(source, trigger, dest)`` with SAME resolved, sorted."""
        resolved = {
            (source, row.trigger, source if row.dest == SAME else row.dest)
            for row in self.rows
            for source in row.sources
        }
        yield from sorted(resolved)

    def destination(self, state: str, trigger: str) -> str | None:
        """Where ``trigger`` takes the machine from ``state``; None if illegal."""
        for row in self.rows:
            if row.trigger == trigger and state in row.sources:
                return state if row.dest == SAME else row.dest
        return None

    def allowed(self, state: str) -> tuple[str, ...]:
        """Triggers legal in ``state``, in declaration order."""
        return tuple(t for t in self.triggers if self.destination(state, t) is not None)

    def note(self, state: str) -> str:
        return dict(self.state_notes).get(state, "")
