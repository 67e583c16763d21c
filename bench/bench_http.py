"""Benchmark of the control protocol over HTTP: the pause of one snapshot cycle.

Run ``python bench/bench_http.py [--quick] [--instances 1,8,32] [--dir PATH]``.
It prints figures and never asserts.

Each Gym instance is three participant servers (policy model, agent,
resources), each its own FastAPI app on its own uvicorn server and port; all
servers of all instances run in one background thread of this process, and
the coordinators (one ``Coordinator`` + ``HttpTransport`` per instance) run
concurrently on the main loop. Every participant holds ``--episodes`` parked
episodes of about 1 KB of JSON state each.

* pause: prepare -> commit -> resume of every instance at once, from the first
  prepare sent to the last resume answered (what the trainer waits for); the
  median over ``--repeats`` cycles, and the mean per-instance pause.
* floor: what the same cycle cannot go below on this machine. The protocol
  needs 3 sequential stage round trips for prepare, 1 for commit and 3 for
  resume; the floor replays that shape with trivial ``GET status`` calls at the
  same concurrency, then adds the measured cost of the commit's durable
  writes (for each participant at once: records file + fsync + directory
  fsync + manifest + fsync + directory fsync, the same bytes, in threads).
* pause/floor: the protocol's own overhead; pause(N)/pause(1): how the pause
  grows with the number of instances driven at once. All servers share one
  Python process (one GIL), so part of that growth is CPU contention that
  separate server processes would not have.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import structlog
from fastapi import FastAPI

from envckpt.coordination.coordinator import Coordinator
from envckpt.coordination.types import STAGES, Participants
from envckpt.episodes import EnvironmentEpisode
from envckpt.http.client import HttpTransport
from envckpt.http.routes import mount_participant
from envckpt.http.serve import serve_many_in_thread
from envckpt.participant.core import ParticipantCore

TOKEN = "bench-token"
KINDS = (("policy", "model"), ("agent", "agent"), ("resources", "resources"))
DEADLINE_SECONDS = 120.0


class BenchState:
    """Participant hooks holding one JSON object per parked episode."""

    def __init__(self, episodes: Iterable[EnvironmentEpisode]) -> None:
        self.states = {
            episode: {
                "turn": 3,
                "messages": [{"role": "user", "content": "lorem ipsum " * 40}] * 2,
            }
            for episode in episodes
        }

    def live_episodes(self) -> frozenset[EnvironmentEpisode]:
        return frozenset(self.states)

    async def close_admission(self) -> None:
        return None

    async def open_admission(self) -> None:
        return None

    def export(
        self, scope: frozenset[EnvironmentEpisode]
    ) -> Iterator[tuple[EnvironmentEpisode, dict[str, Any]]]:
        for episode in sorted(scope):
            if episode in self.states:
                yield episode, self.states[episode]

    def commit_extras(self, exported: tuple[EnvironmentEpisode, ...]) -> dict[str, Any]:
        return {}

    def validate(self, episode: EnvironmentEpisode, state: Mapping[str, Any]) -> object:
        return dict(state)

    def install(self, restored: Sequence[tuple[EnvironmentEpisode, object]]) -> None:
        return None

    async def retire(self, episodes: tuple[EnvironmentEpisode, ...]) -> None:
        return None

    def forget(self, rollout_ids: Iterable[str]) -> None:
        return None

    def release_exported(self) -> None:
        return None


def _episodes(count: int) -> tuple[EnvironmentEpisode, ...]:
    return tuple(EnvironmentEpisode(f"task-{index}", 0) for index in range(count))


def _apps(instances: int, episodes: Sequence[EnvironmentEpisode]) -> list[list[FastAPI]]:
    fleet = []
    for index in range(instances):
        apps = []
        for name, kind in KINDS:
            core = ParticipantCore(
                server_name=name,
                kind=kind,
                hooks=BenchState(episodes),
                instance=f"{name}-{index}",
            )
            app = FastAPI()
            mount_participant(app, core, token=TOKEN, lease_check_seconds=None)
            apps.append(app)
        fleet.append(apps)
    return fleet


async def _cycle(
    coordinator: Coordinator,
    participants: Participants,
    checkpoint_dir: Path,
    episodes: Sequence[EnvironmentEpisode],
    cycle: int,
) -> float:
    cid = f"bench-{cycle}-{os.urandom(4).hex()}"
    deadline = time.time() + DEADLINE_SECONDS
    start = time.perf_counter()
    result = await coordinator.prepare(participants, cid, deadline_ts=deadline)
    if not result.prepared:
        raise RuntimeError(f"prepare not ready: {result.blockers()}")
    await coordinator.commit(
        participants, cid, str(checkpoint_dir / cid), episodes, deadline_ts=deadline
    )
    await coordinator.resume(participants, cid, deadline_ts=deadline)
    return time.perf_counter() - start


async def _status_shape(transport: HttpTransport) -> float:
    """7 stage round trips shaped like prepare (3) + commit (1, fanned out) + resume (3)."""
    names = [name for name, _ in KINDS]

    async def status(name: str) -> None:
        reply = await transport.request(name, "GET", "status", None, timeout=30.0)
        if reply.status != 200:
            raise RuntimeError(reply.describe())

    start = time.perf_counter()
    for name in names:
        await status(name)
    await asyncio.gather(*(status(name) for name in names))
    for name in reversed(names):
        await status(name)
    return time.perf_counter() - start


def _durable_write(directory: Path, records: bytes, manifest: bytes) -> None:
    directory.mkdir(parents=True)
    for name, data in (("records.jsonl", records), ("manifest.json", manifest)):
        with open(directory / name, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


async def _fsync_floor(root: Path, writers: int, records: bytes, manifest: bytes) -> float:
    tag = os.urandom(4).hex()
    start = time.perf_counter()
    await asyncio.gather(
        *(
            asyncio.to_thread(_durable_write, root / f"fsync-{tag}-{i}", records, manifest)
            for i in range(writers)
        )
    )
    return time.perf_counter() - start


def _sample_bytes(episodes: Sequence[EnvironmentEpisode]) -> tuple[bytes, bytes]:
    state = BenchState(episodes)
    lines = [
        json.dumps({"capture_key": e.capture_key, "state": s}, separators=(",", ":"))
        for e, s in state.export(frozenset(episodes))
    ]
    records = ("\n".join(lines) + "\n").encode()
    manifest = json.dumps({"episode_ids": [e.capture_key for e in episodes], "x": "y" * 200})
    return records, manifest.encode()


async def _measure(
    instances: int, urls: list[list[str]], episodes: Sequence[EnvironmentEpisode], args: Any
) -> dict[str, float]:
    root = Path(tempfile.mkdtemp(prefix=f"bench-http-{instances}-", dir=args.dir))
    transports = [
        HttpTransport(
            {name: url for (name, _), url in zip(KINDS, instance_urls, strict=True)}, token=TOKEN
        )
        for instance_urls in urls
    ]
    try:
        coordinators = [Coordinator(transport) for transport in transports]
        members = await asyncio.gather(*(c.discover() for c in coordinators))
        assert all(len(m.members) == len(KINDS) for m in members)
        assert [m.kind for m in members[0].members] == [k for k in STAGES if k != "environment"]
        # One unmeasured cycle warms connections, imports and the thread pool.
        await asyncio.gather(
            *(
                _cycle(c, m, root / f"i{i}", episodes, -1)
                for i, (c, m) in enumerate(zip(coordinators, members, strict=True))
            )
        )
        records, manifest = _sample_bytes(episodes)
        fleet_pauses, mean_pauses, shapes, fsyncs = [], [], [], []
        for cycle in range(args.repeats):
            start = time.perf_counter()
            pauses = await asyncio.gather(
                *(
                    _cycle(c, m, root / f"i{i}", episodes, cycle)
                    for i, (c, m) in enumerate(zip(coordinators, members, strict=True))
                )
            )
            fleet_pauses.append(time.perf_counter() - start)
            mean_pauses.append(statistics.fmean(pauses))
            start = time.perf_counter()
            await asyncio.gather(*(_status_shape(t) for t in transports))
            shapes.append(time.perf_counter() - start)
            fsyncs.append(await _fsync_floor(root, instances * len(KINDS), records, manifest))
        rtt = statistics.median(shapes)
        fsync = statistics.median(fsyncs)
        return {
            "pause": statistics.median(fleet_pauses),
            "mean_instance_pause": statistics.median(mean_pauses),
            "rtt_floor": rtt,
            "fsync_floor": fsync,
            "floor": rtt + fsync,
        }
    finally:
        await asyncio.gather(*(t.aclose() for t in transports))
        shutil.rmtree(root, ignore_errors=True)


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:8.1f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats and episodes")
    parser.add_argument("--instances", default="1,8,32", help="comma-separated instance counts")
    parser.add_argument("--episodes", type=int, default=None, help="parked episodes per server")
    parser.add_argument("--repeats", type=int, default=None, help="measured cycles per count")
    parser.add_argument("--dir", default=None, help="where checkpoints are written")
    args = parser.parse_args(argv)
    args.episodes = args.episodes or (4 if args.quick else 16)
    args.repeats = args.repeats or (3 if args.quick else 10)
    counts = [int(part) for part in args.instances.split(",") if part.strip()]

    # The engine logs every transition; printing them would dominate the timings.
    saved_logging = structlog.get_config()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    try:
        _run(counts, args)
    finally:
        structlog.configure(**saved_logging)
    return 0


def _run(counts: Sequence[int], args: Any) -> None:
    episodes = _episodes(args.episodes)
    print(
        f"instances x 3 servers, {args.episodes} parked episodes each, "
        f"{args.repeats} cycles per count; times in ms (median)",
        flush=True,
    )
    print(
        f"{'instances':>9} {'pause':>8} {'per-inst':>8} {'rtt x7':>8} {'fsync':>8} "
        f"{'floor':>8} {'pause/floor':>11} {'pause/pause(1)':>14}"
    )
    first: float | None = None
    for count in counts:
        fleet = _apps(count, episodes)
        flat = [app for apps in fleet for app in apps]
        with serve_many_in_thread(flat, log_level="error") as flat_urls:
            urls = [flat_urls[i : i + len(KINDS)] for i in range(0, len(flat_urls), len(KINDS))]
            figures = asyncio.run(_measure(count, urls, episodes, args))
        first = figures["pause"] if first is None else first
        print(
            f"{count:>9} {_ms(figures['pause'])} {_ms(figures['mean_instance_pause'])} "
            f"{_ms(figures['rtt_floor'])} {_ms(figures['fsync_floor'])} "
            f"{_ms(figures['floor'])} {figures['pause'] / figures['floor']:>11.2f} "
            f"{figures['pause'] / first:>14.2f}",
            flush=True,
        )


if __name__ == "__main__":
    sys.exit(main())
