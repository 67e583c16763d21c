"""The simulated Gym hosted in Ray actors: the actor and the client's rollout calls.

``GymInstanceActor`` is an ``InstanceActor`` (``envckpt.facade.ray_instance``)
hosting one ``SimulatedGym`` and its checkpoint adapter; ``SimRayInstance``
adds the rollout calls to the facade's ``RayInstance``::

    instances = spawn_instances([GymCheckpointInstance("shard", 0)], GymConfig(seed=7))
    facade = GymEnvironmentCheckpoint(instances, inventory)
    await facade.check_startup()
    await instances[0].start_rollout(EnvironmentEpisode("r1", 0), task)
    async with facade.snapshot(path) as snap: ...      # each call bounded by its deadline
    # after a crash: spawn_instances(same instances, same config), facade.restored(path)

Importing this module never imports ray (an optional extra):
``gym_instance_actor_class()`` builds the ``ray.remote`` class on first use.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from collections.abc import Iterable, Mapping
from typing import Any

from envckpt.episodes import EnvironmentEpisode
from envckpt.errors import DeadlineExceeded, GymCheckpointUnavailable, ProtocolViolation
from envckpt.facade.instances import LocalInstance
from envckpt.facade.ray_instance import InstanceActor, RayInstance
from envckpt.gym.adapter import GymCheckpointAdapter
from envckpt.gym.instance import GymCheckpointInstance
from envckpt.sim.gym import GymConfig, SimulatedGym


class GymInstanceActor(InstanceActor):
    """One simulated Gym deployment and its checkpoint adapter, inside one actor process.

    Use ``gym_instance_actor_class()`` for the Ray actor; the plain class runs
    in-process too.
    """

    def __init__(
        self,
        instance: GymCheckpointInstance,
        config: GymConfig,
        *,
        rows_url: str | None = None,
        rows_token: str | None = None,
    ) -> None:
        self._instance = instance
        # The policy model ships token rows to the trainer while it generates.
        sink = None
        if rows_url is not None:
            from envckpt.sim.data_clients import HttpStagingSink  # the http extra

            sink = HttpStagingSink(rows_url, rows_token or "")
        config = dataclasses.replace(config, instance_id=instance.instance_id)
        self._gym = SimulatedGym.from_config(config, staging_sink=sink)
        super().__init__(
            LocalInstance(
                GymCheckpointAdapter(instance=instance, coordination=self._gym.coordinator)
            )
        )
        self._rollouts: dict[EnvironmentEpisode, asyncio.Task[dict[str, Any]]] = {}

    # -------------------------------------------------------------- rollouts

    async def start_rollout(self, episode: EnvironmentEpisode, task: Mapping[str, Any]) -> None:
        """Run one rollout attempt in the background, as the trainer's dispatch would."""
        running = self._rollouts.get(episode)
        if running is not None and not running.done():
            raise ValueError(f"{episode.capture_key} is already running here")
        self._rollouts[episode] = self._gym.start(episode, dict(task))

    async def run_rollout(
        self, episode: EnvironmentEpisode, task: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Run one rollout attempt to its end and return its result (the trainer's dispatch)."""
        await self.start_rollout(episode, task)
        running = self._rollout(episode)
        await asyncio.wait({running})
        return self._outcome(episode, running)

    def _rollout(self, episode: EnvironmentEpisode) -> asyncio.Task[dict[str, Any]]:
        try:
            return self._rollouts[episode]
        except KeyError:
            raise ValueError(f"no rollout {episode.capture_key} was started here") from None

    def _outcome(
        self, episode: EnvironmentEpisode, task: asyncio.Task[dict[str, Any]]
    ) -> dict[str, Any]:
        if task.cancelled():
            # Re-raising CancelledError would read to Ray as a cancelled call.
            raise GymCheckpointUnavailable(
                f"{self._instance.instance_id}: rollout {episode.capture_key} was stopped "
                "before it finished",
                operation="rollout",
                failures={self._instance.instance_id: "stopped"},
            )
        return task.result()

    async def rollout_result(self, episode: EnvironmentEpisode) -> dict[str, Any] | None:
        """The finished rollout's result (its error, if it failed); None while it runs."""
        task = self._rollout(episode)
        return self._outcome(episode, task) if task.done() else None

    async def wait_rollout(self, episode: EnvironmentEpisode, timeout: float) -> dict[str, Any]:
        """Wait up to ``timeout`` seconds for the rollout's result."""
        task = self._rollout(episode)
        deadline_ts = self._gym.clock.now() + timeout
        # asyncio.wait never cancels the rollout, whatever happens to this call.
        await asyncio.wait({task}, timeout=max(0.0, timeout))
        if not task.done():
            raise DeadlineExceeded(
                f"rollout {episode.capture_key} did not finish in {timeout:g} s",
                deadline_ts=deadline_ts,
            )
        return self._outcome(episode, task)

    async def agent_sessions(self) -> dict[str, dict[str, Any]]:
        """Capture key -> ``{task, turns, transcript}`` of every session the agent holds."""
        return self._gym.agent.sessions()

    async def node_id(self) -> str:
        """The Ray node this actor runs on (where a placement strategy put it)."""
        import ray

        node: str = ray.get_runtime_context().get_node_id()
        return node

    async def shutdown(self) -> None:
        """Stop every running rollout as if the process died."""
        await self._gym.shutdown()
        pending = [task for task in self._rollouts.values() if not task.done()]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)


@functools.cache
def gym_instance_actor_class() -> Any:
    """``ray.remote(GymInstanceActor)``, built (and ray imported) on first use."""
    import ray

    return ray.remote(GymInstanceActor)


class SimRayInstance(RayInstance):
    """``RayInstance`` over a ``GymInstanceActor``, with its rollout calls."""

    # -------------------------------------------------------------- rollouts

    async def start_rollout(self, episode: EnvironmentEpisode, task: Mapping[str, Any]) -> None:
        """Start one rollout attempt in the actor (it runs in the background there)."""
        await self._operate(type(None), "start_rollout", episode, dict(task))

    async def run_rollout(
        self, episode: EnvironmentEpisode, task: Mapping[str, Any], *, timeout: float = 3600.0
    ) -> dict[str, Any]:
        """Run one rollout attempt in the actor and return its result."""
        result = await self._call("run_rollout", episode, dict(task), timeout=timeout)
        return _as_dict(result, "run_rollout")

    async def rollout_result(self, episode: EnvironmentEpisode) -> dict[str, Any] | None:
        """The finished rollout's result, None while it runs; its error if it failed."""
        result = await self._call("rollout_result", episode)
        return None if result is None else _as_dict(result, "rollout_result")

    async def wait_rollout(self, episode: EnvironmentEpisode, timeout: float) -> dict[str, Any]:
        """Wait up to ``timeout`` s for the result (``DeadlineExceeded`` if it is not done)."""
        result = await self._call(
            "wait_rollout", episode, timeout, timeout=timeout + self.slack_seconds
        )
        return _as_dict(result, "wait_rollout")

    async def agent_sessions(self) -> dict[str, dict[str, Any]]:
        return _as_dict(await self._call("agent_sessions"), "agent_sessions")

    async def node_id(self) -> str:
        """The Ray node the actor runs on."""
        return await self._operate(str, "node_id")

    async def shutdown(self) -> None:
        """Stop every running rollout in the actor, as if its process died."""
        await self._operate(type(None), "shutdown")


def spawn_instances(
    instances: Iterable[GymCheckpointInstance],
    config: GymConfig,
    *,
    namespace: str | None = None,
    actor_options: Mapping[str, Any] | None = None,
    slack_seconds: float = 5.0,
    rows_url: str | None = None,
    rows_token: str | None = None,
) -> list[SimRayInstance]:
    """Start one ``GymInstanceActor`` per instance and return their clients.

    With a ``namespace`` each actor is named ``envckpt-gym/<instance_id>`` in
    it (``ray.get_actor`` finds it); a replacement for a killed actor may reuse
    the name once Ray has recorded the death.
    """
    actor_class = gym_instance_actor_class()
    clients: list[SimRayInstance] = []
    for instance in instances:
        options: dict[str, Any] = {"max_restarts": 0, **(actor_options or {})}
        if namespace is not None:
            options.update(name=actor_name(instance), namespace=namespace)
        handle = actor_class.options(**options).remote(
            instance, config, rows_url=rows_url, rows_token=rows_token
        )
        clients.append(SimRayInstance(handle, instance.instance_id, slack_seconds=slack_seconds))
    return clients


def actor_name(instance: GymCheckpointInstance) -> str:
    """The Ray actor name ``spawn_instances`` gives ``instance`` in a namespace."""
    return f"envckpt-gym/{instance.instance_id}"


def _as_dict(value: object, operation: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ProtocolViolation(f"{operation} returned {type(value).__name__}, expected a dict")
    return value
