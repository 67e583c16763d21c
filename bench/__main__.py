"""Every benchmark figure of envckpt, side by side in one run: ``python -m bench``.

From a checkout (no install needed beyond the ``http`` extra)::

    python -m bench                      # full settings (more rounds, longer than --quick)
    python -m bench --quick              # fewer rounds (2.5-4 minutes here, load included)
    python -m bench --smoke              # tiny sizes: proves the harness runs (the test suite)
    python -m bench --quick --json out.json
    python -m bench --only pause,store   # some figure groups (pause store restore logging scale)

Every figure compares variants run interleaved (rotating order, first round
dropped) and prints median [min-max] n=runs; ratios are medians of per-round
ratios. Nothing asserts on speed. ``--json`` writes exactly the keys of
``KEYS``. The pause figures start one server process per Gym instance and
variant (``bench/server_process.py``); this process is the coordinator.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import platform
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import structlog

from bench.stats import Ratio, Summary
from bench.targets import verdicts

KEYS = (
    "pause_over_floor_1",
    "pause_over_floor_8",
    "pause_over_floor_32",
    "pause_over_floor_256",
    "pause_over_floor_1000",
    "pause_over_floor_large_state_8",
    "trainer_path_over_floor_32",
    "coordinator_over_raw_client",
    "coordinator_cpu_us_per_call_32",
    "coordinator_cpu_over_raw_32",
    "store_over_raw",
    "restore_peak_mib_20mb",
    "restore_peak_mib_200mb",
    "logging_overhead",
    "logging_floor_overhead",
    "register_100k_seconds",
    "discover_100k_seconds",
)
GROUPS = ("pause", "store", "restore", "logging", "scale")
TOKEN = "bench-token-5b1f0c"


@dataclass(frozen=True, slots=True)
class Settings:
    """Sizes and rounds of one mode; ``counts`` maps each key's nominal count to the run's."""

    fleet: int
    counts: tuple[tuple[int, int], ...]
    rounds: tuple[int, ...]
    # The large deployments: (nominal, instances, rounds), ``per_process`` to a process.
    packed: tuple[tuple[int, int, int], ...]
    per_process: int
    large_count: int
    large_state_bytes: int
    large_rounds: int
    store_mb: float
    store_rounds: int
    restore_mb: tuple[tuple[int, float], ...]
    logging_rounds: int
    logging_cycles: int
    # The ``absent`` variant (what a filtered call still costs) beside on and off.
    logging_absent: bool
    scale: int


MODES = {
    "smoke": Settings(
        fleet=2,
        counts=((1, 1), (8, 2), (32, 2)),
        rounds=(1, 1, 1),
        packed=((256, 4, 1), (1000, 6, 1)),
        per_process=3,
        large_count=2,
        large_state_bytes=10_000,
        large_rounds=1,
        store_mb=1,
        store_rounds=1,
        restore_mb=((20, 1), (200, 2)),
        logging_rounds=1,
        logging_cycles=1,
        logging_absent=True,
        scale=1000,
    ),
    "quick": Settings(
        fleet=32,
        counts=((1, 1), (8, 8), (32, 32)),
        rounds=(40, 40, 24),
        packed=((256, 256, 3), (1000, 1000, 2)),
        per_process=32,
        large_count=8,
        large_state_bytes=100_000,
        large_rounds=4,
        store_mb=16,
        store_rounds=5,
        restore_mb=((20, 20), (200, 200)),
        logging_rounds=1600,
        logging_cycles=3,
        logging_absent=False,
        scale=100_000,
    ),
}
# Full: the quick sizes, with more rounds, a larger store write and the
# ``absent`` logging variant.
MODES["full"] = replace(
    MODES["quick"],
    rounds=(60, 60, 36),
    packed=((256, 256, 5), (1000, 1000, 3)),
    large_rounds=8,
    store_mb=64,
    store_rounds=9,
    logging_rounds=2400,
    logging_absent=True,
)
EPISODES = 100
# 200 MB in 233,000 records (issue 24's realistic rollout store).
RESTORE_STATE_BYTES = 858


def _load() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.1f}/{five:.1f} (1/5 min) on {os.cpu_count()} cores"


def _section(title: str) -> None:
    print(f"\n== {title}   [{_load()}]", flush=True)


def _line(name: str, runs: list[float], *, scale: float = 1000.0, unit: str = " ms") -> None:
    print(f"  {name:<16} {Summary.of(runs).describe(scale=scale, unit=unit)}", flush=True)


def _cpu_lines(cpu: dict[str, list[float]]) -> None:
    """CPU per snapshot: the coordinator's process, then it plus the servers ("all")."""
    for name, values in cpu.items():
        label = f"{name.removesuffix(' total')} {'all CPU' if name.endswith('total') else 'CPU'}"
        _line(label, values)


def _pause(settings: Settings, workdir: Path, figures: dict[str, float]) -> None:
    from bench import pause
    from bench.fleet import Fleet

    root = workdir / "checkpoints"
    root.mkdir()
    _section(f"snapshot pause: {settings.fleet} server processes per variant, starting")
    started = time.perf_counter()
    with (
        Fleet(
            "envckpt", count=settings.fleet, workdir=workdir, token=TOKEN, checkpoint_root=root
        ) as envckpt,
        Fleet(
            "floor", count=settings.fleet, workdir=workdir, token=TOKEN, checkpoint_root=root
        ) as floor,
    ):
        print(f"  started in {time.perf_counter() - started:.1f} s", flush=True)
        for (nominal, count), rounds in zip(settings.counts, settings.rounds, strict=True):
            _section(f"snapshot pause, {count} instance(s) x 3 participants, {EPISODES} x 1 KB")
            # The trainer's path beside the bare coordinator where the target is.
            busiest = nominal == settings.counts[-1][0]
            runs, cpu = asyncio.run(
                pause.measure(
                    envckpt,
                    floor,
                    count=count,
                    rounds=rounds,
                    root=root,
                    with_trainer=busiest,
                    check_bytes=count == 1,
                )
            )
            for name, values in runs.items():
                _line(name, values)
            _cpu_lines(cpu)
            ratio = Ratio.of(runs["envckpt"], runs["floor"])
            coordinator = Ratio.of(runs["envckpt"], runs["raw->envckpt"])
            participants = Ratio.of(runs["raw->envckpt"], runs["floor"])
            all_cpu = Ratio.of(cpu["envckpt total"], cpu["floor total"])
            coordinator_cpu = Ratio.of(cpu["envckpt"], cpu["raw->envckpt"])
            print(f"  pause/floor      {ratio.describe()}")
            print(f"   (all CPU)       {all_cpu.describe()}")
            # The two halves of pause/floor: envckpt's participants under the
            # same raw client, and envckpt's coordinator over the raw client.
            print(f"  participants     {participants.describe()}   (raw->envckpt / floor)")
            print(f"  coordinator/raw  {coordinator.describe()}")
            print(f"   (its CPU)       {coordinator_cpu.describe()}", flush=True)
            figures[f"pause_over_floor_{nominal}"] = ratio.value
            per_call = Summary.of(cpu["envckpt"]).median / (count * pause.CALLS_PER_INSTANCE) * 1e6
            print(f"  coordinator CPU  {per_call:.0f} us per control round trip (median)")
            if busiest:
                trainer = Ratio.of(runs["trainer"], runs["floor"])
                over_bare = Ratio.of(runs["trainer"], runs["envckpt"])
                trainer_cpu = Ratio.of(cpu["trainer"], cpu["envckpt"])
                print(f"  trainer/floor    {trainer.describe()}")
                print(f"  trainer/envckpt  {over_bare.describe()}   (the adapter and facade)")
                print(f"   (its CPU)       {trainer_cpu.describe()}", flush=True)
                figures[f"trainer_path_over_floor_{nominal}"] = trainer.value
                # Where the coordinator is busiest: the figure the target is about.
                figures["coordinator_over_raw_client"] = coordinator.value
                figures[f"coordinator_cpu_us_per_call_{nominal}"] = per_call
                figures[f"coordinator_cpu_over_raw_{nominal}"] = coordinator_cpu.value
        count, state_bytes = settings.large_count, settings.large_state_bytes
        _section(f"snapshot pause, {count} instances x 3, {EPISODES} x {state_bytes // 1000} KB")
        for fleet in (envckpt, floor):
            fleet.set_states(episodes=EPISODES, state_bytes=state_bytes, instances=count)
        runs, cpu = asyncio.run(
            pause.measure(
                envckpt,
                floor,
                count=count,
                rounds=settings.large_rounds,
                root=root,
                with_raw_envckpt=False,
            )
        )
        for name, values in runs.items():
            _line(name, values)
        _cpu_lines(cpu)
        ratio = Ratio.of(runs["envckpt"], runs["floor"])
        all_cpu = Ratio.of(cpu["envckpt total"], cpu["floor total"])
        print(f"  pause/floor      {ratio.describe()}")
        print(f"   (all CPU)       {all_cpu.describe()}", flush=True)
        figures["pause_over_floor_large_state_8"] = ratio.value
    _packed(settings, workdir, root, figures)


def _packed(settings: Settings, workdir: Path, root: Path, figures: dict[str, float]) -> None:
    """The pause at large deployments: ``per_process`` instances packed in each process."""
    from bench import pause
    from bench.fleet import Fleet

    for nominal, count, rounds in settings.packed:
        per = settings.per_process
        _section(f"snapshot pause, {count} instances x 3, {per} instances per server process")
        started = time.perf_counter()
        packed = workdir / f"packed-{nominal}"
        # Both variants alike but for what serves them.
        fleet = {
            "count": count,
            "workdir": packed,
            "token": TOKEN,
            "checkpoint_root": root,
            "per_process": per,
        }
        with Fleet("envckpt", **fleet) as envckpt, Fleet("floor", **fleet) as floor:
            print(f"  started in {time.perf_counter() - started:.1f} s", flush=True)
            runs, cpu = asyncio.run(
                pause.measure(
                    envckpt, floor, count=count, rounds=rounds, root=root, with_raw_envckpt=False
                )
            )
        for name, values in runs.items():
            _line(name, values)
        _cpu_lines(cpu)
        ratio = Ratio.of(runs["envckpt"], runs["floor"])
        per_call = Summary.of(cpu["envckpt"]).median / (count * pause.CALLS_PER_INSTANCE) * 1e6
        print(f"  pause/floor      {ratio.describe()}")
        print(f"   (all CPU)       {Ratio.of(cpu['envckpt total'], cpu['floor total']).describe()}")
        print(f"  coordinator CPU  {per_call:.0f} us per control round trip (median)", flush=True)
        figures[f"pause_over_floor_{nominal}"] = ratio.value


def _store(settings: Settings, workdir: Path, figures: dict[str, float]) -> None:
    from bench import store_write

    _section(f"records write, {settings.store_mb:g} MB: envckpt store vs a streamed orjson writer")
    runs, megabytes = store_write.measure(
        workdir, size_mb=settings.store_mb, rounds=settings.store_rounds
    )
    for name, values in runs.items():
        rate = Summary.of([megabytes / value for value in values])
        print(
            f"  {name:<16} {Summary.of(values).describe(scale=1000, unit=' ms')}   "
            f"{rate.median:.0f} MB/s"
        )
    ratio = Ratio.of(runs["raw"], runs["store"])
    print(f"  store/raw (throughput) {ratio.describe()}")
    strict = Ratio.of(runs["raw, NaN refused"], runs["store"])
    print(f"  store/raw, NaN refused (throughput) {strict.describe()}", flush=True)
    figures["store_over_raw"] = ratio.value


def _restore(settings: Settings, workdir: Path, figures: dict[str, float]) -> None:
    from bench import restore_memory

    _section("ParticipantCore.restore peak memory (fresh process each; hooks keep nothing)")

    def show(result: dict[str, Any], note: str = "") -> None:
        traced = result["tracemalloc_mib"]
        print(
            f"  {result['file_mb']:6.1f} MB file, {result['records']} records: "
            f"peak RSS +{result['rss_mib']:.1f} MiB"
            + ("" if traced != traced else f", tracemalloc peak {traced:.1f} MiB")
            + f", {result['seconds']:.2f} s"
            + ("" if result["peak_reset"] else " (VmHWM could not be reset)")
            + note,
            flush=True,
        )

    # Both keys restore realistic records (200 MB in 233,000 records, as issue
    # 24 sized a real rollout store: about 860 bytes of state each), so what
    # the core keeps per episode shows in the figure.
    results: dict[int, dict[str, Any]] = {}
    for nominal, size_mb in settings.restore_mb:
        result = results[nominal] = restore_memory.measure(
            workdir, size_mb=size_mb, state_bytes=RESTORE_STATE_BYTES
        )
        show(result, f"  ({RESTORE_STATE_BYTES} B states)")
        figures[f"restore_peak_mib_{nominal}mb"] = result["rss_mib"]
    # The largest size again in few large records: what grows with the
    # records' bytes (streaming keeps it flat) apart from what grows per episode.
    (nominal, many_mb) = settings.restore_mb[-1]
    few = restore_memory.measure(
        workdir, size_mb=many_mb, state_bytes=RESTORE_STATE_BYTES * 50, traced=False
    )
    extra = results[nominal]["records"] - few["records"]
    per_episode = (results[nominal]["rss_mib"] - few["rss_mib"]) * 2**20 / max(1, extra)
    show(
        few,
        f"  ({RESTORE_STATE_BYTES * 50 / 1000:g} KB states: the {results[nominal]['records']}"
        f" records above cost about {per_episode:.0f} bytes per episode more)",
    )


def _logging(settings: Settings, workdir: Path, figures: dict[str, float]) -> None:
    from bench import logging_cost

    _section("transition logging: one in-process cycle (3 participants x 100 x 1 KB, tmpfs)")
    runs, wall, events = logging_cost.run(
        workdir,
        rounds=settings.logging_rounds,
        cycles=settings.logging_cycles,
        absent=settings.logging_absent,
    )
    for name, values in runs.items():
        _line(f"{name} CPU", values)
    for name, values in wall.items():
        _line(f"{name} wall", values)
    overhead = Ratio.of(runs["on"], runs["off"])
    floor = Ratio.of(runs["floor"], runs["off"])
    print(f"  on/off (CPU)     {overhead.describe()}   ({events} events per cycle)")
    print(f"  floor/off (CPU)  {floor.describe()}   (the same lines: orjson, write, flush)")
    print(f"  on/floor (CPU)   {Ratio.of(runs['on'], runs['floor']).describe()}")
    print(f"  on/off (wall)    {Ratio.of(wall['on'], wall['off']).describe()}")
    if "absent" in runs:
        filtered = Ratio.of(runs["off"], runs["absent"])
        print(f"  off/absent (CPU) {filtered.describe()}", flush=True)
    else:
        print("  off/absent       measured in full mode (--quick leaves it out)", flush=True)
    figures["logging_overhead"] = overhead.value
    figures["logging_floor_overhead"] = floor.value


def _scale(settings: Settings, workdir: Path, figures: dict[str, float]) -> None:
    from bench import scale

    _section(f"{settings.scale} instances in process: build facade + adapters, then discover")
    bare = scale.run(settings.scale, freeze=False)
    result = scale.run(settings.scale, freeze=True)
    for figures_of, how in ((bare, "no gc.freeze"), (result, "gc.freeze, the guidance")):
        for step in ("register", "discover"):
            print(
                f"  {step:<16} {figures_of[f'{step}_seconds']:.3f} s, "
                f"CPU {figures_of[f'{step}_cpu_seconds']:.3f} s   ({how})",
                flush=True,
            )
    figures["register_100k_seconds"] = result["register_seconds"]
    figures["discover_100k_seconds"] = result["discover_seconds"]
    count = settings.scale // 10
    bound, added = scale.machines(count)
    print(
        f"  {count} lifecycle models made and fired: bind(table).new {bound:.3f} s, "
        f"transitions add_model {added:.3f} s",
        flush=True,
    )


RUNNERS = {
    "pause": _pause,
    "store": _store,
    "restore": _restore,
    "logging": _logging,
    "scale": _scale,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="fewer rounds (under 4 minutes)")
    size.add_argument("--smoke", action="store_true", help="tiny sizes: the harness runs")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    parser.add_argument("--only", default=",".join(GROUPS), help="comma-separated groups")
    parser.add_argument("--dir", type=Path, default=None, help="work directory (default: tmp)")
    args = parser.parse_args(argv)
    groups = [group.strip() for group in args.only.split(",") if group.strip()]
    unknown = sorted(set(groups) - set(GROUPS))
    if unknown:
        parser.error(f"unknown groups {unknown}; choose from {', '.join(GROUPS)}")
    mode = "smoke" if args.smoke else "quick" if args.quick else "full"
    settings = MODES[mode]

    # SIGTERM unwinds like Ctrl-C, so the server processes are stopped too.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    # The coordinator logs nothing on success; keep stray events off the figures.
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    print(
        f"envckpt benchmarks, {mode} mode, Python {platform.python_version()}, "
        f"{platform.machine()}, {_load()}"
    )
    figures: dict[str, float] = {}
    took: dict[str, float] = {}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="envckpt-bench-", dir=args.dir) as tmp:
        for group in groups:
            workdir = Path(tmp) / group
            workdir.mkdir()
            group_started = time.perf_counter()
            RUNNERS[group](settings, workdir, figures)
            took[group] = time.perf_counter() - group_started
    # --quick has a time budget (under 4 minutes here): where it went.
    spent = ", ".join(f"{group} {seconds:.0f} s" for group, seconds in took.items())
    print(f"\n== figures ({mode}, {time.perf_counter() - started:.0f} s: {spent}; {_load()})")
    print("  targets (issues 24 and 26; printed, not asserted):")
    for line in verdicts(figures):
        print(line)
    if args.json is not None:
        missing = [key for key in KEYS if key not in figures]
        if missing:
            print(f"  not measured (groups left out): {', '.join(missing)}", file=sys.stderr)
        output: dict[str, Any] = {key: round(figures[key], 4) for key in KEYS if key in figures}
        args.json.write_text(json.dumps(output, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
