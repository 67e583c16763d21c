"""One rollout snapshot while the backend is paused: what the trainer holds.

Created by ``GymEnvironmentCheckpoint.snapshot`` after every instance
committed and ``gym_checkpoint.json`` was written. The trainer calls
``check_against_cut`` under its data-plane cut; the session machine
(``SNAPSHOT_SESSION``) refuses a second check or a check after the context.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from envckpt.gym.summaries import GymCheckpointCommitSummary, GymCheckpointPrepareSummary
from envckpt.interfaces import MutationCut
from envckpt.inventory import RolloutInventory, SnapshotContents
from envckpt.machines.binding import MachineState, bind
from envckpt.machines.tables import SNAPSHOT_SESSION, SessionState
from envckpt.telemetry.environment import EnvironmentTelemetry, environment_telemetry

SESSION = bind(SNAPSHOT_SESSION)


@dataclass(frozen=True, slots=True)
class SnapshotTimings:
    retire_seconds: float
    prepare_seconds: float
    commit_seconds: float
    manifest_bytes: int


@dataclass(frozen=True, slots=True)
class InstanceLatencies:
    """What the fan-out stamped per instance, and the summaries it got back.

    Kept as they came, so the pause pays for nothing but the stamps; the
    record is built from them after the environment resumed (``telemetry``).
    """

    prepare_seconds: Mapping[str, float] = field(default_factory=dict)
    commit_seconds: Mapping[str, float] = field(default_factory=dict)
    prepared: Mapping[str, GymCheckpointPrepareSummary] = field(default_factory=dict)
    committed: Mapping[str, GymCheckpointCommitSummary] = field(default_factory=dict)


class GymEnvironmentSnapshot:
    """``EnvironmentSnapshot`` for a snapshot of N Gym instances."""

    def __init__(
        self,
        *,
        contents: SnapshotContents,
        inventory: RolloutInventory,
        session: MachineState[SessionState],
        timings: SnapshotTimings,
        unowned_live_episodes: int,
        latencies: InstanceLatencies | None = None,
    ) -> None:
        self.contents = contents
        self._inventory = inventory
        self._session = session
        self.timings = timings
        self.unowned_live_episodes = unowned_live_episodes
        self.latencies = latencies or InstanceLatencies()

    @property
    def checkpoint_id(self) -> str:
        return self.contents.checkpoint_id

    @property
    def state(self) -> SessionState:
        return self._session.state

    @property
    def exported_episodes(self) -> int:
        return sum(len(episodes) for episodes in self.contents.exported.values())

    @property
    def restarted_rollouts(self) -> int:
        return len(
            {episode for episodes in self.contents.restarts.values() for episode in episodes}
        )

    async def check_against_cut(self, cut: MutationCut) -> None:
        """Under the cut, raise unless the captured state matches the trainer's ledger."""
        SESSION.check(self._session, "check_cut")
        cut.require_live()
        await self._inventory.verify_against_cut(cut, self.contents)
        SESSION.fire(self._session, "check_cut", checkpoint_id=self.checkpoint_id)

    def metrics(self, paused_seconds: float) -> dict[str, float]:
        return {
            "env_paused_seconds": float(paused_seconds),
            "env_retire_seconds": self.timings.retire_seconds,
            "env_prepare_seconds": self.timings.prepare_seconds,
            "env_commit_seconds": self.timings.commit_seconds,
            "env_manifest_bytes": float(self.timings.manifest_bytes),
            "env_instances": float(len(self.contents.exported)),
            "env_exported_episodes": float(self.exported_episodes),
            "env_restarted_rollouts": float(self.restarted_rollouts),
            "env_unowned_live_episodes": float(self.unowned_live_episodes),
            "env_staging_keys": float(len(self.contents.all_staging_keys())),
        }

    def telemetry(self) -> EnvironmentTelemetry:
        """Per-instance latencies for the snapshot's record (call it after resuming)."""
        latencies = self.latencies
        return environment_telemetry(
            prepare_seconds=latencies.prepare_seconds,
            commit_seconds=latencies.commit_seconds,
            prepared=latencies.prepared,
            committed=latencies.committed,
            exported={iid: len(episodes) for iid, episodes in self.contents.exported.items()},
            restarts={iid: len(episodes) for iid, episodes in self.contents.restarts.items()},
        )
