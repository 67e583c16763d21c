"""An ``InstanceActor`` over an in-process dict deployment, for the RayInstance tests.

``DictInstanceActor`` hosts one ``helpers.dict_deployment.Deployment`` (on the
system clock, since the caller's deadlines are wall-clock) and its adapter, and
adds test hooks a misbehaving host would show: a reply of the wrong type, an
error of its own. Ray workers import it as ``helpers.ray_hosts``, so the tests
directory must be on their ``PYTHONPATH``::

    actor = ray.remote(DictInstanceActor).remote("shard", 0)
    client = RayInstance(actor, "shard/replica-0")
"""

from __future__ import annotations

from typing import Any

from envckpt.clock import SystemClock
from envckpt.episodes import EnvironmentEpisode
from envckpt.facade.instances import LocalInstance
from envckpt.facade.ray_instance import InstanceActor
from envckpt.gym.adapter import GymCheckpointAdapter
from envckpt.gym.instance import GymCheckpointInstance

from helpers.dict_deployment import Deployment


class DictInstanceActor(InstanceActor):
    """A dict deployment's adapter in a (Ray actor) process, with misbehaviour switches."""

    def __init__(self, shard: str, replica: int) -> None:
        self.deployment = Deployment(clock=SystemClock())
        instance = GymCheckpointInstance(shard, replica)
        adapter = GymCheckpointAdapter(instance=instance, coordination=self.deployment.coordinator)
        super().__init__(LocalInstance(adapter))
        self._wrong_replies: dict[str, Any] = {}
        self._started: list[str] = []

    async def start(self, episode: EnvironmentEpisode) -> None:
        """Run ``episode`` to turn 2 in every participant."""
        await self.deployment.start(episode, turn=2)

    async def reply_wrongly(self, operation: str, value: Any) -> None:
        """The next ``operation`` answers ``value`` instead of running."""
        self._wrong_replies[operation] = value

    async def started_calls(self) -> list[str]:
        """The operations whose ``call`` began here, in order."""
        return list(self._started)

    async def phases(self) -> dict[str, str]:
        return {name: str(core.phase) for name, core in self.deployment.cores.items()}

    async def call(self, operation: str, *args: Any, **kwargs: Any) -> object:
        self._started.append(operation)
        if operation in self._wrong_replies:
            return self._wrong_replies.pop(operation)
        return await super().call(operation, *args, **kwargs)
