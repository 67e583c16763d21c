"""What framing with h11 alone costs a control client: the minimal client, with and without it.

``coordinator_cpu_us_per_call_32`` and ``coordinator_cpu_over_raw_32``
compare envckpt's coordinator with the minimal client of ``bench/raw_http.py``,
which frames HTTP/1.1 by hand. envckpt's client frames with h11 (issue 26).
This puts a third client between them: the minimal client's own policy (one
kept-alive connection per server, one request at a time, the same bodies and
phase checks) with requests and replies framed by an ``h11.Connection``, and
nothing else added. Its CPU per call is the least any client framing with
h11 spends here; no code of envckpt's is in it.

The three drive the same envckpt servers (``bench/server_process.py``, one
process per instance) through whole snapshots, interleaved, warm-up dropped;
a figure is this process's CPU seconds over the snapshot's control calls::

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
from collections.abc import Awaitable, Callable, Mapping
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

    def __init__(self, urls: Mapping[str, str], *, token: str) -> None:
        self.connections = {name: H11Connection(url, token=token) for name, url in urls.items()}


async def measure(workdir: Path, *, instances: int, rounds: int) -> dict[str, list[float]]:
    """CPU seconds per control call of each client, over ``rounds`` interleaved snapshots."""
    root = workdir / "checkpoints"
    root.mkdir()
    fleet = {"workdir": workdir, "token": TOKEN, "checkpoint_root": root}
    with (
        Fleet("envckpt", count=instances, **fleet) as servers,
        Fleet("floor", count=1, **fleet) as floor,
    ):
        driver = pause._Driver(servers, floor, count=instances, root=root)
        framed = [H11Client(urls, token=TOKEN) for urls in servers.urls[:instances]]
        try:
            await driver.start()
            calls = instances * CALLS_PER_INSTANCE

            def per_call(run: Callable[[], Awaitable[float]]) -> Callable[[], Awaitable[float]]:
                async def timed() -> float:
                    started = time.process_time()
                    await run()
                    return (time.process_time() - started) / calls

                return timed

            # As the pause bench does: what startup built is not walked by every collection.
            gc.collect()
            gc.freeze()
            return await interleave_async(
                {
                    "raw": per_call(lambda: driver.raw_run(driver.raw_envckpt)),
                    "raw + h11": per_call(lambda: driver.raw_run(framed)),
                    "envckpt": per_call(driver.envckpt_run),
                },
                rounds=rounds,
                between=driver.clean,
            )
        finally:
            gc.unfreeze()
            await asyncio.gather(*(client.aclose() for client in framed))
            await driver.aclose()


def report(runs: Mapping[str, list[float]]) -> str:
    """Each client's CPU per call, and each over the minimal client's."""
    lines = [
        f"{name:10s} {Summary.of(values).describe(scale=1e6, unit=' us')} per call"
        + ("" if name == "raw" else f"   over raw {Ratio.of(values, runs['raw']).describe()}")
        for name, values in runs.items()
    ]
    lines.append(
        f"envckpt over raw + h11 {Ratio.of(runs['envckpt'], runs['raw + h11']).describe()}"
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
    print(f"coordinator CPU per control call, {args.instances} instances, interleaved")
    print(report(runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
