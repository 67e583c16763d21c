"""Run every ``bench/bench_*.py`` module's ``main``, quick settings by default.

    python -m bench                  # every bench, --quick where the bench accepts it
    python -m bench --full           # every bench with its own defaults
    python -m bench registration     # only benches whose name contains a word

Benches print timings; nothing here asserts on them.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import time
from pathlib import Path


def discover() -> list[str]:
    """Module names of the benches beside this file, sorted."""
    return sorted(path.stem for path in Path(__file__).parent.glob("bench_*.py"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="each bench's own defaults")
    parser.add_argument("only", nargs="*", help="run only benches whose name contains one")
    args = parser.parse_args(argv)

    status = 0
    for name in discover():
        if args.only and not any(word in name for word in args.only):
            continue
        module = importlib.import_module(f"bench.{name}")
        # A bench opts into quick settings by declaring a --quick option.
        quick = not args.full and "--quick" in inspect.getsource(module)
        bench_argv = ["--quick"] if quick else []
        print(f"== {name} {' '.join(bench_argv)}".rstrip(), flush=True)
        start = time.perf_counter()
        code = module.main(bench_argv)
        print(f"== {name}: done in {time.perf_counter() - start:.1f}s\n", flush=True)
        status = status or int(code or 0)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
