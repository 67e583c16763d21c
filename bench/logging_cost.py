"""What the transition log costs: one snapshot cycle with logging on at INFO over logging off.

The cycle is the engine's own, in process: a ``GymCheckpointAdapter`` over a
``Coordinator`` and the in-process transport, three participant cores each
holding 100 parked 1 KB episodes; prepare, commit, resume (every machine
fires and logs). Checkpoints go to tmpfs (``/dev/shm`` when there is one),
so disk flushes do not drown what is measured. Three variants, interleaved,
each run being ``cycles`` cycles:

* ``on``: INFO, JSON lines to a file in ``workdir`` (a real disk, not
  tmpfs), with envckpt's own recipe as a deployment logs:
  ``logs.configure(json=True, level="info", path=...)`` opens the file for
  appending (binary), and the run passes the same kind of file as
  ``stream=`` so it can close it afterwards (``path=`` keeps its file open
  for the process). Every event goes through structlog's configured
  processors (orjson renders the line) and is flushed to the OS before the
  call returns;
* ``off``: structlog filtered at WARNING, how logging is turned off;
* ``floor``: the binding's logger replaced by a minimal emitter doing the
  same I/O as ``on`` and nothing else: each event's fields plus level and
  timestamp, ``orjson.dumps``, one write and one flush per line to the same
  file. No structlog and no envckpt logging code: ``floor / off`` is what
  writing the lines costs at all, the bound under ``on / off``;
* ``absent``: the binding's logger replaced by one whose methods do nothing
  (no structlog at all), to show what a filtered call still costs.

``logging_overhead`` = on / off, in CPU time of this process (the cycle
runs entirely here, its write thread included, so CPU time is its cost, and
a busy machine distorts it far less than wall time; wall times are kept too).

Single rounds swing by tens of percent on a shared machine, so the figure
is the median of many paired rounds (1,600 in ``--quick``, 2,400 in full):
a run of 400 rounds moved its median by about 0.01 from run to run, as much
as the differences worth measuring.

    cpu, wall, events = run(workdir, rounds=400, cycles=3)
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

import orjson
import structlog

from bench.envckpt_app import envckpt_core
from bench.states import parked_states, rollout_ids
from bench.stats import interleave_async
from envckpt import logs
from envckpt.coordination.coordinator import Coordinator
from envckpt.coordination.inprocess import InProcessTransport
from envckpt.episodes import EnvironmentEpisode
from envckpt.gym.adapter import GymCheckpointAdapter
from envckpt.gym.instance import GymCheckpointInstance
from envckpt.machines import binding

TOKEN = "bench-token-0123456789"
EPISODES, STATE_BYTES = 100, 1000
PARTICIPANTS = (("policy", "model"), ("agent", "agent"), ("resources", "resources"))
VARIANTS = ("on", "off", "floor", "absent")


class _NoLogger:
    """A logger that is not there: every method returns at once."""

    def __getattr__(self, name: str) -> Callable[..., None]:
        return _nothing


def _nothing(*args: Any, **kwargs: Any) -> None:
    return None


class _FloorLogger:
    """The least a JSON-lines logger can do: render each event and hand it to the OS."""

    def __init__(self, sink: BinaryIO) -> None:
        self._sink = sink

    def enabled(self, level: str) -> Callable[..., None]:
        sink = self._sink

        def emit(event: str, **fields: Any) -> None:
            fields.update(event=event, level=level, timestamp=time.time())
            sink.write(orjson.dumps(fields) + b"\n")
            sink.flush()

        return emit


@contextmanager
def _logging(variant: str, log_path: Path) -> Iterator[None]:
    saved_config, saved_logger = structlog.get_config(), binding._LOG
    # Appending, binary: the file ``logs.configure(path=...)`` opens, closed
    # after the run rather than kept for the process.
    with open(log_path, "ab") as sink:
        if variant in ("on", "events"):
            logs.configure(json=True, level="info", stream=sink)
        else:
            structlog.configure(
                wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING)
            )
            # Duck-typed stand-ins for the binding's logger: only ``enabled`` is called.
            stand_in: Any = None
            if variant == "absent":
                stand_in = _NoLogger()
            elif variant == "floor":
                stand_in = _FloorLogger(sink)
            if stand_in is not None:
                binding._LOG = stand_in
        try:
            yield
        finally:
            binding._LOG = saved_logger
            structlog.configure(**saved_config)


async def measure(
    workdir: Path, *, rounds: int, cycles: int, absent: bool = True
) -> tuple[dict[str, list[float]], dict[str, list[float]], int]:
    """Interleaved CPU seconds per cycle of each variant, wall seconds, events per cycle.

    ``absent=False`` leaves that variant out (a quarter less time): ``on``,
    ``off`` and ``floor`` are measured exactly as with it.
    """
    shm = Path("/dev/shm")
    root = Path(tempfile.mkdtemp(prefix="bench-logging-", dir=shm if shm.is_dir() else workdir))
    log_path = workdir / "transitions.jsonl"
    cores = {
        name: envckpt_core(
            server_name=name,
            kind=kind,
            states=parked_states(EPISODES, state_bytes=STATE_BYTES),
        )
        for name, kind in PARTICIPANTS
    }
    adapter = GymCheckpointAdapter(
        instance=GymCheckpointInstance("bench", 0),
        coordination=Coordinator(InProcessTransport(cores, token=TOKEN)),
    )
    await adapter.discover()
    scope = tuple(EnvironmentEpisode(rollout_id, 0) for rollout_id in rollout_ids(EPISODES))
    counter = iter(range(1 << 30))

    async def cycle() -> None:
        cid = f"log-{next(counter)}"
        deadline = time.time() + 60
        result = await adapter.prepare(cid, deadline_ts=deadline)
        await adapter.commit(cid, root / cid, result.continued(scope), deadline_ts=deadline)
        await adapter.resume(cid, deadline_ts=deadline)

    wall: dict[str, list[float]] = {}

    def run(variant: str) -> Callable[[], Any]:
        wall[variant] = []

        async def timed() -> float:
            with _logging(variant, log_path):
                start, started = time.perf_counter(), time.process_time()
                for _ in range(cycles):
                    await cycle()
                seconds = (time.process_time() - started) / cycles
                wall[variant].append((time.perf_counter() - start) / cycles)
            for entry in root.iterdir():
                shutil.rmtree(entry, ignore_errors=True)
            return seconds

        return timed

    try:
        runs = await interleave_async(
            {name: run(name) for name in VARIANTS if absent or name != "absent"}, rounds=rounds
        )
        before = _lines(log_path)
        await run("events")()
        events = (_lines(log_path) - before) // cycles
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return runs, {name: values[-rounds:] for name, values in wall.items() if name in runs}, events


def _lines(path: Path) -> int:
    with open(path, "rb") as stream:
        return sum(1 for _ in stream)


def run(
    workdir: Path, *, rounds: int, cycles: int, absent: bool = True
) -> tuple[dict[str, list[float]], dict[str, list[float]], int]:
    """``measure`` on a fresh event loop."""
    return asyncio.run(measure(workdir, rounds=rounds, cycles=cycles, absent=absent))
