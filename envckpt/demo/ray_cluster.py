"""``envckpt demo --ray --nodes N``: the job on a local multi-node Ray cluster that loses a node.

The demo starts the cluster itself (``ray.cluster_utils.Cluster``: a head
node and N-1 worker nodes, each its own raylet on this machine, one logical
CPU and a 78 MiB object store each, every file under a private
``RAY_TMPDIR``), then the trainer process, which joins it by address
(``node_loss``). When the trainer announces its planned kill (``node_kill``:
after a published snapshot held rollouts, during a rollout), the demo kills
that node's raylet and everything on it (``remove_node(...,
allow_graceful=False)``) and logs ``node_killed``. The trainer then restores
into replacement actors on the remaining nodes and finishes; the verdict
(``nodes_verdict``) is computed from the files the run left::

    verdict, text = run_ray_nodes(settings, nodes=3, kills=1)
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from typing import Any

from envckpt.demo.events import EVENTS_NAME, EventLog, read_events, record_exit
from envckpt.demo.gym_hosting import JobTokens
from envckpt.demo.nodes_verdict import judge_nodes_directory, render_nodes
from envckpt.demo.plan import PLAN_NAME, save_plan
from envckpt.demo.processes import follow, launch_run
from envckpt.demo.report import Verdict
from envckpt.demo.scenario import SETTINGS_NAME, DemoSettings, save_settings
from envckpt.demo.summary import render_summary
from envckpt.progress import ProgressBar

NODE_CPUS = 1
OBJECT_STORE_BYTES = 78 * 1024 * 1024
# A killed node is declared dead within about 1.5 s instead of Ray's default 15 s.
HEALTH_CHECKS = {
    "health_check_initial_delay_ms": 0,
    "health_check_period_ms": 500,
    "health_check_timeout_ms": 1000,
    "health_check_failure_threshold": 3,
}
RUN_SECONDS = 900.0


class LocalCluster:
    """A head node and ``nodes - 1`` worker nodes on this machine; kill any but the head."""

    def __init__(self, nodes: int) -> None:
        if nodes < 2:
            raise ValueError("a multi-node cluster has at least 2 nodes")
        self.nodes = nodes
        self._cluster: Any = None
        self._temp = tempfile.mkdtemp(prefix="envckpt-raynodes-", dir="/tmp")
        self.killed: list[str] = []
        self._saved_env: dict[str, str | None] = {}

    @property
    def address(self) -> str:
        return str(self._cluster.address)

    def environment(self) -> dict[str, str]:
        """What a process joining this cluster needs (its files stay in the private dir)."""
        return {"RAY_TMPDIR": self._temp, "RAY_USAGE_STATS_ENABLED": "0"}

    def __enter__(self) -> LocalCluster:
        from ray.cluster_utils import Cluster

        # Every session file, socket and address file of this cluster goes here,
        # not in the /tmp/ray other users' clusters share (put back on exit).
        for name, value in self.environment().items():
            self._saved_env[name] = os.environ.get(name)
            os.environ[name] = value
        node = {
            "num_cpus": NODE_CPUS,
            "object_store_memory": OBJECT_STORE_BYTES,
            "log_to_stderr": False,
        }
        try:
            self._cluster = Cluster(
                initialize_head=True,
                head_node_args={
                    **node,
                    "include_dashboard": False,
                    "_system_config": HEALTH_CHECKS,
                },
            )
            for _ in range(self.nodes - 1):
                self._cluster.add_node(**node)
            self._cluster.wait_for_nodes()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        if self._cluster is not None:
            with contextlib.suppress(Exception):
                self._cluster.shutdown()
            self._cluster = None
        shutil.rmtree(self._temp, ignore_errors=True)
        for name, value in self._saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        self._saved_env.clear()

    def kill(self, node_id: str) -> bool:
        """Kill the worker node ``node_id``'s raylet and processes at once; False if unknown."""
        for node in list(self._cluster.worker_nodes):
            if node.node_id == node_id:
                self._cluster.remove_node(node, allow_graceful=False)
                self.killed.append(node_id)
                return True
        return False


def start_trainer(
    settings: DemoSettings, cluster: LocalCluster, *, kills: int, tokens: JobTokens
) -> subprocess.Popen[bytes]:
    """The trainer (run 1 of the job) joining ``cluster``, its node kills planned."""
    flags = ["--config", str(settings.directory / SETTINGS_NAME), "--ray"]
    flags += ["--ray-address", cluster.address, "--node-kills", str(kills)]
    env = {**os.environ, **cluster.environment(), **tokens.trainer_env()}
    return launch_run("envckpt.demo.trainer_process", settings.directory, 1, *flags, env=env)


def watch_and_kill(
    settings: DemoSettings, process: subprocess.Popen[bytes], cluster: LocalCluster
) -> int | None:
    """Follow the job with a progress bar, killing each node it asks for; its exit code."""
    bar = ProgressBar("job", settings.rollouts)
    path = settings.directory / EVENTS_NAME
    served = 0

    def serve_kills() -> None:
        nonlocal served
        events = read_events(path)
        for request in [e for e in events if e["event"] == "node_kill"][served:]:
            served += 1
            node = str(request.get("node"))
            killed = cluster.kill(node)
            log = EventLog(path, incarnation=int(request.get("incarnation", 0)))
            log.emit("node_killed" if killed else "node_kill_refused", node=node)
            log.close()
        bar.update(_done(events), f"{sum(e['event'] == 'snapshot' for e in events)} snapshots")

    try:
        return follow(process, RUN_SECONDS, serve_kills)
    finally:
        bar.close()


def _done(events: list[dict[str, Any]]) -> int:
    """Rollouts finished: those the last restore found, plus those sealed since."""
    done = 0
    for event in events:
        if event["event"] == "restored":
            done = int(event.get("finished_before", 0))
        elif event["event"] == "sealed":
            done += 1
    return done


def run_ray_nodes(settings: DemoSettings, *, nodes: int, kills: int) -> tuple[Verdict, str]:
    """Run the job on a cluster of ``nodes`` nodes, ``kills`` of them killed; the verdict."""
    save_settings(settings, settings.directory / SETTINGS_NAME)
    save_plan([], settings.directory / PLAN_NAME)  # no whole-job interruption
    with LocalCluster(nodes) as cluster:
        process = start_trainer(settings, cluster, kills=kills, tokens=JobTokens.fresh())
        code = watch_and_kill(settings, process, cluster)
    record_exit(settings.directory, 1, code)
    record, verdict = judge_nodes_directory(settings, nodes=nodes)
    text = render_summary(settings, record, verdict) + "\n\n" + render_nodes(settings.directory)
    if code not in (0, None):
        said = (settings.directory / "trainer-1.out").read_text(errors="replace").splitlines()
        text += "\n\n" + "\n".join(said[-10:])
    return verdict, text
