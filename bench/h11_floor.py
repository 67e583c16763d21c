"""What framing with h11 alone costs a control client: the minimal client, with and without it.

``coordinator_cpu_us_per_call_32`` and ``coordinator_cpu_over_raw_32``
compare envckpt's coordinator with the minimal client of ``bench/raw_http.py``,
which frames HTTP/1.1 by hand. envckpt's client frames with h11 (issue 26).
This puts a third client between them: the minimal client's own policy (one
kept-alive connection per server, one request at a time, the same bodies and
phase checks) with requests and replies framed by an ``h11.Connection``, and
nothing else added. Its CPU per call is close to the least a client framing
with h11 spends here (reusing validated ``h11.Request`` events between calls,
as envckpt's client does, left it at 1.84 x the hand-framed client at 32
instances); no code of envckpt's is in it.

The three drive the same envckpt servers (``bench/server_process.py``, one
process per instance) through whole snapshots, interleaved, warm-up dropped;
a figure is this process's CPU seconds over the snapshot's control calls.
Both minimal clients also drive the floor's servers (``bench/floor_app.py``)
in the same rounds, so the pause is compared with the floor framed either
way: ``floor + h11 over floor`` is what h11's framing alone adds to a
snapshot, and ``envckpt over floor`` is the bench's ``pause_over_floor``::

    python -m bench.h11_floor [--instances 32] [--rounds 16]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import h11
import structlog

from bench import pause
from bench.fleet import Fleet
from bench.raw_http import RawClient, RawConnection
from bench.stats import Ratio, Summary, interleave_async

TOKEN = "bench-h11-floor-token-7d2e"
# A snapshot's control calls per instance: prepare, commit, resume to three servers.
CALLS_PER_INSTANCE = 9
READ_BYTES = 65536


class H11Connection(RawConnection):
    """``RawConnection``'s policy, its requests and replies framed by one ``h11.Connection``."""

    def __init__(self, base_url: str, *, token: str) -> None:
        super().__init__(base_url, token=token)
        self._fields = [
            (b"host", f"{self.host}:{self.port}".encode()),
            (b"authorization", f"Bearer {token}".encode()),
            (b"content-type", b"application/json"),
        ]
        self._h11: h11.Connection | None = None

    async def request(self, method: str, path: str, body: bytes | None) -> tuple[int, bytes]:
        payload = body or b""
        async with self._lock:
            if self._writer is None or self._h11 is None:
                self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
                self._h11 = h11.Connection(h11.CLIENT)
            assert self._reader is not None
            connection = self._h11
            fields = [*self._fields, (b"content-length", b"%d" % len(payload))]
            data = connection.send(h11.Request(method=method, target=path, headers=fields)) or b""
            data += connection.send(h11.Data(data=payload)) or b""
            connection.send(h11.EndOfMessage())
            self._writer.write(data)
            status, chunks = 0, []
            while True:
                event = connection.next_event()
                if event is h11.NEED_DATA:
                    received = await self._reader.read(READ_BYTES)
                    if not received:
                        raise ConnectionError("the server closed the connection")
                    connection.receive_data(received)
                elif type(event) is h11.Response:
                    status = event.status_code
                elif type(event) is h11.Data:
                    chunks.append(event.data)
                elif type(event) is h11.EndOfMessage:
                    break
            if connection.our_state is h11.DONE and connection.their_state is h11.DONE:
                connection.start_next_cycle()
            else:  # the server closes this one (Connection: close): the next call reconnects
                await self._close()
                self._h11 = None
            return status, b"".join(chunks)

    async def aclose(self) -> None:
        self._h11 = None
        await super().aclose()


class H11Client(RawClient):
    """One ``H11Connection`` per server of one Gym instance."""

    connection_class = H11Connection


Runs = dict[str, dict[str, list[float]]]


async def measure(workdir: Path, *, instances: int, rounds: int) -> Runs:
    """Over ``rounds`` interleaved rounds: ``cpu``, each client's CPU seconds per control
    call to envckpt's servers; ``wall``, each snapshot's seconds (the pause), envckpt's
    coordinator to its servers and both minimal clients to the floor's."""
    root = workdir / "checkpoints"
    root.mkdir()
    with (
        Fleet(
            "envckpt", count=instances, workdir=workdir, token=TOKEN, checkpoint_root=root
        ) as servers,
        Fleet(
            "floor", count=instances, workdir=workdir, token=TOKEN, checkpoint_root=root
        ) as floor,
    ):
        driver = pause._Driver(servers, floor, count=instances, root=root)
        to_envckpt = [H11Client(urls, token=TOKEN) for urls in servers.urls[:instances]]
        to_floor = [H11Client(urls, token=TOKEN) for urls in floor.urls[:instances]]
        cpu: dict[str, list[float]] = {"raw": [], "raw + h11": [], "envckpt": []}
        calls = instances * CALLS_PER_INSTANCE

        def per_call(
            name: str, run: Callable[[], Awaitable[float]]
        ) -> Callable[[], Awaitable[float]]:
            async def timed() -> float:
                started = time.process_time()
                wall = await run()
                cpu[name].append((time.process_time() - started) / calls)
                return wall

            return timed

        try:
            await driver.start()
            # As the pause bench does: what startup built is not walked by every collection.
            gc.collect()
            gc.freeze()
            wall = await interleave_async(
                {
                    "raw": per_call("raw", lambda: driver.raw_run(driver.raw_envckpt)),
                    "raw + h11": per_call("raw + h11", lambda: driver.raw_run(to_envckpt)),
                    "envckpt": per_call("envckpt", driver.envckpt_run),
                    "floor": lambda: driver.raw_run(driver.raw_floor),
                    "floor + h11": lambda: driver.raw_run(to_floor),
                },
                rounds=rounds,
                between=driver.clean,
            )
        finally:
            gc.unfreeze()
            await asyncio.gather(*(client.aclose() for client in [*to_envckpt, *to_floor]))
            await driver.aclose()
    # interleave_async drops the warm-up round's results; drop its CPU figures too.
    return {"cpu": {name: values[1:] for name, values in cpu.items()}, "wall": wall}


def report(runs: Runs) -> str:
    """CPU per call of each client, and the pause over each floor."""
    cpu, wall = runs["cpu"], runs["wall"]
    lines = ["CPU per control call to envckpt's servers:"]
    lines += [
        f"  {name:10s} {Summary.of(values).describe(scale=1e6, unit=' us')}"
        + ("" if name == "raw" else f"   over raw {Ratio.of(values, cpu['raw']).describe()}")
        for name, values in cpu.items()
    ]
    lines.append(
        f"  envckpt over raw + h11 {Ratio.of(cpu['envckpt'], cpu['raw + h11']).describe()}"
    )
    lines.append("pause (one snapshot of every instance):")
    lines += [
        f"  {name:10s} {Summary.of(wall[name]).describe(scale=1e3, unit=' ms')}"
        for name in ("envckpt", "floor", "floor + h11")
    ]
    lines.append(
        f"  floor + h11 over floor {Ratio.of(wall['floor + h11'], wall['floor']).describe()}"
    )
    lines.append(f"  envckpt over floor {Ratio.of(wall['envckpt'], wall['floor']).describe()}")
    lines.append(
        f"  envckpt over floor + h11 {Ratio.of(wall['envckpt'], wall['floor + h11']).describe()}"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.h11_floor")
    parser.add_argument("--instances", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=16)
    args = parser.parse_args(argv)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    with tempfile.TemporaryDirectory(prefix="envckpt-h11-floor-") as tmp:
        runs = asyncio.run(measure(Path(tmp), instances=args.instances, rounds=args.rounds))
    print(f"{args.instances} instances, {args.rounds} rounds interleaved")
    print(report(runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
