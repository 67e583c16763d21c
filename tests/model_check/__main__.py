"""``python -m model_check [--full | --tiny | --full-unbounded] [--max-states N]``.

Run with ``tests`` on the path (``PYTHONPATH=tests``).

Prints progress to stderr, every violation with its shortest trace, then
the figures, ``states explored: N, violations: V`` and, as the last line,
``oracle violations: O`` (divergences from the reference model, ``oracle``).
Exits 1 if any invariant was violated.
"""

from __future__ import annotations

import argparse
import sys
import time

from model_check.config import BOUNDED, FULL, FULL_UNBOUNDED, TINY
from model_check.explore import Result, explore


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m model_check", description=__doc__)
    size = parser.add_mutually_exclusive_group()
    size.add_argument(
        "--full", action="store_true", help="the larger configuration (tens of minutes)"
    )
    size.add_argument(
        "--full-unbounded",
        action="store_true",
        help="full, with the discovery interleaved and time passing anywhere (hours or more)",
    )
    size.add_argument("--tiny", action="store_true", help="one rollout, one fault kind (seconds)")
    parser.add_argument("--max-states", type=int, default=None, help="stop after N states")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
    args = parser.parse_args(argv)
    config = BOUNDED
    for flag, chosen in (("full", FULL), ("full_unbounded", FULL_UNBOUNDED), ("tiny", TINY)):
        if getattr(args, flag):
            config = chosen
    if args.max_states is not None:
        config = config.but(max_states=args.max_states)
    last = [time.monotonic()]

    def progress(result: Result) -> None:
        if args.quiet or time.monotonic() - last[0] < 5:
            return
        last[0] = time.monotonic()
        print(
            f"  ... {result.states} states, {result.transitions} transitions, depth {result.depth}",
            file=sys.stderr,
            flush=True,
        )

    result = explore(config, progress=progress)
    print(result.report())
    return 1 if result.findings else 0


if __name__ == "__main__":
    raise SystemExit(main())
