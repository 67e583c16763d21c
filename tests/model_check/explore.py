"""Breadth-first search over every interleaving, by replaying action paths.

A world's tasks, files and clock cannot be copied, so a state is kept as the
path of actions that reaches it: expanding it rebuilds a fresh world, replays
the path and tries one enabled action (one replay per action). States are
hashed (``digest``) so each is expanded once; breadth-first order makes the
first path found to any state a shortest one, so a violation's trace is as
short as any that reaches it.

    result = explore(BOUNDED)
    print(result.report())
    # model check bounded: 4062 states, 12002 transitions, depth 56, 133.6 s
    # states explored: 4062, violations: 0
    # oracle violations: 0
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import os
import sys
import tempfile
import time
import warnings
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from model_check.config import Config
from model_check.digest import digest, hashed
from model_check.invariants import check
from model_check.world import World, deterministic


@dataclass
class Finding:
    """A violated invariant, and the shortest action path that reaches it."""

    problems: list[str]
    trace: tuple[str, ...]
    final_state: str = ""

    def report(self) -> str:
        lines = [f"VIOLATION after {len(self.trace)} actions:"]
        lines += [f"  ! {problem}" for problem in self.problems]
        lines.append("  shortest trace:")
        lines += [f"  {number:3d}. {action}" for number, action in enumerate(self.trace, 1)]
        if self.final_state:
            lines.append("  state reached:")
            lines += [f"    {line}" for line in self.final_state.splitlines()]
        return "\n".join(lines)


@dataclass
class Result:
    config: Config
    states: int = 0
    transitions: int = 0
    depth: int = 0
    seconds: float = 0.0
    truncated: bool = False
    findings: list[Finding] = field(default_factory=list)

    @property
    def violations(self) -> int:
        return len(self.findings)

    @property
    def oracle_violations(self) -> int:
        """Findings where the engine diverged from the reference model (``oracle``)."""
        return sum(any(p.startswith("oracle:") for p in f.problems) for f in self.findings)

    def summary(self) -> str:
        return f"states explored: {self.states}, violations: {self.violations}"

    def report(self) -> str:
        lines = [finding.report() for finding in self.findings]
        lines.append(
            f"model check {self.config.name}: {self.states} states, {self.transitions} "
            f"transitions, depth {self.depth}, {self.seconds:.1f} s"
            + (" (stopped at max_states)" if self.truncated else "")
        )
        lines.append(self.summary())
        lines.append(f"oracle violations: {self.oracle_violations}")
        return "\n".join(lines)


class _Worlds:
    """Fresh worlds, each in its own directory under one scratch root."""

    def __init__(self, config: Config, scratch: Path) -> None:
        self.config = config
        self.scratch = scratch
        self.current: World | None = None
        self._numbers = itertools.count()

    def replay(self, path: tuple[str, ...]) -> World:
        if self.current is not None:
            self.current.close()
        world = World(self.config, self.scratch / f"w{next(self._numbers)}")
        world.root.mkdir(parents=True)
        self.current = world
        world.boot()
        for action in path:
            world.apply(action)
        return world

    def close(self) -> None:
        if self.current is not None:
            self.current.close()
            self.current = None


def explore(
    config: Config,
    *,
    stop_at_first: bool = False,
    progress: Callable[[Result], None] | None = None,
) -> Result:
    """Every state reachable in ``config``, each checked; the shortest trace per violation."""
    result = Result(config)
    started = time.monotonic()
    with _scratch() as scratch, _quiet_logs():
        worlds = _Worlds(config, scratch)
        with deterministic(lambda: worlds.current):
            try:
                _search(worlds, result, stop_at_first, progress)
            finally:
                worlds.close()
    result.seconds = time.monotonic() - started
    return result


def _search(
    worlds: _Worlds,
    result: Result,
    stop_at_first: bool,
    progress: Callable[[Result], None] | None,
) -> None:
    config = result.config
    world = worlds.replay(())
    seen = {digest(world)}
    result.states = 1
    problems = check(world)
    if problems:
        result.findings.append(Finding(problems, (), _render(world)))
        return
    queue: deque[tuple[str, ...]] = deque([()])
    # A crash's successor depends only on disk, model and budgets: run each once.
    crashes: dict[tuple[str, bytes], bytes] = {}
    while queue:
        path = queue.popleft()
        world = worlds.replay(path)
        actions = world.actions()
        crash_key = hashed(world, world.crash_key())
        for number, action in enumerate(actions):
            if action.startswith("crash") and (action, crash_key) in crashes:
                result.transitions += 1
                continue
            if number:
                world = worlds.replay(path)
            world.apply(action)
            result.transitions += 1
            key = digest(world)
            if action.startswith("crash"):
                crashes[(action, crash_key)] = key
            if key in seen:
                continue
            seen.add(key)
            result.states += 1
            trace = (*path, action)
            result.depth = max(result.depth, len(trace))
            problems = check(world)
            if problems:
                result.findings.append(Finding(problems, trace, _render(world)))
                if stop_at_first:
                    return
                continue
            queue.append(trace)
            if config.max_states is not None and result.states >= config.max_states:
                result.truncated = True
                return
        if progress is not None:
            progress(result)


def _render(world: World) -> str:
    gen = world.gen
    lines = [f"generation {gen.number} (crashes {world.crashes}, faults {world.faults_used})"]
    for iid, adapter in gen.adapters.items():
        phases = ", ".join(f"{name} {core.phase}" for name, core in gen.cores[iid].items())
        lines.append(f"{iid}: {adapter.state}; {phases}")
    lines.append("waiting: " + ", ".join(sorted(i.key for i in gen.gates.items)))
    lines += [f"note: {note}" for note in world.notes]
    return "\n".join(lines)


@contextlib.contextmanager
def _scratch() -> Iterator[Path]:
    # tmpfs when there is one: every commit fsyncs.
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    with tempfile.TemporaryDirectory(prefix="envckpt-model-check-", dir=base) as scratch:
        yield Path(scratch)


@contextlib.contextmanager
def _quiet_logs() -> Iterator[None]:
    """Drop every structlog event while exploring (millions of transitions)."""
    # An abandoned generation's coroutines are closed when collected, on a
    # closed loop, and those it built but never started are "never awaited":
    # their complaints are expected and say nothing.
    unraisable = sys.unraisablehook
    sys.unraisablehook = lambda _: None
    configured = structlog.is_configured()
    previous = structlog.get_config()
    structlog.configure(processors=[_drop], cache_logger_on_first_use=False)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="coroutine .* was never awaited")
        try:
            yield
        finally:
            if configured:
                structlog.configure(**previous)
            else:
                structlog.reset_defaults()
            gc.collect()  # the abandoned coroutines go now, while their noise is dropped
            sys.unraisablehook = unraisable


def _drop(_: object, __: str, ___: object) -> object:
    raise structlog.DropEvent
