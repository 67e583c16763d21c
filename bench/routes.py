"""What one control request costs a participant, route by route: envckpt's against the floor's.

The pause figures time whole snapshots over sockets, where the participants'
share is one number. This splits it by route. Both apps, envckpt's
participant (``bench/envckpt_app.py``, confined to a checkpoint root as
``python -m envckpt.sim.server`` serves it) and the floor's
(``bench/floor_app.py``), are called in this process through ASGI, with no
socket and no HTTP parser, for one snapshot's prepare, commit (100 parked
states of 1 KB) and resume. A request's figure is this process's CPU time
(``time.process_time``, so the commit's writer thread counts). Cycles
alternate between the two apps, the order rotating, the first dropped.
Transition logging is off (structlog filtered at WARNING): what is left is
each request's own work::

    python -m bench.routes [--cycles 200] [--dir /path/on/the/disk/to/measure]

    runs = asyncio.run(measure(Path(tmp), cycles=50))   # {"envckpt": {"prepare": [s, ...]}}
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

import orjson
import structlog

from bench.envckpt_app import envckpt_app
from bench.floor_app import PREFIX, floor_app
from bench.states import parked_states, rollout_ids
from bench.stats import Ratio, Summary, interleave_async

TOKEN = "bench-routes-token-0f3a9c"
EPISODES = 100
STATE_BYTES = 1000
ROUTES = ("prepare", "commit", "resume")
# The phase each route answers with when it succeeds.
PHASES = {"prepare": "prepared", "commit": "committed", "resume": "idle"}
# Runs (of either app) between two untimed cleanups of the checkpoints written.
CLEAN_EVERY = 20

App = Callable[..., Awaitable[None]]
Runs = dict[str, dict[str, list[float]]]


class RouteFailed(RuntimeError):
    """A request did not answer 200 with its route's phase: the figures would mean nothing."""


async def post(app: App, route: str, body: bytes) -> dict[str, Any]:
    """One authenticated POST to ``route`` through ``app``'s ASGI interface; its JSON reply."""
    pending = [body]
    sent: list[MutableMapping[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": pending.pop() if pending else b""}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    path = f"{PREFIX}/{route}"
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"127.0.0.1"),
            (b"authorization", f"Bearer {TOKEN}".encode()),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 2),
    }
    await app(scope, receive, send)
    status = sent[0]["status"]
    reply = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    parsed = orjson.loads(reply) if reply else None
    if status != 200 or not isinstance(parsed, dict) or parsed.get("phase") != PHASES[route]:
        raise RouteFailed(f"{route}: HTTP {status} {reply[:300]!r}")
    return parsed


def _cycle(
    app: App, root: Path, ids: list[str], into: dict[str, list[float]]
) -> Callable[[], Awaitable[float]]:
    """One snapshot's three requests to ``app``: each one's CPU seconds go to ``into``."""

    async def run() -> float:
        checkpoint_id = f"routes-{uuid.uuid4().hex[:12]}"
        deadline = time.time() + 60
        (root / checkpoint_id).mkdir()
        control = orjson.dumps({"checkpoint_id": checkpoint_id, "deadline_ts": deadline})
        bodies = {
            "prepare": control,
            "commit": orjson.dumps(
                {
                    "checkpoint_id": checkpoint_id,
                    "deadline_ts": deadline,
                    "checkpoint_dir": str(root / checkpoint_id / "instance-0"),
                    "episode_ids": [{"rollout_id": rid, "attempt": 0} for rid in ids],
                }
            ),
            "resume": control,
        }
        total = 0.0
        for route in ROUTES:
            started = time.process_time()
            await post(app, route, bodies[route])
            spent = time.process_time() - started
            into.setdefault(route, []).append(spent)
            total += spent
        return total

    return run


async def measure(workdir: Path, *, cycles: int) -> Runs:
    """Per route and app, the CPU seconds of each request over ``cycles`` interleaved cycles."""
    states = parked_states(EPISODES, state_bytes=STATE_BYTES)
    ids = rollout_ids(EPISODES)
    root = workdir / "checkpoints"
    root.mkdir()
    envckpt, _ = envckpt_app(
        server_name="policy", kind="model", token=TOKEN, states=dict(states), checkpoint_root=root
    )
    floor = floor_app(server_name="policy", kind="model", token=TOKEN, states=dict(states))
    runs: Runs = {"envckpt": {}, "floor": {}}
    done = 0

    async def clean() -> None:
        nonlocal done
        done += 1
        if done % CLEAN_EVERY == 0:
            await asyncio.to_thread(_empty, root)

    await interleave_async(
        {
            "envckpt": _cycle(envckpt, root, ids, runs["envckpt"]),
            "floor": _cycle(floor, root, ids, runs["floor"]),
        },
        rounds=cycles,
        warmup=1,
        between=clean,
    )
    # interleave_async drops the warm-up round's totals; drop its requests too.
    return {
        app: {route: times[1:] for route, times in routes.items()} for app, routes in runs.items()
    }


def _empty(root: Path) -> None:
    for entry in root.iterdir():
        shutil.rmtree(entry)


def report(runs: Runs) -> str:
    """One line per route: each app's median [min-max] in us, their ratio and difference."""
    lines = []
    for route in ROUTES:
        ours, floor = runs["envckpt"][route], runs["floor"][route]
        mine, theirs = Summary.of(ours), Summary.of(floor)
        lines.append(
            f"{route:8s} envckpt {mine.describe(scale=1e6, unit=' us')}   "
            f"floor {theirs.describe(scale=1e6, unit=' us')}   "
            f"ratio {Ratio.of(ours, floor).describe()}   "
            f"difference {(mine.median - theirs.median) * 1e6:.0f} us"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.routes")
    parser.add_argument("--cycles", type=int, default=200)
    parser.add_argument("--dir", type=Path, default=None, help="where the checkpoints go")
    args = parser.parse_args(argv)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    with tempfile.TemporaryDirectory(prefix="envckpt-routes-", dir=args.dir) as tmp:
        runs = asyncio.run(measure(Path(tmp), cycles=args.cycles))
    print(f"CPU per request, in process over ASGI, {EPISODES} x {STATE_BYTES} B committed")
    print(report(runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
