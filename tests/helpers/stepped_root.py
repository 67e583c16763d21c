"""A snapshot root with real snapshots taken at known trainer steps, rollouts in flight.

    root, ids = await stepped_root(tmp_path, steps=(10, 20, 30))
    # ids[i] is the snapshot taken at steps[i] (None: no step given); each continues rollouts

Built with the trainer rig (simulated Gym instances in this process): each
snapshot is taken while every instance holds rollouts past their first turn,
so each continues episodes and has participant records to verify.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

from helpers.snapshot_rig import Rig, mid_flight, running


async def stepped_root(
    directory: Path, *, steps: Sequence[int | None] = (10, 20, 30), policy: str = "v"
) -> tuple[Path, list[str]]:
    """The rig's snapshot root and the snapshot ids, in the order taken; nothing pruned."""
    rig = Rig(directory, tool_latency=0.03, keep_latest_k=len(steps) + 1).fresh()
    ids: list[str] = []
    try:
        tasks = rig.tasks(4 * len(steps), turns=12)
        async with running(rig.job(tasks, max_in_flight_per_instance=2)) as job:
            for step in steps:
                await mid_flight(rig)
                version = None if step is None else f"{policy}{step}"
                rig.snapshotter.set_step(step, policy_version=version)
                ids.append((await rig.snapshotter.take()).checkpoint_id)
                await asyncio.sleep(0.01)  # distinct created_at
            job.cancel()
    finally:
        await rig.crash()
        rig.snapshotter.lock.release()
    return rig.snapshot_root, ids
