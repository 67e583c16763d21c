"""``python -m envckpt.sim.server``: one Gym deployment (``GymServers``) as a process.

The demo and the end-to-end tests start these and SIGKILL them::

    ENVCKPT_GYM_TOKEN=... python -m envckpt.sim.server --seed 7 --ready-file urls.json \\
        --checkpoint-root /data/ckpt [--resources-mode stateless] [--audit audit.jsonl] \\
        [--rows-url URL] [--log-json gym.jsonl] [--instance-id shard/replica-0] \\
        [--host 127.0.0.1] [--expose-docs] [--workers N [--worker-dir D]]

It writes ``{server_name: base_url}`` to the ready file atomically once every
server listens, and stops cleanly on SIGTERM or SIGINT. Secrets never come
from the command line (other users can read it): the control token from
``ENVCKPT_GYM_TOKEN`` or the owner-only file ``ENVCKPT_GYM_TOKEN_FILE``, the
token for ``--rows-url`` from ``ENVCKPT_ROWS_TOKEN`` or
``ENVCKPT_ROWS_TOKEN_FILE`` (a different one); each must have at least 16
characters, and ``--token`` or ``--rows-token`` is refused. Commit and
restore may only name directories under ``--checkpoint-root`` (or
``ENVCKPT_CHECKPOINT_ROOT``), which is required. The servers bind 127.0.0.1
unless ``--host`` says otherwise, serve no API docs unless ``--expose-docs``,
and apply the request-read and keep-alive timeouts of ``ServerLimits`` and a
body limit on every route (docs/protocol.md, "Security").

``--workers N`` (N >= 2) runs the policy model, the tool server and the agent
each under uvicorn's multi-worker mode with N workers (``multiworker``): each
participant still answers as one (docs/protocol.md, "Servers with several
workers").

``--log-json`` (or ``ENVCKPT_GYM_LOG``) appends every log event of the
process as one JSON object per line, the participants' ``transition`` events
among them, so ``envckpt statecharts --overlay`` can draw them; logging is
configured there, in the process's ``main``, never by the library.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from envckpt.fsutil import atomic_write_bytes
from envckpt.http.bodies import DATA_MAX_BODY_BYTES
from envckpt.http.serve import DEFAULT_HOST, ServerLimits
from envckpt.http.tokens import (
    GYM_ROWS_TOKEN_ENV,
    GYM_ROWS_TOKEN_FILE_ENV,
    GYM_TOKEN_ENV,
    GYM_TOKEN_FILE_ENV,
    TokenUnavailable,
    secret,
)
from envckpt.participant.confinement import DEFAULT_MAX_LEASE_SECONDS
from envckpt.participant.model_calls import DEFAULT_MODEL_CALLS, ModelCallPolicy
from envckpt.process_tie import tie_to_parent
from envckpt.sim.data_clients import HttpStagingSink
from envckpt.sim.gym import GymConfig
from envckpt.sim.gym_servers import GymServers, Serving, judge_app
from envckpt.sim.json_log import configure_json_log

__all__ = ["GymServers", "Serving", "judge_app", "main", "write_ready_file"]

CHECKPOINT_ROOT_ENV = "ENVCKPT_CHECKPOINT_ROOT"
LOG_ENV = "ENVCKPT_GYM_LOG"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m envckpt.sim.server",
        description="Serve one Gym deployment (model, tool, agent, judge) over HTTP.",
    )
    parser.add_argument("--seed", type=int, default=0, help="policy and tool seed (%(default)s)")
    # Refused with an explanation: a command line is visible to every user.
    for refused in ("--token", "--rows-token"):
        parser.add_argument(refused, default=None, help=argparse.SUPPRESS)
    parser.add_argument(
        "--checkpoint-root",
        type=Path,
        default=None,
        help=f"commit and restore only under this directory (or ${CHECKPOINT_ROOT_ENV}); required",
    )
    parser.add_argument(
        "--resources-mode",
        default="export_restore",
        choices=("export_restore", "restart_only", "stateless"),
        help="the tool server's participant mode (%(default)s)",
    )
    parser.add_argument("--audit", type=Path, default=None, help="append tool effects here")
    parser.add_argument(
        "--rows-url",
        default=None,
        help=f"trainer endpoint for token rows (token: ${GYM_ROWS_TOKEN_ENV})",
    )
    parser.add_argument("--model-latency", type=float, default=0.0, help="seconds per generation")
    parser.add_argument("--tool-latency", type=float, default=0.0, help="seconds per tool call")
    parser.add_argument(
        "--model-calls",
        default=DEFAULT_MODEL_CALLS.value,
        choices=[policy.value for policy in ModelCallPolicy],
        help="what a prepare does with generations still decoding (%(default)s)",
    )
    parser.add_argument("--no-judge", action="store_true", help="serve no judge model")
    parser.add_argument("--host", default=DEFAULT_HOST, help="address to bind (%(default)s)")
    parser.add_argument(
        "--max-body-bytes",
        type=int,
        default=DATA_MAX_BODY_BYTES,
        help="largest data-route body (%(default)s)",
    )
    parser.add_argument(
        "--max-lease-seconds",
        type=float,
        default=DEFAULT_MAX_LEASE_SECONDS,
        help="how far ahead a control deadline may lie (%(default)s)",
    )
    parser.add_argument(
        "--request-read-seconds",
        type=float,
        default=ServerLimits().request_read_seconds,
        help="a request must arrive whole within this (%(default)s)",
    )
    parser.add_argument(
        "--expose-docs", action="store_true", help="serve /docs, /redoc and /openapi.json"
    )
    parser.add_argument(
        "--ready-file", type=Path, required=True, help="write {server: base_url} JSON here"
    )
    parser.add_argument(
        "--instance-id", default=None, help="the Gym instance id its events name (shard/replica-0)"
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="uvicorn workers per participant server (%(default)s)",
    )
    parser.add_argument(
        "--worker-dir",
        type=Path,
        default=None,
        help="with --workers: where the workers' slots and sockets go (short path; default /tmp)",
    )
    parser.add_argument(
        "--log-json",
        type=Path,
        default=None,
        metavar="PATH",
        help=f"append every log event as a JSON line here (or ${LOG_ENV})",
    )
    return parser


def write_ready_file(path: Path, urls: Mapping[str, str]) -> None:
    """``urls`` as JSON at ``path``, atomically (a reader never sees a partial file)."""
    atomic_write_bytes(path, json.dumps(dict(urls), sort_keys=True).encode())


async def serve_until_signalled(
    args: argparse.Namespace, token: str, rows_token: str | None, serving: Serving
) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    sink = None
    if args.rows_url is not None and rows_token is not None:
        sink = HttpStagingSink(args.rows_url, rows_token)
    config = GymConfig(
        instance_id=args.instance_id,
        seed=args.seed,
        resources_mode=args.resources_mode,
        judge=not args.no_judge,
        token=token,
        model_latency=args.model_latency,
        tool_latency=args.tool_latency,
        model_calls=args.model_calls,
        audit_path=None if args.audit is None else str(args.audit),
    )
    try:
        if args.workers > 1:
            from envckpt.sim.multiworker import WorkerServers

            hosted = WorkerServers(
                config,
                serving,
                workers=args.workers,
                rows_url=args.rows_url,
                rows_token=rows_token,
                log_json=args.log_json,
                worker_dir=args.worker_dir,
            )
            # A signal during the (long) start of N workers per server stops it too.
            starting = asyncio.ensure_future(hosted.__aenter__())
            stopping = asyncio.ensure_future(stop.wait())
            await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if not starting.done():
                starting.cancel()  # its cleanup stops whatever started
                await asyncio.gather(starting, return_exceptions=True)
                return
            stopping.cancel()
            try:
                starting.result()
                write_ready_file(args.ready_file, hosted.urls)
                await stop.wait()
            finally:
                await hosted.__aexit__(None, None, None)
            return
        async with GymServers.from_config(config, serving=serving, staging_sink=sink) as servers:
            write_ready_file(args.ready_file, servers.urls)
            await stop.wait()
    finally:
        if sink is not None:
            await sink.aclose()


def _serving(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Serving:
    root = args.checkpoint_root or os.environ.get(CHECKPOINT_ROOT_ENV, "").strip()
    if not root:
        parser.error(f"a checkpoint root is required: --checkpoint-root or ${CHECKPOINT_ROOT_ENV}")
    try:
        return Serving(
            Path(root),
            host=args.host,
            max_lease_seconds=args.max_lease_seconds,
            data_max_body_bytes=args.max_body_bytes,
            limits=ServerLimits(request_read_seconds=args.request_read_seconds),
            expose_docs=args.expose_docs,
        )
    except ValueError as error:
        parser.error(str(error))


def main(argv: Sequence[str] | None = None) -> int:
    tie_to_parent()  # dies with the process that started it, if that one asked
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.token is not None or args.rows_token is not None:
        parser.error(
            "tokens are never taken from the command line (other users can read it): "
            f"set ${GYM_TOKEN_ENV} or ${GYM_TOKEN_FILE_ENV}, "
            f"and ${GYM_ROWS_TOKEN_ENV} or ${GYM_ROWS_TOKEN_FILE_ENV}"
        )
    try:
        token = secret(GYM_TOKEN_ENV, GYM_TOKEN_FILE_ENV)
        rows_token = None
        if args.rows_url is not None:
            rows_token = secret(GYM_ROWS_TOKEN_ENV, GYM_ROWS_TOKEN_FILE_ENV)
    except (TokenUnavailable, OSError) as error:
        parser.error(f"no usable token: {error}")
    if rows_token is not None and rows_token == token:
        parser.error(f"${GYM_ROWS_TOKEN_ENV} must differ from the control token")
    if args.workers < 1:
        parser.error("--workers must be at least 1")
    serving = _serving(parser, args)
    log_path = args.log_json or (Path(os.environ[LOG_ENV]) if os.environ.get(LOG_ENV) else None)
    if log_path is not None:
        configure_json_log(log_path)
    args.log_json = log_path  # workers of --workers N log there too
    asyncio.run(serve_until_signalled(args, token, rows_token, serving))
    return 0


if __name__ == "__main__":
    sys.exit(main())
