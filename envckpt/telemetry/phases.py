"""``PhaseSeconds``: the seconds a record's steps took, by step, in the order they run.

The base of ``SnapshotPhases`` and ``RestorePhases``: a frozen dataclass of
float fields (0.0: the step was not reached), one per step::

    @dataclass(frozen=True, slots=True)
    class RestorePhases(PhaseSeconds):
        check: float = 0.0
        ...

    phases.items()                       # (("check", 0.2), ...)
    RestorePhases.from_json(phases.to_json()) == phases
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields as dataclass_fields
from typing import Any, ClassVar, Self

from envckpt.telemetry import fields


class PhaseSeconds:
    """Seconds in each step of one snapshot or restore; subclasses are the dataclasses."""

    __slots__ = ()
    # Set by @dataclass on each subclass (what ``dataclasses.fields`` reads).
    __dataclass_fields__: ClassVar[dict[str, Any]]

    def items(self) -> tuple[tuple[str, float], ...]:
        """(step, seconds) in the order the steps run."""
        return tuple((f.name, float(getattr(self, f.name))) for f in dataclass_fields(self))

    def to_json(self) -> dict[str, float]:
        return dict(self.items())

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> Self:
        """The phases of ``to_json``: TypeError unless an object, ValueError on an unknown
        step or a value that is not seconds."""
        if not isinstance(body, Mapping):
            raise TypeError("phases must be an object")
        unknown = sorted(set(body) - {f.name for f in dataclass_fields(cls)})
        if unknown:
            raise ValueError(f"unknown phases {unknown}")
        return cls(**{name: fields.seconds(value, name) for name, value in body.items()})
