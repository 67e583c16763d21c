"""Injected faults for the in-process transport: tests and the demo use them.

A ``FaultPlan`` holds rules; each rule matches a server (or any) and a route
(or any) and fires ``times`` times (``-1``: forever):

* ``unreachable``: the request never arrives (connection refused).
* ``slow``: the request reaches the participant only after the caller's
  timeout ran out (so past its deadline); the caller sees a timeout.
* ``drop_reply``: the request runs but its reply is lost (a timeout after the
  participant acted: the nastiest case for a coordinator).
* ``error``: the server answers a plain-text HTTP 500 without the envelope,
  as Gym's own servers do for an unexpected hook failure.
* ``crash_before_publish``: a commit writes its records, then "crashes"
  before linking the manifest; the directory stays unpublished.
* ``corrupt_records``: after a commit replies, one byte of its records file
  is flipped.
"""

from __future__ import annotations

from dataclasses import dataclass, field

FAULT_KINDS = (
    "unreachable",
    "slow",
    "drop_reply",
    "error",
    "crash_before_publish",
    "corrupt_records",
)


@dataclass(slots=True)
class Fault:
    kind: str
    server: str | None = None
    route: str | None = None
    times: int = 1

    def __post_init__(self) -> None:
        if self.kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {self.kind!r}")
        if isinstance(self.times, bool) or not isinstance(self.times, int) or self.times < -1:
            raise ValueError(f"times must be -1 (forever) or a count >= 0, got {self.times!r}")

    def matches(self, server: str, route: str) -> bool:
        return (self.server in (None, server)) and (self.route in (None, route)) and self.times != 0


@dataclass
class FaultPlan:
    """The faults still to fire, and a log of the ones that did."""

    faults: list[Fault] = field(default_factory=list)
    fired: list[tuple[str, str, str]] = field(default_factory=list)

    def add(
        self, kind: str, *, server: str | None = None, route: str | None = None, times: int = 1
    ) -> Fault:
        fault = Fault(kind, server, route, times)
        self.faults.append(fault)
        return fault

    def clear(self) -> None:
        self.faults.clear()

    def take(self, server: str, route: str, *kinds: str) -> Fault | None:
        """The first matching fault of one of ``kinds``; counts it as fired."""
        for fault in self.faults:
            if fault.kind in kinds and fault.matches(server, route):
                if fault.times > 0:
                    fault.times -= 1
                self.fired.append((fault.kind, server, route))
                return fault
        return None
