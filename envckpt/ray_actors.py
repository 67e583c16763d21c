"""Gym instances hosted in Ray actors, and the trainer-side client of one.

NeMo RL hosts one checkpoint adapter per Gym actor, inside the actor process
next to the Gym deployment it controls. ``GymInstanceActor`` does the same
with a ``SimulatedGym``; ``RayInstance`` is the ``InstanceClient`` the facade
fans out to, over the actor's handle::

    instances = spawn_instances([GymCheckpointInstance("shard", 0)], GymConfig(seed=7))
    facade = GymEnvironmentCheckpoint(instances, inventory)
    await facade.check_startup()
    await instances[0].start_rollout(EnvironmentEpisode("r1", 0), task)
    async with facade.snapshot(path) as snap: ...      # each call bounded by its deadline
    # after a crash: spawn_instances(same instances, same config), facade.restored(path)

Every call through ``RayInstance`` is bounded: by the operation's absolute
``deadline_ts`` plus a slack, or by a default control timeout. What reaches
the caller is always an envckpt error or the actor's own typed error:

* the actor raised: the original exception (``RayTaskError.cause``), with its
  fields, not Ray's wrapper;
* the actor is dead or unreachable, or the reply did not come in time (the
  call is then cancelled with ``ray.cancel``): ``GymCheckpointUnavailable``
  naming the operation and the instance.

Importing this module never imports ray (an optional extra): ray is imported
where a handle is made or awaited, and ``gym_instance_actor_class()`` builds
the ``ray.remote`` class on first use.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from envckpt.clock import Clock, SystemClock
from envckpt.episodes import EnvironmentEpisode
from envckpt.errors import DeadlineExceeded, GymCheckpointUnavailable, ProtocolViolation
from envckpt.facade.instances import LocalInstance
from envckpt.gym.adapter import GymCheckpointAdapter
from envckpt.gym.instance import GymCheckpointInstance
from envckpt.gym.simulated import GymConfig, SimulatedGym
from envckpt.gym.summaries import GymCheckpointCommitSummary, GymCheckpointPrepareSummary

T = TypeVar("T")

DEFAULT_CONTROL_TIMEOUT_SECONDS = 60.0


class GymInstanceActor:
    """One Gym deployment and its checkpoint adapter, inside one (Ray actor) process.

    Use ``gym_instance_actor_class()`` for the Ray actor; the plain class runs
    in-process too (its methods are all ``async``, so Ray hosts it as an async
    actor: one event loop serves control calls and rollouts alike).
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
            from envckpt.http.data_clients import HttpStagingSink  # the http extra

            sink = HttpStagingSink(rows_url, rows_token or "")
        self._gym = SimulatedGym.from_config(config, staging_sink=sink)
        self._local = LocalInstance(
            GymCheckpointAdapter(instance=instance, coordination=self._gym.coordinator)
        )
        self._rollouts: dict[EnvironmentEpisode, asyncio.Task[dict[str, Any]]] = {}
        self._stall: tuple[float, str | None] | None = None
        self._cancelled_calls = 0

    # ------------------------------------------------------------ test hooks

    async def stall(self, seconds: float, operation: str | None = None) -> None:
        """Test hook: the next control call (of ``operation``, if named) first sleeps."""
        if seconds < 0:
            raise ValueError("stall seconds must be >= 0")
        self._stall = (seconds, operation)

    async def _control(self, operation: str) -> None:
        if self._stall is None:
            return
        seconds, only = self._stall
        if only is not None and only != operation:
            return
        self._stall = None
        try:
            # A silent actor: the caller's deadline passes and it cancels this call.
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            self._cancelled_calls += 1
            raise

    async def cancelled_calls(self) -> int:
        """Test hook: how many stalled control calls were cancelled (``ray.cancel``)."""
        return self._cancelled_calls

    # -------------------------------------------------------- InstanceClient

    async def instance_id(self) -> str:
        return self._local.instance_id

    async def state(self) -> str:
        await self._control("state")
        return await self._local.state()

    async def discover(self) -> None:
        await self._control("discover")
        await self._local.discover()

    async def restart_only_servers(self) -> list[str]:
        await self._control("restart_only_servers")
        return await self._local.restart_only_servers()

    async def participant_names(self) -> tuple[str, ...]:
        await self._control("participant_names")
        return await self._local.participant_names()

    async def prepare(
        self, checkpoint_id: str, *, deadline_ts: float
    ) -> GymCheckpointPrepareSummary:
        await self._control("prepare")
        return await self._local.prepare(checkpoint_id, deadline_ts=deadline_ts)

    async def renew(self, checkpoint_id: str, *, deadline_ts: float) -> None:
        await self._control("renew")
        await self._local.renew(checkpoint_id, deadline_ts=deadline_ts)

    async def retire(
        self, checkpoint_id: str, episodes: tuple[EnvironmentEpisode, ...], *, deadline_ts: float
    ) -> None:
        await self._control("retire")
        await self._local.retire(checkpoint_id, episodes, deadline_ts=deadline_ts)

    async def forget(
        self, checkpoint_id: str, rollout_ids: tuple[str, ...], *, deadline_ts: float
    ) -> None:
        await self._control("forget")
        await self._local.forget(checkpoint_id, rollout_ids, deadline_ts=deadline_ts)

    async def commit(
        self,
        checkpoint_id: str,
        checkpoint_root: str,
        episodes: tuple[EnvironmentEpisode, ...],
        *,
        deadline_ts: float,
    ) -> GymCheckpointCommitSummary:
        await self._control("commit")
        return await self._local.commit(
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
        await self._control("restore")
        await self._local.restore(
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
        await self._control("abandon_restore")
        await self._local.abandon_restore(checkpoint_id, episodes, deadline_ts=deadline_ts)

    async def resume(self, checkpoint_id: str, *, deadline_ts: float) -> None:
        await self._control("resume")
        await self._local.resume(checkpoint_id, deadline_ts=deadline_ts)

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


class RayInstance:
    """``InstanceClient`` over a ``GymInstanceActor`` handle; every call is bounded."""

    def __init__(
        self,
        handle: Any,
        instance_id: str,
        *,
        clock: Clock | None = None,
        slack_seconds: float = 5.0,
        control_timeout_seconds: float = DEFAULT_CONTROL_TIMEOUT_SECONDS,
    ) -> None:
        if slack_seconds < 0 or control_timeout_seconds <= 0:
            raise ValueError("slack must be >= 0 and the control timeout > 0")
        self._handle = handle
        self._instance_id = instance_id
        self._clock = clock or SystemClock()
        self.slack_seconds = slack_seconds
        self.control_timeout_seconds = control_timeout_seconds

    @property
    def instance_id(self) -> str:
        return self._instance_id

    @property
    def handle(self) -> Any:
        """The actor handle (to kill or replace the actor)."""
        return self._handle

    def __repr__(self) -> str:
        return f"RayInstance({self._instance_id!r})"

    # ------------------------------------------------------------- the call

    def _unavailable(self, operation: str, reason: str) -> GymCheckpointUnavailable:
        return GymCheckpointUnavailable(
            f"{self._instance_id}: {operation} failed: {reason}",
            operation=operation,
            failures={self._instance_id: reason},
        )

    async def _call(
        self,
        operation: str,
        *args: object,
        deadline_ts: float | None = None,
        timeout: float | None = None,
        **kwargs: object,
    ) -> object:
        """Call ``operation`` on the actor; bounded, with Ray's errors translated."""
        import ray

        if timeout is None:
            timeout = (
                self.control_timeout_seconds
                if deadline_ts is None
                else deadline_ts - self._clock.now() + self.slack_seconds
            )
        if timeout <= 0:
            raise self._unavailable(operation, "its deadline passed before the call was sent")
        if deadline_ts is not None:
            kwargs["deadline_ts"] = deadline_ts
        try:
            ref = getattr(self._handle, operation).remote(*args, **kwargs)
        except ray.exceptions.RayError as error:
            raise self._unavailable(operation, f"{type(error).__name__}: {error}") from error
        try:
            return await asyncio.wait_for(ref, timeout)
        # RayTaskError first: its dynamic subclass also derives from the cause's
        # type, which may itself be a TimeoutError (DeadlineExceeded).
        except ray.exceptions.RayTaskError as error:
            raise _original(error, self._unavailable(operation, _describe(error))) from error
        except ray.exceptions.RayError as error:
            # Dead, unreachable or restarting actor, lost reply, cancelled elsewhere.
            raise self._unavailable(operation, _describe(error)) from error
        except TimeoutError:
            _cancel(ref)
            raise self._unavailable(
                operation, f"no reply in {timeout:.3g} s; the call was cancelled"
            ) from None
        except asyncio.CancelledError:
            # The caller gave up (the facade stops its lease renewer this way).
            _cancel(ref)
            raise

    async def _typed(self, expected: type[T], operation: str, *args: object, **kwargs: Any) -> T:
        result = await self._call(operation, *args, **kwargs)
        if not isinstance(result, expected):
            raise ProtocolViolation(
                f"{self._instance_id}: {operation} returned {type(result).__name__}, "
                f"expected {expected.__name__}"
            )
        return result

    async def _none(self, operation: str, *args: object, **kwargs: Any) -> None:
        await self._typed(type(None), operation, *args, **kwargs)

    # -------------------------------------------------------- InstanceClient

    async def state(self) -> str:
        return await self._typed(str, "state")

    async def discover(self) -> None:
        await self._none("discover")

    async def restart_only_servers(self) -> list[str]:
        return [str(name) for name in await self._typed(list, "restart_only_servers")]

    async def participant_names(self) -> tuple[str, ...]:
        return tuple(str(name) for name in await self._typed(tuple, "participant_names"))

    async def prepare(
        self, checkpoint_id: str, *, deadline_ts: float
    ) -> GymCheckpointPrepareSummary:
        return await self._typed(
            GymCheckpointPrepareSummary, "prepare", checkpoint_id, deadline_ts=deadline_ts
        )

    async def renew(self, checkpoint_id: str, *, deadline_ts: float) -> None:
        await self._none("renew", checkpoint_id, deadline_ts=deadline_ts)

    async def retire(
        self, checkpoint_id: str, episodes: tuple[EnvironmentEpisode, ...], *, deadline_ts: float
    ) -> None:
        await self._none("retire", checkpoint_id, tuple(episodes), deadline_ts=deadline_ts)

    async def forget(
        self, checkpoint_id: str, rollout_ids: tuple[str, ...], *, deadline_ts: float
    ) -> None:
        await self._none("forget", checkpoint_id, tuple(rollout_ids), deadline_ts=deadline_ts)

    async def commit(
        self,
        checkpoint_id: str,
        checkpoint_root: str,
        episodes: tuple[EnvironmentEpisode, ...],
        *,
        deadline_ts: float,
    ) -> GymCheckpointCommitSummary:
        return await self._typed(
            GymCheckpointCommitSummary,
            "commit",
            checkpoint_id,
            str(checkpoint_root),
            tuple(episodes),
            deadline_ts=deadline_ts,
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
        await self._none(
            "restore",
            checkpoint_id,
            str(checkpoint_root),
            tuple(episodes),
            participants=tuple(participants),
            source_checkpoint_id=source_checkpoint_id,
            deadline_ts=deadline_ts,
        )

    async def abandon_restore(
        self, checkpoint_id: str, episodes: tuple[EnvironmentEpisode, ...], *, deadline_ts: float
    ) -> None:
        await self._none("abandon_restore", checkpoint_id, tuple(episodes), deadline_ts=deadline_ts)

    async def resume(self, checkpoint_id: str, *, deadline_ts: float) -> None:
        await self._none("resume", checkpoint_id, deadline_ts=deadline_ts)

    # -------------------------------------------------------------- rollouts

    async def start_rollout(self, episode: EnvironmentEpisode, task: Mapping[str, Any]) -> None:
        """Start one rollout attempt in the actor (it runs in the background there)."""
        await self._none("start_rollout", episode, dict(task))

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

    async def shutdown(self) -> None:
        """Stop every running rollout in the actor, as if its process died."""
        await self._none("shutdown")

    async def stall(self, seconds: float, operation: str | None = None) -> None:
        """Test hook: the actor's next control call (of ``operation``) first sleeps."""
        await self._none("stall", seconds, operation)

    async def cancelled_calls(self) -> int:
        """Test hook: how many stalled calls the actor saw cancelled."""
        return await self._typed(int, "cancelled_calls")


def spawn_instances(
    instances: Iterable[GymCheckpointInstance],
    config: GymConfig,
    *,
    namespace: str | None = None,
    actor_options: Mapping[str, Any] | None = None,
    slack_seconds: float = 5.0,
    rows_url: str | None = None,
    rows_token: str | None = None,
) -> list[RayInstance]:
    """Start one ``GymInstanceActor`` per instance and return their clients.

    With a ``namespace`` each actor is named ``envckpt-gym/<instance_id>`` in
    it (``ray.get_actor`` finds it); a replacement for a killed actor may reuse
    the name once Ray has recorded the death.
    """
    actor_class = gym_instance_actor_class()
    clients: list[RayInstance] = []
    for instance in instances:
        options: dict[str, Any] = {"max_restarts": 0, **(actor_options or {})}
        if namespace is not None:
            options.update(name=actor_name(instance), namespace=namespace)
        handle = actor_class.options(**options).remote(
            instance, config, rows_url=rows_url, rows_token=rows_token
        )
        clients.append(RayInstance(handle, instance.instance_id, slack_seconds=slack_seconds))
    return clients


def actor_name(instance: GymCheckpointInstance) -> str:
    """The Ray actor name ``spawn_instances`` gives ``instance`` in a namespace."""
    return f"envckpt-gym/{instance.instance_id}"


def _original(error: Any, fallback: GymCheckpointUnavailable) -> BaseException:
    """The exception the actor raised, unwrapped from Ray's ``RayTaskError``.

    Ray 2.60 raises a dynamic class ``RayTaskError(<Cause>)`` deriving from both
    ``RayTaskError`` and the cause's type; its ``str`` is the remote traceback.
    ``.cause`` is the unpickled original, with its exact type and fields. A
    cause that is itself a Ray error (the task was cancelled, an actor it
    called died) or that Ray could not deserialize means unavailability.
    """
    import ray

    cause = getattr(error, "cause", None)
    if isinstance(cause, Exception) and not isinstance(cause, ray.exceptions.RayError):
        return cause
    return fallback


def _describe(error: BaseException) -> str:
    """One line for a Ray error (its ``str`` may be a whole remote traceback)."""
    cause = getattr(error, "cause", None)
    if isinstance(cause, BaseException):
        return f"{type(cause).__name__}: {str(cause).splitlines()[0] if str(cause) else ''}"
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"


def _cancel(ref: Any) -> None:
    import ray

    # The actor may already be gone; the caller is told about it either way.
    with contextlib.suppress(Exception):
        ray.cancel(ref)


def _as_dict(value: object, operation: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ProtocolViolation(f"{operation} returned {type(value).__name__}, expected a dict")
    return value
