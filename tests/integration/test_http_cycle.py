"""The full snapshot/restore cycle over real HTTP: two Gym deployments, the trainer's facade.

Each deployment is a ``GymServers`` (uvicorn on 127.0.0.1, ephemeral ports);
the trainer drives it through ``HttpGym`` and ``GymEnvironmentCheckpoint``
with an ``InMemoryInventory`` fed by a staging sink. Rollouts are snapshotted
mid-flight twice, the deployments are killed, fresh ones restore the first
snapshot and the restored rollouts continue at their saved turn as attempt 1.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from envckpt.coordination.transport import TransportFailure
from envckpt.episodes import EnvironmentEpisode
from envckpt.errors import IncompatibleCheckpoint, ParticipantError
from envckpt.facade.checkpoint import CheckpointTimeouts, GymEnvironmentCheckpoint
from envckpt.facade.instances import LocalInstance
from envckpt.gym.adapter import GymCheckpointAdapter
from envckpt.gym.instance import GymCheckpointInstance
from envckpt.inventory import InMemoryInventory
from envckpt.sim.data_clients import CallbackStagingSink, DataPlaneUnavailable, HttpModelClient
from envckpt.sim.gym import AGENT_SERVER, MODEL_SERVER, RESOURCES_SERVER
from envckpt.sim.http_gym import HttpGym
from envckpt.sim.server import GymServers

Ep = EnvironmentEpisode
# Checkpoints go under pytest's temporary directories.
ROOT = tempfile.gettempdir()
TOKEN = "cycle-token-6f02a9"
SEED = 21
TURNS = 24
TASK: dict[str, Any] = {"prompt": "sort the warehouse", "turns": TURNS}
PARTICIPANTS = (MODEL_SERVER, AGENT_SERVER, RESOURCES_SERVER)


class LiveCut:
    """The trainer's data-plane cut, always live here (one task mutates the inventory)."""

    def require_live(self) -> None:
        return None


@dataclass
class Deployment:
    """One Gym instance: its servers (this process) and the trainer's handle on them."""

    instance: GymCheckpointInstance
    servers: GymServers
    gym: HttpGym

    @property
    def iid(self) -> str:
        return self.instance.instance_id

    def turns(self) -> dict[str, int]:
        """Rollout id -> turns its agent session holds now."""
        sessions = self.servers.agent.sessions()
        return {Ep.from_capture_key(key).rollout_id: len(s["turns"]) for key, s in sessions.items()}

    async def status(self, server: str) -> dict[str, Any]:
        reply = await self.gym.transport.request(server, "GET", "status", None, timeout=10)
        assert reply.status == 200 and isinstance(reply.body, dict), reply.describe()
        return reply.body


class World:
    """The trainer side (inventory, data plane, facade) over N served deployments."""

    def __init__(self, root: Path, instances: tuple[GymCheckpointInstance, ...]) -> None:
        self.root = root
        self.instances = instances
        self.inventory = InMemoryInventory(staging_rows=set())
        self.sink = CallbackStagingSink(self._stage)
        self.deployments: dict[str, Deployment] = {}
        self.facade: GymEnvironmentCheckpoint | None = None

    def _stage(self, capture_key: str, staging_key: str, payload: str) -> None:
        assert self.inventory.staging_rows is not None
        self.inventory.staging_rows.add(staging_key)

    @contextlib.asynccontextmanager
    async def serving(
        self, prototypes: dict[str, GymServers] | None = None, *, drop: tuple[str, ...] = ()
    ) -> AsyncIterator[GymEnvironmentCheckpoint]:
        """Start one deployment per instance (fresh processes of ``prototypes`` if given);
        ``drop`` hides those servers from the trainer's handle."""
        async with contextlib.AsyncExitStack() as stack:
            for instance in self.instances:
                iid = instance.instance_id
                servers = (
                    prototypes[iid].fresh()
                    if prototypes is not None
                    else GymServers(
                        seed=SEED,
                        token=TOKEN,
                        checkpoint_root=ROOT,
                        tool_latency=0.01,
                        park_poll_seconds=0.002,
                        staging_sink=self.sink,
                    )
                )
                await stack.enter_async_context(servers)
                urls = {name: url for name, url in servers.urls.items() if name not in drop}
                gym = await stack.enter_async_context(HttpGym(urls, token=TOKEN))
                self.deployments[iid] = Deployment(instance, servers, gym)
            self.facade = GymEnvironmentCheckpoint(
                [
                    LocalInstance(
                        GymCheckpointAdapter(instance=d.instance, coordination=d.gym.coordinator)
                    )
                    for d in self.deployments.values()
                ],
                self.inventory,
                timeouts=CheckpointTimeouts(prepare_seconds=20, control_seconds=20),
            )
            yield self.facade

    def prototypes(self) -> dict[str, GymServers]:
        return {iid: d.servers for iid, d in self.deployments.items()}

    async def start(self, rollouts_per_instance: int) -> dict[tuple[str, Ep], asyncio.Task[Any]]:
        runs = {}
        for iid, deployment in self.deployments.items():
            for index in range(rollouts_per_instance):
                episode = Ep(f"{deployment.instance.replica_index}-r{index}", 0)
                self.inventory.add(iid, episode)
                runs[(iid, episode)] = deployment.gym.start(episode, TASK)
        return runs

    async def wait_for_turns(self, at_least: Callable[[str, str], int]) -> None:
        """Until every session on every instance holds ``at_least(iid, rollout)`` turns."""
        end = time.monotonic() + 20
        while True:
            if all(
                d.turns() and all(n >= at_least(iid, r) for r, n in d.turns().items())
                for iid, d in self.deployments.items()
            ):
                return
            assert time.monotonic() < end, "rollouts did not progress"
            await asyncio.sleep(0.005)

    async def snapshot(self, path: Path) -> dict[str, dict[str, int]]:
        """One rollout snapshot; the turns every session held while parked."""
        assert self.facade is not None
        async with self.facade.snapshot(path) as snap:
            assert snap is not None
            for deployment in self.deployments.values():
                assert {c.phase for c in deployment.servers.cores.values()} == {"committed"}
            saved = {iid: d.turns() for iid, d in self.deployments.items()}
            await snap.check_against_cut(LiveCut())
            assert snap.metrics(0.0)["env_exported_episodes"] == sum(map(len, saved.values()))
        return saved

    async def kill(self, runs: dict[tuple[str, Ep], asyncio.Task[Any]]) -> None:
        """Every deployment's process dies; the trainer's runs fail without finishing."""
        await asyncio.gather(*(d.servers.stop() for d in self.deployments.values()))
        outcomes = await asyncio.gather(*runs.values(), return_exceptions=True)
        for outcome in outcomes:
            assert isinstance(
                outcome, ParticipantError | DataPlaneUnavailable | TransportFailure
            ), outcome


async def test_snapshot_kill_restore_continue_and_forget_over_http(tmp_path: Path) -> None:
    """Two HTTP deployments: two mid-flight snapshots, a crash, a restore of the first one on
    fresh servers, continuation at the saved turns, stale attempts refused, marks forgotten."""
    instances = (GymCheckpointInstance("gym", 0), GymCheckpointInstance("gym", 1))
    world = World(tmp_path, instances)
    first, second = tmp_path / "snap-1", tmp_path / "snap-2"

    async with world.serving() as facade:
        await facade.check_startup()
        runs = await world.start(rollouts_per_instance=3)
        await world.wait_for_turns(lambda iid, rollout: 2)
        saved = await world.snapshot(first)
        await world.wait_for_turns(lambda iid, rollout: saved[iid][rollout] + 2)
        later = await world.snapshot(second)
        assert all(later[i][r] > saved[i][r] for i in saved for r in saved[i])
        await world.kill(runs)
        prototypes = world.prototypes()

    async with world.serving(prototypes) as facade:
        await facade.check_startup()
        async with facade.restored(first) as restored:
            assert restored.continued_attempts == {
                (iid, rollout, 0) for iid in saved for rollout in saved[iid]
            }
            assert restored.staging_keys <= (world.inventory.staging_rows or set())
            for iid, rollouts in saved.items():
                for rollout in rollouts:
                    # The ledger continues the restored attempt; attempt 0 must be retired.
                    world.inventory.drop(iid, Ep(rollout, 0))
                    world.inventory.add(iid, Ep(rollout, 1))
        # Restored, not yet re-sent: the next snapshot retires attempt 0 and exports attempt 1.
        assert await world.snapshot(tmp_path / "snap-3") == saved
        for deployment in world.deployments.values():
            for server in PARTICIPANTS:
                assert (await deployment.status(server))["retired_rollouts"] == 3

        results = {
            (iid, rollout): world.deployments[iid].gym.run(Ep(rollout, 1), TASK)
            for iid in saved
            for rollout in saved[iid]
        }
        for (iid, rollout), result in zip(
            results, await asyncio.gather(*results.values()), strict=True
        ):
            deployment = world.deployments[iid]
            assert result["resumed_from_turn"] == saved[iid][rollout] > 0
            assert result["transcript"] == deployment.servers.expected_transcript(rollout, TASK)
            assert set(result["staging_keys"]) <= (world.inventory.staging_rows or set())
            applied = [
                e["turn"] for e in deployment.servers.tool.audit if e["rollout_id"] == rollout
            ]
            assert applied == list(range(saved[iid][rollout], TURNS))  # each turn once, none twice
            world.inventory.finish(iid, Ep(rollout, 1))

        deployment = world.deployments["gym/replica-0"]
        with pytest.raises(ParticipantError) as stale_run:
            await deployment.gym.run(Ep("0-r0", 0), TASK)
        assert stale_run.value.code == "stale_attempt"
        async with HttpModelClient(deployment.gym.urls[MODEL_SERVER]) as model:
            with pytest.raises(ParticipantError) as stale_generate:
                await model.generate(
                    {"episode": Ep("0-r1", 0).to_wire(), "turn": 0, "observation": "x"}
                )
        assert stale_generate.value.code == "stale_attempt"

        await facade.forget({iid: tuple(rollouts) for iid, rollouts in saved.items()})
        for deployment in world.deployments.values():
            for server in PARTICIPANTS:
                assert (await deployment.status(server))["retired_rollouts"] == 0


async def test_restore_is_refused_when_a_participant_that_saved_state_is_missing(
    tmp_path: Path,
) -> None:
    """A fresh deployment without the tool participant cannot take the snapshot; none restored."""
    world = World(tmp_path, (GymCheckpointInstance("gym", 0),))
    snapshot = tmp_path / "snap-1"
    async with world.serving() as facade:
        await facade.check_startup()
        runs = await world.start(rollouts_per_instance=2)
        await world.wait_for_turns(lambda iid, rollout: 1)
        await world.snapshot(snapshot)
        await world.kill(runs)
        prototypes = world.prototypes()

    async with world.serving(prototypes, drop=(RESOURCES_SERVER,)) as facade:
        with pytest.raises(IncompatibleCheckpoint, match=RESOURCES_SERVER):
            async with facade.restored(snapshot):
                raise AssertionError("the restore must not be entered")
        servers = world.deployments["gym/replica-0"].servers
        for core in servers.cores.values():
            assert (core.phase, core.served_traffic) == ("idle", False)
        assert servers.agent.sessions() == {} and servers.model.staging_ledger() == {}
