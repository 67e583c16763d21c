"""A Gym instance hosted in a Ray actor, and the facade's client of it.

NeMo RL hosts one checkpoint adapter per Gym actor, inside the actor process
next to the Gym deployment it controls. ``InstanceActor`` is that host: it
holds a ``LocalInstance`` and forwards the facade's operations to it through
one generic ``call``. ``RayInstance`` is the ``InstanceClient`` the facade fans
out to, over the actor's handle::

    actor = ray.remote(MyGymActor).remote(...)     # a subclass of InstanceActor
    facade = GymEnvironmentCheckpoint([RayInstance(actor, "shard/replica-0")], inventory)
    async with facade.snapshot(path) as snap: ...  # each call bounded by its deadline

Every call through ``RayInstance`` is bounded: by the operation's absolute
``deadline_ts`` plus a slack, or by a default control timeout. What reaches
the caller is always an envckpt error or the actor's own typed error:

* the actor raised: the original exception (``RayTaskError.cause``), with its
  fields, not Ray's wrapper;
* the actor is dead or unreachable, or the reply did not come in time (the
  call is then cancelled with ``ray.cancel``): ``GymCheckpointUnavailable``
  naming the operation and the instance.

Importing this module never imports ray (an optional extra): ray is imported
where a handle is used.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, TypeVar

from envckpt.clock import Clock, SystemClock
from envckpt.errors import GymCheckpointUnavailable, ProtocolViolation
from envckpt.facade.instances import InstanceClient, LocalInstance

T = TypeVar("T")

DEFAULT_CONTROL_TIMEOUT_SECONDS = 60.0

# The ``InstanceClient`` operations an ``InstanceActor`` forwards.
INSTANCE_OPERATIONS = frozenset(
    {
        "state",
        "discover",
        "restart_only_servers",
        "participant_names",
        "prepare",
        "renew",
        "retire",
        "forget",
        "commit",
        "restore",
        "abandon_restore",
        "resume",
    }
)


class InstanceActor:
    """Hosts one ``LocalInstance`` in a (Ray actor) process and forwards calls to it.

    Subclass it to host a Gym deployment and add its own methods; build the
    Ray class with ``ray.remote(Subclass)``. Every method is ``async``, so Ray
    hosts it as an async actor: one event loop serves control calls and the
    deployment's own work alike.
    """

    def __init__(self, local: LocalInstance) -> None:
        self._local = local
        self._stall: tuple[float, str | None] | None = None
        self._cancelled_calls = 0

    async def instance_id(self) -> str:
        return self._local.instance_id

    async def call(self, operation: str, *args: Any, **kwargs: Any) -> object:
        """Run one ``InstanceClient`` operation on the hosted instance."""
        if operation not in INSTANCE_OPERATIONS:
            raise ValueError(f"{operation!r} is not an instance operation")
        await self._maybe_stall(operation)
        return await getattr(self._local, operation)(*args, **kwargs)

    # ------------------------------------------------------------ test hooks

    async def stall(self, seconds: float, operation: str | None = None) -> None:
        """Test hook: the next control call (of ``operation``, if named) first sleeps."""
        if seconds < 0:
            raise ValueError("stall seconds must be >= 0")
        self._stall = (seconds, operation)

    async def cancelled_calls(self) -> int:
        """Test hook: how many stalled control calls were cancelled (``ray.cancel``)."""
        return self._cancelled_calls

    async def _maybe_stall(self, operation: str) -> None:
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


class RayInstance(InstanceClient):
    """``InstanceClient`` over an ``InstanceActor`` handle; every call is bounded."""

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
        return f"{type(self).__name__}({self._instance_id!r})"

    # ----------------------------------------------------------- test hooks

    async def stall(self, seconds: float, operation: str | None = None) -> None:
        """Test hook: the actor's next control call (of ``operation``) first sleeps."""
        await self._operate(type(None), "stall", seconds, operation)

    async def cancelled_calls(self) -> int:
        """Test hook: how many stalled calls the actor saw cancelled."""
        return await self._operate(int, "cancelled_calls")

    # ------------------------------------------------------------- the call

    async def _operate(self, expected: type[T], operation: str, *args: Any, **kwargs: Any) -> T:
        result = await self._call(operation, *args, **kwargs)
        if not isinstance(result, expected):
            raise ProtocolViolation(
                f"{self._instance_id}: {operation} returned {type(result).__name__}, "
                f"expected {expected.__name__}"
            )
        return result

    def _unavailable(self, operation: str, reason: str) -> GymCheckpointUnavailable:
        return GymCheckpointUnavailable(
            f"{self._instance_id}: {operation} failed: {reason}",
            operation=operation,
            failures={self._instance_id: reason},
        )

    def _submit(self, operation: str, args: tuple[object, ...], kwargs: dict[str, object]) -> Any:
        # Instance operations go through the actor's one generic ``call``; any
        # other name is a method of the actor's own (a subclass's).
        if operation in INSTANCE_OPERATIONS:
            return self._handle.call.remote(operation, *args, **kwargs)
        return getattr(self._handle, operation).remote(*args, **kwargs)

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
            ref = self._submit(operation, args, kwargs)
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
