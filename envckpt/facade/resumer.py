"""Resuming Gym instances after a checkpoint, retried, with memory of what failed.

Resume also aborts, so it must reach every instance that may hold an open
checkpoint. An instance whose resume failed every retry is remembered with
the checkpoint id it holds (its participants resume themselves when their
lease expires), and is resumed first by the next snapshot or restore.

    resumer = Resumer(fan_out, clock=clock, timeouts=timeouts)
    await resumer.resume(checkpoint_id)     # every instance whose state allows resume
    await resumer.resume_leftovers()        # only those an earlier resume missed
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

from envckpt.clock import Clock
from envckpt.facade.fan_out import FanOut, aggregate
from envckpt.facade.instances import InstanceClient
from envckpt.facade.timeouts import CheckpointTimeouts
from envckpt.machines.tables import INSTANCE_LIFECYCLE


class Resumer:
    """Resumes instances with retries; remembers the ones it could not reach."""

    def __init__(self, fan_out: FanOut, *, clock: Clock, timeouts: CheckpointTimeouts) -> None:
        self._fan_out = fan_out
        self._clock = clock
        self._timeouts = timeouts
        # Instances whose resume failed every retry: instance id -> checkpoint id.
        self._unresumed: dict[str, str] = {}

    @property
    def unresumed(self) -> Mapping[str, str]:
        return dict(self._unresumed)

    async def resume(self, checkpoint_id: str | None) -> None:
        """Resume every instance whose state allows it (``None``: only the leftovers)."""
        errors: dict[str, BaseException] = {}
        for _ in range(max(1, self._timeouts.resume_attempts)):
            states, _ = await self._fan_out.collect(lambda i: i.state())
            self._forget_closed(states)
            pending = [
                self._fan_out.instances[iid]
                for iid, state in states.items()
                if INSTANCE_LIFECYCLE.destination(state, "resume") is not None
                and (checkpoint_id is not None or iid in self._unresumed)
            ]
            if not pending:
                break
            ids = {
                i.instance_id: self._unresumed.get(i.instance_id, checkpoint_id or "")
                for i in pending
            }
            deadline = self._clock.now() + self._timeouts.control_seconds
            _, errors = await self._fan_out.collect(
                functools.partial(_resume_with, ids=ids, deadline_ts=deadline), pending
            )
            for instance in pending:
                if instance.instance_id not in errors:
                    self._unresumed.pop(instance.instance_id, None)
            if not errors:
                break
        for iid in errors:
            self._unresumed.setdefault(iid, checkpoint_id or "")
        if errors:
            raise aggregate("resume", errors)

    def _forget_closed(self, states: Mapping[str, str]) -> None:
        """Forget leftovers whose instance holds nothing open any more.

        The instance's adapter was resumed (or moved on) by some other call
        since; resuming it later under the remembered id would close nothing,
        and would send a stale id in place of the checkpoint being aborted.
        """
        for iid in list(self._unresumed):
            state = states.get(iid)
            if state is not None and INSTANCE_LIFECYCLE.destination(state, "resume") is None:
                del self._unresumed[iid]

    async def resume_leftovers(self) -> None:
        """Before a new checkpoint: resume what an earlier one could not."""
        if self._unresumed:
            await self.resume(None)


async def _resume_with(
    instance: InstanceClient, *, ids: Mapping[str, str], deadline_ts: float
) -> None:
    await instance.resume(ids[instance.instance_id], deadline_ts=deadline_ts)
