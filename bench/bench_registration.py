"""Registering many models: ``bind(table).new`` (O(1) each) vs. ``Machine.add_model``.

``transitions.Machine.add_model`` checks ``model not in self.models`` (a list
scan) for every model, so registering n models one by one costs O(n^2). The
binding keeps each model's state on a tiny ``MachineState`` and never registers
it, so the same work is linear. Both sides register n models and fire
``discover`` on each; the growth ratio time(n) / time(n/10) is about 10 for
linear and about 100 for quadratic work.

    python -m bench.bench_registration [--n 10000] [--repeat 3] [--quick]

Timings are printed, never asserted.
"""

from __future__ import annotations

import argparse
import gc
import logging
import time
from collections.abc import Callable

import structlog
from transitions import Machine

from envckpt.machines.binding import bind
from envckpt.machines.tables import INSTANCE_LIFECYCLE


class _Model:
    """A plain model, as a ``transitions`` user would register it."""


def register_bound(n: int) -> None:
    """n models through the shared compiled machine, each fired once."""
    lifecycle = bind(INSTANCE_LIFECYCLE)
    for i in range(n):
        lifecycle.fire(lifecycle.new(f"instance-{i}"), "discover")


def register_add_model(n: int) -> None:
    """n models added one by one to one ``transitions.Machine``, each fired once."""
    table = INSTANCE_LIFECYCLE
    machine = Machine(
        model=None,
        states=list(table.states),
        initial=table.initial,
        auto_transitions=False,
    )
    for row in table.rows:
        machine.add_transition(row.trigger, list(row.sources), row.dest)
    for _ in range(n):
        model = _Model()
        machine.add_model(model)
        model.discover()  # type: ignore[attr-defined]


def best_time(work: Callable[[int], None], n: int, repeat: int) -> float:
    """The fastest of ``repeat`` runs, in seconds, with the cyclic GC paused (as timeit does)."""
    best = float("inf")
    for _ in range(repeat):
        gc.collect()
        gc.disable()
        try:
            start = time.perf_counter()
            work(n)
            best = min(best, time.perf_counter() - start)
        finally:
            gc.enable()
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000, help="largest model count")
    parser.add_argument("--repeat", type=int, default=3, help="runs per size; the best counts")
    parser.add_argument("--quick", action="store_true", help="n=5000, one run per size")
    args = parser.parse_args(argv)
    n, repeat = (5_000, 1) if args.quick else (args.n, args.repeat)
    sizes = sorted({max(1, n // 10), max(1, n // 2), n})

    # The binding logs every transition; drop those events so both sides do the
    # same work, and give the caller's structlog configuration back afterwards.
    saved = structlog.get_config()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    try:
        results = {
            name: {size: best_time(work, size, repeat) for size in sizes}
            for name, work in (
                ("bind(table).new + fire", register_bound),
                ("Machine.add_model + fire", register_add_model),
            )
        }
    finally:
        structlog.configure(**saved)

    print(f"{'models':>8}  " + "  ".join(f"{name:>26}" for name in results))
    for size in sizes:
        print(f"{size:>8}  " + "  ".join(f"{times[size]:>25.4f}s" for times in results.values()))
    small, large = sizes[0], sizes[-1]
    print(f"growth time({large})/time({small}), linear ~{large // small}:")
    for name, times in results.items():
        print(f"  {name:<26} {times[large] / times[small]:6.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
