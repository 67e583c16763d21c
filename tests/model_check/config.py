"""The configurations the model check explores: tiny (pytest), bounded (CI) and full.

All are 2 Gym instances x 3 participant kinds (model, agent, resources), a
snapshot, a crash at any point and restores after it, and one injected
fault at any point. They differ in how much may happen around them:

* ``TINY`` (the suite, seconds): one rollout, ``unreachable`` only, no
  faults in the restore;
* ``BOUNDED`` (``make verify``, about a minute here): 2 rollouts parked at
  their turn, any of the four faults (unreachable, slow past its deadline,
  lost reply, failed write) on any request to the first instance, in the
  snapshot and in every restore after the crash (the instances are
  symmetric); the startup discovery is not interleaved (it changes nothing
  on the participants) and time passes only when nothing else can happen;
* ``FULL`` (``python -m model_check --full``, tens of minutes): also a plain
  500, faults on either instance, the third participant of the second
  instance restart-only, each rollout takes a turn more (in flight while a
  prepare waits), and the restored run takes a second snapshot.

``FULL_UNBOUNDED`` (no flag; ``explore(FULL_UNBOUNDED)``) also interleaves
the discovery and lets time pass at any point (leases expiring mid-snapshot):
it did not finish here (45,504 states at depth 18 after 16 minutes).
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
    # A crash may also restart with a partial participant set (i0 lacks a server).
    partial_restore: bool = False
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
    faults=(*FAULTS, "delayed"),
    partial_restore=True,
    faults_after_crash=True,
    ungated_routes=frozenset({"status"}),
    fault_instances=("i0",),
)
FULL = Config(
    name="full",
    faults=(*FAULTS, "error", "delayed"),
    partial_restore=True,
    faults_after_crash=True,
    restart_only_instance=1,
    snapshot_after_restore=True,
    ungated_routes=frozenset({"status"}),
)
FULL_UNBOUNDED = FULL.but(name="full-unbounded", time_anywhere=True, ungated_routes=frozenset())
# A few seconds: what the test suite explores on every run.
TINY = Config(
    name="tiny",
    rollouts=(("r0", 0),),
    max_turn=1,
    faults=("unreachable",),
    ungated_routes=frozenset({"status"}),
    fault_instances=("i0",),
)
