"""Peak memory of a real ``ParticipantCore.restore`` of a records file of a given size.

Each step runs in a fresh interpreter, so one figure never inherits another's
heap:

1. make: a participant core holding parked states of about N MB commits them
   (prepare, commit, resume), which writes a real checkpoint directory;
2. restore: a fresh core (the hooks validate every state and keep nothing,
   so what is measured is the core's own memory, not the installed state)
   restores every episode of it. Measured: the growth of peak RSS over the
   RSS just before the call (``VmHWM`` reset through ``/proc/self/clear_refs``),
   in MiB, which is the figure reported; and, in another fresh interpreter,
   the ``tracemalloc`` peak of the same call.

The restore streams: its memory does not grow with the file's bytes, only
with the number of episodes it restores (the reply lists each one's key, a
new string; the core keeps the scope as a table of ids and attempts, 16
bytes each, and a flag byte each in the attempt fence). ``state_bytes``
tells the two apart: the
bench's keys restore realistic records (200 MB in 233,000 records of about
860 bytes of state), and a third line the same bytes in few large records,
which gives the bytes kept per extra episode.

    figures = measure(workdir, size_mb=200)     # {"rss_mib", "tracemalloc_mib", "seconds", ...}
    figures = measure(workdir, size_mb=200, state_bytes=40_000, traced=False)
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

from bench.fleet import child_env

STATE_BYTES = 4000
KIND, SERVER = "agent", "agent"
CHECKPOINT_ID = "bench-restore"


def _status_kib(field: str) -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as refs:
            refs.write("5")
    except OSError:
        return False
    return True


SCOPE_FILE = "scope.json"


async def _make(checkpoint_dir: Path, size_mb: float, state_bytes: int) -> dict[str, Any]:
    from bench.envckpt_app import envckpt_core
    from bench.states import parked_states
    from envckpt.episodes import EnvironmentEpisode

    count = max(1, int(size_mb * 1_000_000 / state_bytes))
    states = parked_states(count, state_bytes=state_bytes)
    core = envckpt_core(server_name=SERVER, kind=KIND, states=states)
    deadline = time.time() + 600
    await core.prepare(CHECKPOINT_ID, deadline_ts=deadline)
    scope = [EnvironmentEpisode(rollout_id, 0) for rollout_id in states]
    reply = await core.commit(
        CHECKPOINT_ID, deadline_ts=deadline, checkpoint_dir=str(checkpoint_dir), episode_ids=scope
    )
    await core.resume(CHECKPOINT_ID, deadline_ts=deadline)
    # The trainer knows the scope from its own manifest; the participant's
    # manifest keeps to Gym's fields, so the bench keeps the scope beside it.
    (checkpoint_dir / SCOPE_FILE).write_text(json.dumps(reply["episode_ids"]))
    records = checkpoint_dir / "gym" / KIND / SERVER / reply["manifest"]["records_file"]
    return {"records": len(states), "file_mb": records.stat().st_size / 1_000_000}


async def _restore(checkpoint_dir: Path, traced: bool) -> dict[str, Any]:
    from bench.envckpt_app import ParkedStates, envckpt_core
    from envckpt.episodes import EnvironmentEpisode

    keys = json.loads((checkpoint_dir / SCOPE_FILE).read_text())
    scope = [EnvironmentEpisode.from_capture_key(key) for key in keys]
    core = envckpt_core(server_name=SERVER, kind=KIND, states={})
    deadline = time.time() + 600
    gc.collect()
    if traced:
        tracemalloc.start()
    reset = _reset_peak()
    before = _status_kib("VmRSS")
    start = time.perf_counter()
    await core.restore(
        CHECKPOINT_ID, deadline_ts=deadline, checkpoint_dir=str(checkpoint_dir), episode_ids=scope
    )
    seconds = time.perf_counter() - start
    figures: dict[str, Any] = {"seconds": seconds, "peak_reset": reset}
    if traced:
        figures["tracemalloc_mib"] = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
    else:
        figures["rss_mib"] = (_status_kib("VmHWM") - before) / 1024
    hooks = core.hooks
    assert isinstance(hooks, ParkedStates)
    if hooks.installed != len(scope):
        raise RuntimeError(f"restored {hooks.installed} of {len(scope)} episodes")
    return figures


def _child(*args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "bench.restore_memory", *args],
        env=child_env(),
        check=True,
        capture_output=True,
        text=True,
    )
    figures: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def measure(
    workdir: Path, *, size_mb: float, state_bytes: int = STATE_BYTES, traced: bool = True
) -> dict[str, Any]:
    """Make a checkpoint of ``size_mb`` MB, then restore it (RSS; tracemalloc if ``traced``)."""
    checkpoint_dir = workdir / f"restore-{size_mb:g}mb-{state_bytes}"
    made = _child("make", str(checkpoint_dir), str(size_mb), "--state-bytes", str(state_bytes))
    untraced = _child("restore", str(checkpoint_dir))
    figures = {**made, **untraced, "tracemalloc_mib": float("nan")}
    if traced:
        figures["tracemalloc_mib"] = _child("restore", str(checkpoint_dir), "--traced")[
            "tracemalloc_mib"
        ]
    return figures


def main(argv: list[str] | None = None) -> int:
    import logging

    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    parser = argparse.ArgumentParser(prog="python -m bench.restore_memory")
    parser.add_argument("step", choices=("make", "restore"))
    parser.add_argument("checkpoint_dir", type=Path)
    parser.add_argument("size_mb", type=float, nargs="?", default=20.0)
    parser.add_argument("--traced", action="store_true")
    parser.add_argument("--state-bytes", type=int, default=STATE_BYTES)
    args = parser.parse_args(argv)
    if args.step == "make":
        figures = asyncio.run(_make(args.checkpoint_dir, args.size_mb, args.state_bytes))
    else:
        figures = asyncio.run(_restore(args.checkpoint_dir, args.traced))
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
