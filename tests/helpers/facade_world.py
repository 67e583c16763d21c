"""A two-instance facade world for the facade module tests (not a test module).

``FacadeWorld`` holds two in-process Gym deployments (``helpers.dict_deployment``),
their ``LocalInstance`` clients, an ``InMemoryInventory`` and the facade, all on
one fake clock; ``restarted()`` is the same deployments as fresh processes::

    world = FacadeWorld()
    await world.start(A, E1)                    # E1 parked at turn 2 on instance A
    await take_snapshot(world, path)            # a committed, checked, resumed snapshot
    after = world.restarted()                   # fresh processes, same inventory
    # or both at once: after = await restarted_after_snapshot(path, (A, E1))
    async with after.facade.restored(path) as restored: ...
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from envckpt.clock import FakeClock
from envckpt.episodes import EnvironmentEpisode
from envckpt.facade.checkpoint import GymEnvironmentCheckpoint
from envckpt.facade.fan_out import FanOut
from envckpt.facade.instances import LocalInstance
from envckpt.facade.timeouts import CheckpointTimeouts
from envckpt.gym.adapter import GymCheckpointAdapter
from envckpt.gym.instance import GymCheckpointInstance
from envckpt.inventory import InMemoryInventory

from helpers.dict_deployment import Deployment

A = GymCheckpointInstance("shard", 0)
B = GymCheckpointInstance("shard", 1)
E1 = EnvironmentEpisode("r1", 0)
E2 = EnvironmentEpisode("r2", 1)
E3 = EnvironmentEpisode("r3", 0)
TIMEOUTS = CheckpointTimeouts(prepare_seconds=10, renew_interval_seconds=1e6)


class LiveCut:
    """A data-plane cut that is live until ``close()``."""

    def __init__(self) -> None:
        self.live = True

    def close(self) -> None:
        self.live = False

    def require_live(self) -> None:
        if not self.live:
            raise RuntimeError("cut expired")


class FacadeWorld:
    """Instances A and B, their deployments, an inventory and the facade, on one fake clock."""

    def __init__(
        self,
        *,
        clock: FakeClock | None = None,
        deployments: Mapping[GymCheckpointInstance, Deployment] | None = None,
        inventory: InMemoryInventory | None = None,
        timeouts: CheckpointTimeouts = TIMEOUTS,
    ) -> None:
        self.clock = clock or FakeClock()
        self.deployments = dict(
            deployments
            if deployments is not None
            else {A: Deployment(clock=self.clock), B: Deployment(clock=self.clock)}
        )
        self.inventory = inventory if inventory is not None else InMemoryInventory()
        self.timeouts = timeouts
        self.instances = {
            i.instance_id: LocalInstance(
                GymCheckpointAdapter(instance=i, coordination=d.coordinator)
            )
            for i, d in self.deployments.items()
        }
        self.fan_out = FanOut(self.instances)
        self.facade = GymEnvironmentCheckpoint(
            list(self.instances.values()), self.inventory, clock=self.clock, timeouts=timeouts
        )

    async def start(self, instance: GymCheckpointInstance, episode: EnvironmentEpisode) -> None:
        """Run ``episode`` to turn 2 on ``instance`` and list it in the inventory."""
        await self.deployments[instance].start(episode, turn=2)
        self.inventory.add(instance.instance_id, episode)

    def restarted(self) -> FacadeWorld:
        """Fresh processes of the same deployments, with the same inventory and clock."""
        return FacadeWorld(
            clock=self.clock,
            deployments={i: d.fresh() for i, d in self.deployments.items()},
            inventory=self.inventory,
            timeouts=self.timeouts,
        )

    def requests(self) -> int:
        """Control requests sent to every deployment so far."""
        return sum(d.transport.requests for d in self.deployments.values())

    def phases(self) -> dict[str, dict[str, str]]:
        """Each instance's participant phases, by server name."""
        return {
            i.instance_id: {name: str(core.phase) for name, core in d.cores.items()}
            for i, d in self.deployments.items()
        }

    def all_idle(self) -> bool:
        return all(
            phase == "idle" for phases in self.phases().values() for phase in phases.values()
        )


async def take_snapshot(world: FacadeWorld, path: Path) -> None:
    """One clean snapshot: committed, checked against a live cut, resumed."""
    async with world.facade.snapshot(path) as snap:
        assert snap is not None
        await snap.check_against_cut(LiveCut())


async def restarted_after_snapshot(
    path: Path, *started: tuple[GymCheckpointInstance, EnvironmentEpisode]
) -> FacadeWorld:
    """A snapshot in ``path`` of each (instance, episode) started (r1 on A and r2 on B when
    none is named); returns fresh processes of that world."""
    world = FacadeWorld()
    for instance, episode in started or ((A, E1), (B, E2)):
        await world.start(instance, episode)
    await take_snapshot(world, path)
    return world.restarted()
