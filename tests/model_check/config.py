"""The configurations the model check explores: bounded (CI) and full.

Both are 2 Gym instances x 3 participant kinds (model, agent, resources) x
2 rollouts, one snapshot, a crash and one injected fault at any point. They
differ in how finely time and faults may fall:

* ``BOUNDED`` (``make verify``, under 2 minutes here): a fault on any
  request of the first run to the first instance (the instances are
  symmetric: unreachable, slow past its deadline, lost reply, failed
  write), the startup discovery is not interleaved (it changes nothing on
  the participants), time passes only when nothing else can happen, and
  the rollouts stay parked at their turn;
* ``FULL`` (``python -m model_check --full``): also faults in the restore
  and the discovery, on either instance, a plain 500, each rollout takes
  a turn more (in flight while a prepare waits), time may pass at any
  point (leases can expire mid-snapshot), the third participant of the
  second instance is restart-only, and the restored run takes a second
  snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

KINDS = (
    ("policy", "model", "export_restore"),
    ("agent", "agent", "export_restore"),
    ("tools", "resources", "export_restore"),
)
# The four faults of the brief; "error" (a plain HTTP 500) is the full run's fifth.
FAULTS = ("unreachable", "slow", "drop_reply", "crash_before_publish")


@dataclass(frozen=True)
class Config:
    """One explored configuration."""

    name: str
    instances: int = 2
    # (rollout id, instance index): each starts at turn 1, attempt 0.
    rollouts: tuple[tuple[str, int], ...] = (("r0", 0), ("r1", 1))
    kinds: tuple[tuple[str, str, str], ...] = KINDS
    # An instance whose last participant is restart-only (its rollouts restart).
    restart_only_instance: int | None = None
    max_turn: int = 2
    faults: tuple[str, ...] = FAULTS
    fault_budget: int = 1
    crash_budget: int = 1
    # Faults also during a restore (after a crash), not only in the first run.
    faults_after_crash: bool = False
    # Time may pass at any state, not only when nothing else can happen.
    time_anywhere: bool = False
    snapshot_after_restore: bool = False
    # Routes delivered without a gate (bounded: the startup discovery, which
    # reads and changes nothing on the participants).
    ungated_routes: frozenset[str] = frozenset()
    # Instances whose requests may be faulted. The two instances and their
    # rollouts are symmetric, so faults on one of them cover both.
    fault_instances: tuple[str, ...] = ("i0", "i1")
    # Stop after this many states (None: explore everything).
    max_states: int | None = None
    lease_grace: float = 30.0
    extra: dict[str, str] = field(default_factory=dict)

    def but(self, **changes: object) -> Config:
        return replace(self, **changes)  # type: ignore[arg-type]


BOUNDED = Config(
    name="bounded",
    max_turn=1,
    ungated_routes=frozenset({"status"}),
    fault_instances=("i0",),
)
FULL = Config(
    name="full",
    faults=(*FAULTS, "error"),
    faults_after_crash=True,
    time_anywhere=True,
    restart_only_instance=1,
    snapshot_after_restore=True,
)
# A few seconds: what the test suite explores on every run.
TINY = Config(
    name="tiny",
    rollouts=(("r0", 0),),
    max_turn=1,
    faults=("unreachable",),
    ungated_routes=frozenset({"status"}),
    fault_instances=("i0",),
)
