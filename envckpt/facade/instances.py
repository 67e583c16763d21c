"""How the facade reaches one Gym instance: in this process, or in a Ray actor.

The facade only needs picklable results (summaries, None), so the same
``InstanceClient`` interface serves a local ``GymCheckpointAdapter`` and an
adapter hosted in a Ray actor next to its Gym deployment
(``envckpt.facade.ray_instance``).
"""

from __future__ import annotations

from typing import Protocol

from envckpt.episodes import EnvironmentEpisode
from envckpt.gym.adapter import GymCheckpointAdapter
from envckpt.gym.summaries import GymCheckpointCommitSummary, GymCheckpointPrepareSummary


class InstanceClient(Protocol):
    """The operations the facade fans out to each instance."""

    @property
    def instance_id(self) -> str: ...

    async def state(self) -> str: ...

    async def discover(self) -> None: ...

    async def restart_only_servers(self) -> list[str]: ...

    async def participant_names(self) -> tuple[str, ...]: ...

    async def prepare(
        self, checkpoint_id: str, *, deadline_ts: float
    ) -> GymCheckpointPrepareSummary: ...

    async def renew(self, checkpoint_id: str, *, deadline_ts: float) -> None: ...

    async def retire(
        self, checkpoint_id: str, episodes: tuple[EnvironmentEpisode, ...], *, deadline_ts: float
    ) -> None: ...

    async def forget(
        self, checkpoint_id: str, rollout_ids: tuple[str, ...], *, deadline_ts: float
    ) -> None: ...

    async def commit(
        self,
        checkpoint_id: str,
        checkpoint_root: str,
        episodes: tuple[EnvironmentEpisode, ...],
        *,
        deadline_ts: float,
    ) -> GymCheckpointCommitSummary: ...

    async def restore(
        self,
        checkpoint_id: str,
        checkpoint_root: str,
        episodes: tuple[EnvironmentEpisode, ...],
        *,
        participants: tuple[str, ...],
        source_checkpoint_id: str,
        deadline_ts: float,
    ) -> None: ...

    async def abandon_restore(
        self, checkpoint_id: str, episodes: tuple[EnvironmentEpisode, ...], *, deadline_ts: float
    ) -> None: ...

    async def resume(self, checkpoint_id: str, *, deadline_ts: float) -> None: ...


class LocalInstance:
    """``InstanceClient`` over an adapter in this process."""

    # A trainer holds one per Gym instance: no per-object dict.
    __slots__ = ("adapter",)

    def __init__(self, adapter: GymCheckpointAdapter) -> None:
        self.adapter = adapter

    @property
    def instance_id(self) -> str:
        return self.adapter.instance.instance_id

    async def state(self) -> str:
        return self.adapter.state

    async def discover(self) -> None:
        await self.adapter.discover()

    async def restart_only_servers(self) -> list[str]:
        return await self.adapter.restart_only_servers()

    async def participant_names(self) -> tuple[str, ...]:
        return tuple(sorted(self.adapter.participants.names))

    async def prepare(
        self, checkpoint_id: str, *, deadline_ts: float
    ) -> GymCheckpointPrepareSummary:
        result = await self.adapter.prepare(checkpoint_id, deadline_ts=deadline_ts)
        return GymCheckpointPrepareSummary.from_result(result)

    async def renew(self, checkpoint_id: str, *, deadline_ts: float) -> None:
        await self.adapter.renew(checkpoint_id, deadline_ts=deadline_ts)

    async def retire(
        self, checkpoint_id: str, episodes: tuple[EnvironmentEpisode, ...], *, deadline_ts: float
    ) -> None:
        await self.adapter.retire(checkpoint_id, episodes, deadline_ts=deadline_ts)

    async def forget(
        self, checkpoint_id: str, rollout_ids: tuple[str, ...], *, deadline_ts: float
    ) -> None:
        await self.adapter.forget(checkpoint_id, rollout_ids, deadline_ts=deadline_ts)

    async def commit(
        self,
        checkpoint_id: str,
        checkpoint_root: str,
        episodes: tuple[EnvironmentEpisode, ...],
        *,
        deadline_ts: float,
    ) -> GymCheckpointCommitSummary:
        return await self.adapter.commit(
            checkpoint_id, checkpoint_root, episodes, deadline_ts=deadline_ts
        )

    async def restore(
        self,
        checkpoint_id: str,
        checkpoint_root: str,
        episodes: tuple[EnvironmentEpisode, ...],
        *,
        participants: tuple[str, ...],
        source_checkpoint_id: str,
        deadline_ts: float,
    ) -> None:
        await self.adapter.restore(
            checkpoint_id,
            checkpoint_root,
            episodes,
            participants=participants,
            source_checkpoint_id=source_checkpoint_id,
            deadline_ts=deadline_ts,
        )

    async def abandon_restore(
        self, checkpoint_id: str, episodes: tuple[EnvironmentEpisode, ...], *, deadline_ts: float
    ) -> None:
        await self.adapter.abandon_restore(checkpoint_id, episodes, deadline_ts=deadline_ts)

    async def resume(self, checkpoint_id: str, *, deadline_ts: float) -> None:
        await self.adapter.resume(checkpoint_id, deadline_ts=deadline_ts)
