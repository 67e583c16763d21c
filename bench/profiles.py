"""Where the time goes: one benchmark workload under cProfile, summarised by package.

    python -m bench.profiles coordinator [--instances 32] [--per-process 1] [--cycles 10]
    python -m bench.profiles server|floor-server|participant [--cycles 10]
    python -m bench.profiles store|restore|logging|scale [--top 25]

* coordinator: this process driving N Gym instances (envckpt server
  processes) through snapshots with envckpt's ``Coordinator``;
* server / floor-server: one envckpt (or floor) server process (three
  participants, 100 x 1 KB each) through snapshots driven by the raw client,
  profiled inside that process (the commit's write runs inline there, so
  cProfile sees it);
* participant: one envckpt participant core committing 100 parked states
  (prepare, commit, resume) in process, no HTTP;
* store: ``write_checkpoint`` of 16 MB of records;
* restore: ``ParticipantCore.restore`` of a 20 MB checkpoint (time; for
  memory see ``bench/restore_memory.py``);
* logging: the in-process engine cycle with transition logging on at INFO;
* scale: building and discovering 20,000 instances.

Prints the functions with the most own time, and own time per top-level
package (``aiohttp``, ``json``, ``envckpt``, ``asyncio``...). Profiling
slows Python code more than C code, so shares are indicative. Own time is
this process's CPU time (``time.process_time``), so on a shared machine
the time the process waits for a core is not charged to whatever ran last;
``--wall`` profiles wall time instead. The coordinator target also prints
its CPU per control call unprofiled and the collector's share of it, where
growth with the instance count shows first.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import io
import logging
import pstats
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import structlog

# Servers refuse a token under 16 characters.
TOKEN = "bench-token-profiles"


def _package(filename: str) -> str:
    if filename.startswith("~") or filename.startswith("<"):
        return "builtins (C)"
    parts = Path(filename).parts
    for marker in ("site-packages", "envckpt", "bench"):
        if marker in parts:
            index = parts.index(marker)
            if marker == "site-packages":
                return parts[index + 1].removesuffix(".py")
            if marker == "envckpt" and index + 1 < len(parts):
                return "envckpt." + parts[index + 1].removesuffix(".py")
            return marker
    return Path(filename).parent.name + " (stdlib)"


def report(profile: cProfile.Profile | pstats.Stats, *, top: int) -> None:
    stats = profile if isinstance(profile, pstats.Stats) else pstats.Stats(profile)
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    total = sum(entry[2] for entry in raw.values()) or 1.0
    by_package: dict[str, float] = defaultdict(float)
    for (filename, _, _), entry in raw.items():
        by_package[_package(filename)] += entry[2]
    print(f"own time by package (of {total:.2f} s profiled):")
    for name, seconds in sorted(by_package.items(), key=lambda item: -item[1])[:15]:
        print(f"  {seconds / total:6.1%}  {name}")
    out = io.StringIO()
    stats.stream = out  # type: ignore[attr-defined]
    stats.sort_stats("tottime").print_stats(top)
    print(out.getvalue())


class _CollectorTime:
    """CPU seconds spent in the garbage collector per generation, while installed."""

    def __init__(self) -> None:
        self.seconds = [0.0, 0.0, 0.0]
        self.counts = [0, 0, 0]
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.process_time()
        else:
            self.seconds[info["generation"]] += time.process_time() - self._started
            self.counts[info["generation"]] += 1

    def describe(self) -> str:
        return ", ".join(
            f"gen{g} {n} x, {s * 1000:.0f} ms"
            for g, (n, s) in enumerate(zip(self.counts, self.seconds, strict=True))
        )


async def _coordinator(
    instances: int, cycles: int, workdir: Path, profile: cProfile.Profile, *, per_process: int
) -> None:
    from bench import pause
    from bench.fleet import Fleet

    root = workdir / "checkpoints"
    root.mkdir()
    with (
        Fleet(
            "envckpt",
            count=instances,
            workdir=workdir,
            token=TOKEN,
            checkpoint_root=root,
            per_process=per_process,
        ) as envckpt,
        Fleet("floor", count=1, workdir=workdir, token=TOKEN, checkpoint_root=root) as floor,
    ):
        driver = pause._Driver(envckpt, floor, count=instances, root=root)
        await driver.start()
        await driver.envckpt_run()
        gc.collect()
        gc.freeze()  # as bench/pause.py does: what startup built is long-lived
        # Unprofiled first: CPU per control call, and the collector's part of it.
        collector = _CollectorTime()
        gc.callbacks.append(collector)
        spent = 0.0
        for _ in range(cycles):
            await driver.clean()
            before = time.process_time()
            await driver.envckpt_run()
            spent += time.process_time() - before
        gc.callbacks.remove(collector)
        calls = cycles * instances * pause.CALLS_PER_INSTANCE
        print(
            f"unprofiled: {spent / calls * 1e6:.0f} us CPU per control call over {calls} calls; "
            f"collector {collector.describe()}"
        )
        started = time.perf_counter()
        for _ in range(cycles):
            await driver.clean()
            profile.enable()
            await driver.envckpt_run()
            profile.disable()
        print(f"{cycles} cycles in {time.perf_counter() - started:.2f} s (cleanup included)")
        await driver.aclose()


async def _server(workdir: Path, cycles: int, variant: str) -> pstats.Stats:
    from bench import pause
    from bench.fleet import Fleet

    root = workdir / "checkpoints"
    root.mkdir()
    profiles = workdir / "profiles"
    profiles.mkdir()
    # Both variants alike but for what serves them.
    fleet = {
        "count": 1,
        "workdir": workdir,
        "token": TOKEN,
        "checkpoint_root": root,
        "profile_dir": profiles,
    }
    with Fleet("envckpt", **fleet) as envckpt, Fleet("floor", **fleet) as floor:
        driver = pause._Driver(envckpt, floor, count=1, root=root)
        await driver.start()
        clients = driver.raw_envckpt if variant == "envckpt" else driver.raw_floor
        for _ in range(cycles):
            await driver.clean()
            await driver.raw_run(clients)
        await driver.aclose()
    return pstats.Stats(str(profiles / f"{variant}-0.prof"))


async def _participant(profile: cProfile.Profile, workdir: Path, cycles: int) -> None:
    from bench.envckpt_app import envckpt_core
    from bench.states import parked_states
    from envckpt.episodes import EnvironmentEpisode

    states = parked_states(100, state_bytes=1000)
    core = envckpt_core(server_name="agent", kind="agent", states=states)
    scope = [EnvironmentEpisode(rollout_id, 0) for rollout_id in states]
    for index in range(cycles):
        cid, deadline = f"p-{index}", time.time() + 60
        profile.enable()
        await core.prepare(cid, deadline_ts=deadline)
        await core.commit(
            cid, deadline_ts=deadline, checkpoint_dir=str(workdir / cid), episode_ids=scope
        )
        await core.resume(cid, deadline_ts=deadline)
        profile.disable()


async def _inline(function: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    return function(*args, **kwargs)


def _run(target: str, args: argparse.Namespace, workdir: Path) -> cProfile.Profile | pstats.Stats:
    profile = cProfile.Profile() if args.wall else cProfile.Profile(time.process_time)
    # cProfile sees one thread: run the work envckpt hands to threads inline.
    asyncio.to_thread = _inline  # type: ignore[assignment]
    if target in ("server", "floor-server"):
        variant = "envckpt" if target == "server" else "floor"
        return asyncio.run(_server(workdir, args.cycles, variant))
    if target == "coordinator":
        asyncio.run(
            _coordinator(
                args.instances, args.cycles, workdir, profile, per_process=args.per_process
            )
        )
    elif target == "participant":
        asyncio.run(_participant(profile, workdir, args.cycles))
    elif target == "store":
        from bench import store_write

        records = store_write.records_of(16)
        profile.runcall(store_write.store_write, workdir / "out", records)
    elif target == "restore":
        from bench import restore_memory

        checkpoint = workdir / "restore"
        restore_memory.main(["make", str(checkpoint), "20"])
        profile.runcall(asyncio.run, restore_memory._restore(checkpoint, False))
    elif target == "logging":
        from bench import logging_cost

        profile.runcall(logging_cost.run, workdir, rounds=args.cycles, cycles=5)
    elif target == "scale":
        from bench import scale

        profile.runcall(scale.run, 20_000)
    return profile


TARGETS = (
    "coordinator",
    "server",
    "floor-server",
    "participant",
    "store",
    "restore",
    "logging",
    "scale",
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.profiles")
    parser.add_argument("target", choices=TARGETS)
    parser.add_argument("--instances", type=int, default=32)
    parser.add_argument("--per-process", type=int, default=1, help="instances per server")
    parser.add_argument("--cycles", type=int, default=10)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--wall", action="store_true", help="profile wall time, not CPU time")
    args = parser.parse_args(argv)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    runner: Callable[[str, argparse.Namespace, Path], cProfile.Profile | pstats.Stats] = _run
    with tempfile.TemporaryDirectory(prefix="envckpt-profile-") as tmp:
        profile = runner(args.target, args, Path(tmp))
    report(profile, top=args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
