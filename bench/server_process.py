"""Benchmark Gym instances in one process: three participants, three uvicorn servers each.

Like ``python -m envckpt.sim.server``, one process serves a deployment: the
policy model, the agent and the resources server, each a FastAPI app on its
own port, all on one event loop; ``--instances K`` packs K such instances into
the process, as a large deployment packs them (the 256 and 1000 instance
figures). ``--variant`` picks what answers the control
routes: ``envckpt`` (a ``ParticipantCore`` behind ``mount_participant``) or
``floor`` (``bench/floor_app.py``, no envckpt code; this module imports
envckpt only for the envckpt variant)::

    python -m bench.server_process --variant floor --token T --ready-file r.json \\
        --checkpoint-root DIR [--instances 1] [--episodes 100] [--state-bytes 1000] \\
        [--log-file transitions.jsonl] [--profile out.prof]

envckpt's participants are confined to ``--checkpoint-root`` (as the sim
server confines them). The ready file gets a list of ``{"policy": url,
"agent": url, "resources": url}``, one per instance, once every server listens.
``POST /bench/states`` with ``{"episodes", "state_bytes"}`` replaces the parked
states of a participant between snapshots. SIGTERM stops.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import uvicorn
from fastapi import FastAPI, Request, Response

from bench.states import parked_states

# server name -> participant kind, in stage order (the protocol's prepare order).
PARTICIPANTS: tuple[tuple[str, str], ...] = (
    ("policy", "model"),
    ("agent", "agent"),
    ("resources", "resources"),
)


class _Server(uvicorn.Server):
    """uvicorn without its signal handlers: three servers share this process."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def _app(
    variant: str, name: str, kind: str, token: str, states: dict[str, Any], root: Path
) -> FastAPI:
    replace: Callable[[dict[str, Any]], None]
    if variant == "floor":
        from bench.floor_app import floor_app

        app = floor_app(server_name=name, kind=kind, token=token, states=states)

        def replace(fresh: dict[str, Any]) -> None:
            states.clear()
            states.update(fresh)
    else:
        from bench.envckpt_app import envckpt_app

        app, hooks = envckpt_app(
            server_name=name, kind=kind, token=token, states=states, checkpoint_root=root
        )
        replace = hooks.replace

    @app.post("/bench/states")
    async def replace_states(request: Request) -> Response:
        wanted = orjson.loads(await request.body())
        replace(parked_states(wanted["episodes"], state_bytes=wanted["state_bytes"]))
        return Response(b"{}", media_type="application/json")

    return app


def _configure_logging(log_file: Path | None) -> None:
    """envckpt's transition log at INFO as JSON lines to a file, as a deployment would:
    with envckpt's own recipe, ``logs.configure``."""
    if log_file is None:
        import structlog

        structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
        return
    from envckpt import logs

    logs.configure(json=True, level="info", path=log_file)


async def serve(args: argparse.Namespace) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    servers = []
    for index, (name, kind) in (
        (index, participant) for index in range(args.instances) for participant in PARTICIPANTS
    ):
        states = parked_states(args.episodes, state_bytes=args.state_bytes)
        config = uvicorn.Config(
            _app(args.variant, name, kind, args.token, states, args.checkpoint_root),
            host="127.0.0.1",
            port=0,
            log_config=None,
            log_level="warning",
            access_log=False,
            lifespan="on",
            # As nemo-gym 0.7.0 runs its servers (uvicorn's default is 5 s).
            timeout_keep_alive=30,
        )
        servers.append((index, name, _Server(config)))
    tasks = [asyncio.create_task(server.serve()) for _, _, server in servers]
    while not all(server.started for _, _, server in servers):
        if any(task.done() for task in tasks):
            raise SystemExit("a server failed to start")
        await asyncio.sleep(0.01)
    urls: list[dict[str, str]] = [{} for _ in range(args.instances)]
    for index, name, server in servers:
        urls[index][name] = f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
    tmp = args.ready_file.with_suffix(".tmp")
    tmp.write_text(json.dumps(urls))
    os.replace(tmp, args.ready_file)
    await stop.wait()
    for _, _, server in servers:
        server.should_exit = True
    await asyncio.gather(*tasks, return_exceptions=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.server_process")
    parser.add_argument("--variant", choices=("envckpt", "floor"), required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--ready-file", type=Path, required=True)
    parser.add_argument("--checkpoint-root", type=Path, required=True)
    parser.add_argument("--instances", type=int, default=1, help="Gym instances in this process")
    parser.add_argument("--episodes", type=int, default=100)
    parser.add_argument("--state-bytes", type=int, default=1000)
    parser.add_argument("--log-file", type=Path, default=None)
    parser.add_argument("--profile", type=Path, default=None, help="write cProfile stats here")
    args = parser.parse_args(argv)
    if args.variant == "envckpt":
        _configure_logging(args.log_file)
    if args.profile is None:
        asyncio.run(serve(args))
        return 0
    import cProfile

    async def inline(function: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        return function(*args, **kwargs)

    # Worker threads escape cProfile: run their work (the commit's write) inline.
    asyncio.to_thread = inline  # type: ignore[assignment]
    profile = cProfile.Profile()
    try:
        profile.runcall(asyncio.run, serve(args))
    finally:
        profile.dump_stats(args.profile)
    return 0


if __name__ == "__main__":
    sys.exit(main())
