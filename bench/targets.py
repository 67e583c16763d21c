"""Issues 24's and 26's targets for the ``--json`` keys: each printed met or MISSED, never asserted.

for line in verdicts(figures):
    print(line)      # "pause_over_floor_32  1.41 <= 1.5  met"
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterator, Mapping

# key -> (comparison, bound); "<=" means the figure must not exceed the bound.
TARGETS: dict[str, tuple[str, float]] = {
    "pause_over_floor_1": ("<=", 1.5),
    "pause_over_floor_8": ("<=", 1.5),
    "pause_over_floor_32": ("<=", 1.5),
    "pause_over_floor_256": ("<=", 1.5),
    "pause_over_floor_1000": ("<=", 1.5),
    "pause_over_floor_large_state_8": ("<=", 1.5),
    "trainer_path_over_floor_32": ("<=", 1.6),
    "coordinator_cpu_us_per_call_32": ("<=", 200.0),
    "coordinator_cpu_over_raw_32": ("<=", 1.5),
    "store_over_raw": (">=", 0.8),
    "restore_peak_mib_200mb": ("<=", 32.0),
    "register_100k_seconds": ("<", 1.0),
    "discover_100k_seconds": ("<", 10.0),
    "logging_overhead": ("<=", 1.06),
}
_COMPARE: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le,
    "<": operator.lt,
    ">=": operator.ge,
}


def verdicts(figures: Mapping[str, float]) -> Iterator[str]:
    """One line per target: the figure, its bound, and met, MISSED or not measured."""
    for key, (comparison, bound) in TARGETS.items():
        if key not in figures:
            yield f"  {key:<32} {'':>8} {comparison} {bound:g}  not measured"
            continue
        value = figures[key]
        verdict = "met" if _COMPARE[comparison](value, bound) else "MISSED"
        yield f"  {key:<32} {value:8.4g} {comparison} {bound:g}  {verdict}"
