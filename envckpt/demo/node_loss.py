"""The demo's Gym instances on a multi-node Ray cluster, and what the job does when a node dies.

The trainer connects to a running cluster (``ray.init(address=...)``, as on
a real one), places one bundle per live node in a ``STRICT_SPREAD``
placement group and puts instance *i* in bundle *i mod nodes*, so the
instances spread over every node; it logs where each one landed
(``placed``)::

    async with cluster_instances(settings, tokens=t, rows_url=u, address=a, events=e) as hosted:
        ...   # hosted.backend raises InstancesLost once an actor's node is gone

A planned kill (``hosted.strike``) does not kill the job: it asks for the
node hosting the most instances (never the head, where the trainer's driver
runs) to be killed (``node_kill``; the demo, which owns the cluster, kills
its raylet). The rollouts on that node's actors then fail; the backend finds
which actors died (``InstancesLost``), the trainer stops every instance and
starts replacement actors on the remaining nodes, which restore the newest
snapshot (``trainer_process``). The snapshot root must be reachable from
every node: on one machine it is; on a real cluster it is a shared file
system (docs/integration.md, "A multi-node Ray cluster").
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from envckpt.demo.events import EventLog
from envckpt.demo.gym_hosting import Hosted, JobTokens
from envckpt.demo.plan import KILL, Interruption
from envckpt.demo.scenario import DemoSettings
from envckpt.episodes import EnvironmentEpisode
from envckpt.errors import GymCheckpointUnavailable
from envckpt.sim.gym import GymConfig
from envckpt.sim.ray_actors import SimRayInstance, spawn_instances

# Logical CPU per actor and the bundles' size: a node (num_cpus=1) hosts many.
ACTOR_CPUS = 0.01
# How long a lost actor's node may take to be marked dead by the cluster.
NODE_DEATH_SECONDS = 30.0
PING_SECONDS = 10.0
PLACEMENT_SECONDS = 120.0
NAMESPACE = "envckpt-demo-nodes"


class InstancesLost(RuntimeError):
    """Actors of these instances died with their node(s); the job restores elsewhere."""

    def __init__(self, instances: Sequence[str], nodes: Sequence[str]) -> None:
        super().__init__(f"instances {list(instances)} lost with nodes {list(nodes)}")
        self.instances = tuple(instances)
        self.nodes = tuple(nodes)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.instances, self.nodes))


def node_kill_plan(*, seed: int, kills: int) -> list[Interruption]:
    """One planned node kill per run of the job: after its first published snapshot that
    holds rollouts, then a seeded number of finished rollouts (``plan.Interrupter``)."""
    rng = random.Random(seed + 7)
    return [Interruption(KILL, 1, seed=rng.randrange(1 << 30)) for _ in range(kills)]


def victim_node(placement: Mapping[str, str], head: str) -> str | None:
    """The non-head node hosting the most instances (ties: the smallest id)."""
    counts: dict[str, int] = {}
    for node in placement.values():
        if node != head:
            counts[node] = counts.get(node, 0) + 1
    if not counts:
        return None
    return min(counts, key=lambda node: (-counts[node], node))


class NodeLossBackend:
    """``RolloutBackend`` over actors on a cluster: a rollout whose actor died with its
    node raises ``InstancesLost`` naming every instance lost so far."""

    def __init__(self, clients: Mapping[str, SimRayInstance], placement: Mapping[str, str]):
        self.clients = dict(clients)
        self.placement = dict(placement)

    async def run(
        self, instance_id: str, episode: EnvironmentEpisode, task: Mapping[str, Any]
    ) -> dict[str, Any]:
        try:
            return await self.clients[instance_id].run_rollout(episode, task)
        except GymCheckpointUnavailable as error:
            lost = await self.lost()
            if not lost:
                raise
            raise InstancesLost(
                lost, await dead_nodes({self.placement[i] for i in lost})
            ) from error

    async def lost(self) -> list[str]:
        """The instances whose actor no longer answers (sorted)."""
        import ray

        async def gone(instance_id: str) -> bool:
            try:
                ref = self.clients[instance_id].handle.instance_id.remote()
                await asyncio.wait_for(ref, PING_SECONDS)
            except (ray.exceptions.RayActorError, TimeoutError):
                return True
            return False

        answers = await asyncio.gather(*(gone(i) for i in sorted(self.clients)))
        return [i for i, dead in zip(sorted(self.clients), answers, strict=True) if dead]


async def dead_nodes(suspects: set[str]) -> list[str]:
    """The ``suspects`` the cluster marks dead, waiting up to ``NODE_DEATH_SECONDS``."""
    import ray

    give_up = time.monotonic() + NODE_DEATH_SECONDS
    while True:
        dead = sorted(suspects & nodes_by_liveness(ray)[False])
        if dead or time.monotonic() > give_up:
            return dead
        await asyncio.sleep(0.25)


def wait_until_dead(ray: Any, node: str, seconds: float = NODE_DEATH_SECONDS) -> bool:
    """Block until the cluster marks ``node`` dead (True) or ``seconds`` pass (False)."""
    give_up = time.monotonic() + seconds
    while node not in nodes_by_liveness(ray)[False]:
        if time.monotonic() > give_up:
            return False
        time.sleep(0.25)
    return True


def nodes_by_liveness(ray: Any) -> dict[bool, set[str]]:
    """The ids of the cluster's nodes, alive (True) and marked dead (False): ``ray.nodes()``."""
    found: dict[bool, set[str]] = {True: set(), False: set()}
    for node in ray.nodes():
        found[bool(node["Alive"])].add(str(node["NodeID"]))
    return found


@contextlib.asynccontextmanager
async def cluster_instances(
    settings: DemoSettings,
    *,
    tokens: JobTokens,
    rows_url: str,
    address: str,
    events: EventLog,
) -> AsyncIterator[Hosted]:
    """One actor per instance, spread over the cluster's live nodes by a placement group."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    ray.init(
        address=address,
        namespace=NAMESPACE,
        log_to_driver=False,
        configure_logging=False,
    )
    group = None
    clients: dict[str, SimRayInstance] = {}
    try:
        head = ray.get_runtime_context().get_node_id()
        nodes = sorted(nodes_by_liveness(ray)[True])
        instances = settings.instance_list()
        per_bundle = ACTOR_CPUS * -(-len(instances) // len(nodes))
        group = placement_group([{"CPU": per_bundle}] * len(nodes), strategy="STRICT_SPREAD")
        await asyncio.wait_for(group.ready(), PLACEMENT_SECONDS)
        config = GymConfig(
            seed=settings.gym_seed(),
            tool_latency=settings.tool_latency,
            audit_path=str(settings.directory / "audit.jsonl"),
        )
        for index, instance in enumerate(instances):
            strategy = PlacementGroupSchedulingStrategy(
                group, placement_group_bundle_index=index % len(nodes)
            )
            options = {"scheduling_strategy": strategy, "num_cpus": ACTOR_CPUS}
            (client,) = spawn_instances(
                [instance], config, actor_options=options, rows_url=rows_url,
                rows_token=tokens.rows,
            )  # fmt: skip
            clients[instance.instance_id] = client
        placement = {iid: await client.node_id() for iid, client in clients.items()}
        events.emit("placed", nodes=nodes, head=head, placement=placement)
        backend = NodeLossBackend(clients, placement)

        def strike(info: Mapping[str, Any]) -> None:
            # The demo owns the cluster and kills the node's raylet on this event.
            node = victim_node(placement, head)
            hosted_there = sorted(i for i, n in placement.items() if n == node)
            events.emit("node_kill", node=node, instances=hosted_there, **info)
            if node is not None:
                # Hold the trainer (no rollout starts or is collected) until the
                # node is down, as if it died at this moment: the demo process
                # kills it a little later, and a short job could otherwise
                # finish its last rollouts first and lose nothing.
                wait_until_dead(ray, node)

        async def stop() -> None:
            for client in clients.values():
                with contextlib.suppress(Exception):
                    ray.kill(client.handle)

        yield Hosted(list(clients.values()), backend, stop, strike=strike)
    finally:
        for client in clients.values():
            with contextlib.suppress(Exception):
                ray.kill(client.handle)
        if group is not None:
            with contextlib.suppress(Exception):
                remove_placement_group(group)
        ray.shutdown()
