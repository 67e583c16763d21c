"""Restoring N Gym instances from one snapshot: all of them, or none.

The facade's ``restored`` context runs these steps; each may refuse before
anything is sent, and a failure after the first restore call drops every
instance's restore again (retire the next attempts, resume), so the rollouts
restart from their task instead of half of them continuing::

    manifest = await check_restorable(fan_out, path)     # topology, fresh, participants
    errors = await restore_everywhere(fan_out, checkpoint_id, path, manifest, deadline_ts=d)
    await abandon_everywhere(fan_out, checkpoint_id, manifest, deadline_ts=d)   # on failure
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from envckpt import logs
from envckpt.errors import IllegalTransition, IncompatibleCheckpoint
from envckpt.facade.fan_out import FanOut
from envckpt.facade.instances import InstanceClient
from envckpt.facade.manifest import GymSnapshotManifest, read_manifest
from envckpt.machines.tables import FRESH, HOLDS_RESTORE, INSTANCE_LIFECYCLE


async def check_restorable(fan_out: FanOut, path: Path) -> GymSnapshotManifest:
    """The snapshot's manifest, once this deployment is shown able to restore it.

    The live instance set must equal the saved one, every instance must be
    fresh (nothing done yet), and every participant that saved state must be
    live. Raises ``IncompatibleCheckpoint`` or ``IllegalTransition`` otherwise,
    before any restore is sent.
    """
    manifest = await asyncio.to_thread(read_manifest, path)
    live, saved = set(fan_out.instances), set(manifest.instances)
    if live != saved:
        raise IncompatibleCheckpoint(
            f"snapshot {manifest.checkpoint_id} holds instances {sorted(saved)}, "
            f"but this run has {sorted(live)}"
        )
    states = await fan_out.require("state", lambda i: i.state())
    for iid, state in sorted(states.items()):
        if state not in FRESH:
            raise IllegalTransition(
                machine=INSTANCE_LIFECYCLE.name, instance=iid, state=state, trigger="restore"
            )
    await fan_out.require("discover", lambda i: i.discover())
    names = await fan_out.require("discover", lambda i: i.participant_names())
    for iid, record in sorted(manifest.instances.items()):
        missing = sorted(set(record.participants) - set(names[iid]))
        if missing:
            raise IncompatibleCheckpoint(
                f"{iid} lacks participants that saved state in snapshot "
                f"{manifest.checkpoint_id}: {missing}"
            )
    return manifest


async def restore_everywhere(
    fan_out: FanOut,
    checkpoint_id: str,
    path: Path,
    manifest: GymSnapshotManifest,
    *,
    deadline_ts: float,
    seconds: dict[str, float] | None = None,
) -> dict[str, BaseException]:
    """Restore every instance at once; the errors by instance (empty: all restored).

    ``seconds``, if given, receives how long each instance's restore took."""

    async def restore(instance: InstanceClient) -> None:
        record = manifest.instances[instance.instance_id]
        await instance.restore(
            checkpoint_id,
            str(path),
            record.episodes,
            participants=record.participants,
            source_checkpoint_id=manifest.checkpoint_id,
            deadline_ts=deadline_ts,
        )

    _, errors = await fan_out.collect(restore, seconds=seconds)
    return errors


async def abandon_everywhere(
    fan_out: FanOut, checkpoint_id: str, manifest: GymSnapshotManifest, *, deadline_ts: float
) -> None:
    """Drop the restore on every instance that may hold one; never raises."""

    async def abandon(instance: InstanceClient) -> None:
        if await instance.state() in HOLDS_RESTORE:
            episodes = manifest.instances[instance.instance_id].episodes
            await instance.abandon_restore(checkpoint_id, episodes, deadline_ts=deadline_ts)

    _, errors = await fan_out.collect(abandon)
    for iid, error in errors.items():
        logs.get_logger("envckpt.facade").warning(
            "dropping a restore failed; participants resume at lease expiry",
            instance_id=iid,
            checkpoint_id=checkpoint_id,
            error=str(error),
        )
