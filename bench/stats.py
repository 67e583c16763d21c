"""Interleaved runs, medians and spread: how every figure in ``python -m bench`` is taken.

Compared variants run in rounds, one run of each per round, in an order that
rotates from round to round, so drift and a noisy neighbour hit every variant
alike; the first round is a warm-up and is dropped::

    runs = await interleave_async({"envckpt": one_cycle, "floor": floor_cycle}, rounds=5)
    ratio = Ratio.of(runs["envckpt"], runs["floor"])
    print(ratio.describe())        # median of per-round ratios [min-max], n=5

A ratio is the median of the per-round ratios (paired, so a slow round slows
both sides of it); its spread is their min and max.
"""

from __future__ import annotations

import statistics
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

WARMUP_ROUNDS = 1


def _orders(names: Sequence[str], rounds: int) -> list[list[str]]:
    count = len(names)
    return [[names[(start + i) % count] for i in range(count)] for start in range(rounds)]


def interleave(
    variants: Mapping[str, Callable[[], float]], *, rounds: int, warmup: int = WARMUP_ROUNDS
) -> dict[str, list[float]]:
    """Run each variant once per round, rotating the order; drop the warm-up rounds."""
    names = list(variants)
    runs: dict[str, list[float]] = {name: [] for name in names}
    for index, order in enumerate(_orders(names, warmup + rounds)):
        for name in order:
            value = variants[name]()
            if index >= warmup:
                runs[name].append(value)
    return runs


async def interleave_async(
    variants: Mapping[str, Callable[[], Awaitable[float]]],
    *,
    rounds: int,
    warmup: int = WARMUP_ROUNDS,
    between: Callable[[], Awaitable[None]] | None = None,
) -> dict[str, list[float]]:
    """``interleave`` for coroutines; ``between`` runs (untimed) before every run."""
    names = list(variants)
    runs: dict[str, list[float]] = {name: [] for name in names}
    for index, order in enumerate(_orders(names, warmup + rounds)):
        for name in order:
            if between is not None:
                await between()
            value = await variants[name]()
            if index >= warmup:
                runs[name].append(value)
    return runs


@dataclass(frozen=True, slots=True)
class Summary:
    """Median, min and max of one variant's runs."""

    median: float
    low: float
    high: float
    count: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Summary:
        return cls(statistics.median(values), min(values), max(values), len(values))

    def describe(self, *, scale: float = 1.0, unit: str = "") -> str:
        return (
            f"{self.median * scale:.4g}{unit} "
            f"[{self.low * scale:.4g}-{self.high * scale:.4g}] n={self.count}"
        )


@dataclass(frozen=True, slots=True)
class Ratio:
    """The median of per-round ratios of two paired series, with their spread."""

    value: float
    low: float
    high: float
    count: int

    @classmethod
    def of(cls, numerator: Sequence[float], denominator: Sequence[float]) -> Ratio:
        paired = [a / b for a, b in zip(numerator, denominator, strict=True)]
        return cls(statistics.median(paired), min(paired), max(paired), len(paired))

    def describe(self) -> str:
        return f"{self.value:.3f} [{self.low:.3f}-{self.high:.3f}] n={self.count}"
