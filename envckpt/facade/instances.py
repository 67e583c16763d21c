"""How the facade reaches one Gym instance: in this process, or in a Ray actor.

The facade only needs picklable results (summaries, None), so the same
``InstanceClient`` interface serves a local ``GymCheckpointAdapter`` and an
adapter hosted in a Ray actor next to its Gym deployment
(``envckpt.facade.ray_instance``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, TypeVar

from envckpt.episodes import EnvironmentEpisode
from envckpt.gym.adapter import GymCheckpointAdapter
from envckpt.gym.summaries import GymCheckpointCommitSummary, GymCheckpointPrepareSummary

T = TypeVar("T")


class InstanceClient(ABC):
    """The operations the facade fans out to each instance, each written once here.

    A client reaches its instance through one ``_operate`` (an adapter in this
    process, an actor's generic ``call``); it overrides an operation only where
    its instance answers it another way.
    """

    __slots__ = ()

    @property
    @abstractmethod
    def instance_id(self) -> str: ...

    @abstractmethod
    async def _operate(self, expected: type[T], operation: str, *args: Any, **kwargs: Any) -> T:
        """Run ``operation`` on the instance; its result (``expected``: the type it must have)."""

    async def state(self) -> str:
        return await self._operate(str, "state")

    async def discover(self) -> None:
        await self._operate(type(None), "discover")

    async def restart_only_servers(self) -> list[str]:
        return [str(name) for name in await self._operate(list, "restart_only_servers")]

    async def participant_names(self) -> tuple[str, ...]:
        return tuple(str(name) for name in await self._operate(tuple, "participant_names"))

    async def prepare(
        self, checkpoint_id: str, *, deadline_ts: float
    ) -> GymCheckpointPrepareSummary:
        summary = GymCheckpointPrepareSummary
        return await self._operate(summary, "prepare", checkpoint_id, deadline_ts=deadline_ts)

    async def renew(self, checkpoint_id: str, *, deadline_ts: float) -> None:
        await self._operate(type(None), "renew", checkpoint_id, deadline_ts=deadline_ts)

    async def retire(
        self, checkpoint_id: str, episodes: tuple[EnvironmentEpisode, ...], *, deadline_ts: float
    ) -> None:
        args = (checkpoint_id, tuple(episodes))
        await self._operate(type(None), "retire", *args, deadline_ts=deadline_ts)

    async def forget(
        self, checkpoint_id: str, rollout_ids: tuple[str, ...], *, deadline_ts: float
    ) -> None:
        args = (checkpoint_id, tuple(rollout_ids))
        await self._operate(type(None), "forget", *args, deadline_ts=deadline_ts)

    async def commit(
        self,
        checkpoint_id: str,
        checkpoint_root: str,
        episodes: tuple[EnvironmentEpisode, ...],
        *,
        deadline_ts: float,
    ) -> GymCheckpointCommitSummary:
        args = (checkpoint_id, str(checkpoint_root), tuple(episodes))
        return await self._operate(
            GymCheckpointCommitSummary, "commit", *args, deadline_ts=deadline_ts
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
        args = (checkpoint_id, str(checkpoint_root), tuple(episodes))
        await self._operate(
            type(None),
            "restore",
            *args,
            participants=tuple(participants),
            source_checkpoint_id=source_checkpoint_id,
            deadline_ts=deadline_ts,
        )

    async def abandon_restore(
        self, checkpoint_id: str, episodes: tuple[EnvironmentEpisode, ...], *, deadline_ts: float
    ) -> None:
        args = (checkpoint_id, tuple(episodes))
        await self._operate(type(None), "abandon_restore", *args, deadline_ts=deadline_ts)

    async def resume(self, checkpoint_id: str, *, deadline_ts: float) -> None:
        await self._operate(type(None), "resume", checkpoint_id, deadline_ts=deadline_ts)


class LocalInstance(InstanceClient):
    """``InstanceClient`` over an adapter in this process."""

    # A trainer holds one per Gym instance: no per-object dict.
    __slots__ = ("adapter",)

    def __init__(self, adapter: GymCheckpointAdapter) -> None:
        self.adapter = adapter

    @property
    def instance_id(self) -> str:
        return self.adapter.instance.instance_id

    async def _operate(self, expected: type[T], operation: str, *args: Any, **kwargs: Any) -> T:
        # Every other operation is the adapter's method of the same name.
        result: T = await getattr(self.adapter, operation)(*args, **kwargs)
        return result

    async def state(self) -> str:
        return self.adapter.state

    async def participant_names(self) -> tuple[str, ...]:
        return tuple(sorted(self.adapter.participants.names))

    async def prepare(
        self, checkpoint_id: str, *, deadline_ts: float
    ) -> GymCheckpointPrepareSummary:
        result = await self.adapter.prepare(checkpoint_id, deadline_ts=deadline_ts)
        return GymCheckpointPrepareSummary.from_result(result)
