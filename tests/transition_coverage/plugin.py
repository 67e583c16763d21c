"""The pytest plugin that records every transition the suite fires (``tests/conftest.py``).

``BoundMachine.fire`` is wrapped once per session, so recording never
touches logging (tests that capture logs see exactly what they saw before).
Each transition is kept with the test that fired it; when the test ends,
its transitions count as ``http`` if a control call crossed a real HTTP
server during it (``edge.handle`` called from ``envckpt.http`` or
``envckpt.nemo_gym``), else ``in-process``. Transitions of a table a test
built itself (a mutated copy, as the model check's seeded bug) are not
counted. Participant servers that tests
start as processes (``python -m envckpt.sim.server``) write their events to
the file ``ENVCKPT_GYM_LOG`` names; their transitions count as ``http``.

    pytest -p transition_coverage.plugin --transition-coverage=build/transition-coverage.jsonl
    envckpt statecharts --coverage build/transition-coverage.jsonl --machine participant_phases

Under pytest-xdist (``-n 2``, as ``make verify`` runs) each worker writes its
share beside the file (``PATH.gw0``, ...) and the controller merges the shares
and the server processes' log into ``PATH`` when the session ends.

The check that every row was exercised is ``test_rows.py``, which runs last;
it judges only a run given the option in one process (under xdist each worker
sees a share: ``python -m transition_coverage PATH`` judges the merged file).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

from envckpt.machines.binding import BoundMachine, MachineState
from envckpt.machines.tables import ALL_TABLES
from envckpt.participant import edge
from envckpt.statecharts.overlay import CoverageEntry, load_coverage

from transition_coverage.rows import HTTP, IN_PROCESS

CHECK_MARK = "transition_coverage_check"
# Tests of the machinery itself fire every row of every table on purpose
# (tests/machines/test_binding.py), and so may the chart tooling's: they say
# nothing about the engine.
MACHINERY_TESTS = ("tests/machines/", "tests/statecharts/")
_HTTP_CALLERS = ("envckpt.http", "envckpt.nemo_gym")
Key = tuple[str, str, str, str]  # machine, source, trigger, dest


class Recorder:
    """Transitions of the test running now, and the totals of the tests done."""

    def __init__(self) -> None:
        self.totals: Counter[tuple[str, str, str, str, str]] = Counter()
        self.current: Counter[Key] = Counter()
        self.crossed_http = False
        self.tests = 0
        self.http_tests = 0
        self.gym_log: Path | None = None
        # xdist workers' files, merged by the controller (``pytest_sessionfinish``).
        self.shares: list[Path] = []

    def fired(self, machine: str, source: str, trigger: str, dest: str) -> None:
        self.current[(machine, source, trigger, dest)] += 1

    def end_test(self, nodeid: str) -> None:
        if nodeid.startswith(MACHINERY_TESTS):
            self.current.clear()
            return
        via = HTTP if self.crossed_http else IN_PROCESS
        for key, count in self.current.items():
            self.totals[(*key, via)] += count
        self.tests += 1
        self.http_tests += self.crossed_http
        self.current.clear()
        self.crossed_http = False

    def entries(self) -> list[CoverageEntry]:
        found = [CoverageEntry(*key, count=count) for key, count in sorted(self.totals.items())]
        if self.gym_log is not None and self.gym_log.exists():
            # Server processes' logs: every transition there was served over HTTP.
            found += [
                CoverageEntry(e.machine, e.source, e.trigger, e.dest, HTTP, e.count)
                for e in _tolerant_load(self.gym_log)
            ]
        if self.shares:
            found += load_coverage(self.shares)
        return found

    def lines(self) -> Iterator[str]:
        merged: Counter[tuple[str, str, str, str, str]] = Counter()
        for e in self.entries():
            merged[(e.machine, e.source, e.trigger, e.dest, e.via)] += e.count
        for (machine, source, trigger, dest, via), count in sorted(merged.items()):
            yield coverage_line(machine, source, trigger, dest, via, count)


def coverage_line(machine: str, source: str, trigger: str, dest: str, via: str, count: int) -> str:
    """One coverage file line: a transition log line (any instance) with its transport and count."""
    return json.dumps(
        {
            "event": "transition",
            "machine": machine,
            "instance_id": "*",
            "source": source,
            "trigger": trigger,
            "dest": dest,
            "via": via,
            "count": count,
        }
    )


def _tolerant_load(path: Path) -> list[CoverageEntry]:
    # Lines a killed server cut short are skipped, not fatal.
    good = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            json.loads(line)
        except ValueError:
            continue
        good.append(line)
    scratch = path.with_suffix(".clean")
    scratch.write_text("\n".join(good) + "\n", encoding="utf-8")
    try:
        return load_coverage(scratch)
    except ValueError:
        return []
    finally:
        scratch.unlink(missing_ok=True)


RECORDER = Recorder()


def engine_table(table: object) -> bool:
    """Whether ``table`` is one the engine runs on (a test's own mutated copy is not)."""
    return any(table is known for known in ALL_TABLES)


def _wrap_fire(original: Callable[..., Any]) -> Callable[..., Any]:
    def fire(
        self: BoundMachine[Any], model: MachineState[Any], trigger: str, *args: Any, **kwargs: Any
    ) -> Any:
        source = str(model.state)
        record = original(self, model, trigger, *args, **kwargs)
        # A table a test built itself (a seeded bug in the model check) says
        # nothing about the engine's rows: its transitions are not counted.
        if engine_table(self.table):
            RECORDER.fired(self.table.name, source, trigger, str(model.state))
        return record

    fire.__wrapped__ = original  # type: ignore[attr-defined]
    return fire


def _wrap_handle(original: Callable[..., Any]) -> Callable[..., Any]:
    # Not a coroutine itself: it hands back the original's coroutine, so it
    # holds no arguments while the call runs (the edge lets the body go).
    def handle(*args: Any, **kwargs: Any) -> Any:
        caller = sys._getframe(1).f_globals.get("__name__", "")
        if caller.startswith(_HTTP_CALLERS):
            RECORDER.crossed_http = True
        return original(*args, **kwargs)

    handle.__wrapped__ = original  # type: ignore[attr-defined]
    return handle


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--transition-coverage",
        default=None,
        metavar="PATH",
        help="write the transitions the tests fired (JSON lines, per row and transport) to "
        "PATH, and fail the run if a machine row was never exercised",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"{CHECK_MARK}: runs after every other test")
    if not hasattr(BoundMachine.fire, "__wrapped__"):
        BoundMachine.fire = _wrap_fire(BoundMachine.fire)  # type: ignore[method-assign]
    if not hasattr(edge.handle, "__wrapped__"):
        edge.handle = _wrap_handle(edge.handle)  # type: ignore[assignment]
    if "ENVCKPT_GYM_LOG" not in os.environ:
        handle, name = tempfile.mkstemp(prefix="envckpt-gym-events-", suffix=".jsonl")
        os.close(handle)
        RECORDER.gym_log = Path(name)
        os.environ["ENVCKPT_GYM_LOG"] = name


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The coverage check runs last, after every test that fires transitions."""
    items.sort(key=lambda item: item.get_closest_marker(CHECK_MARK) is not None)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, None, None]:
    RECORDER.current.clear()
    RECORDER.crossed_http = False
    yield
    RECORDER.end_test(item.nodeid)


def xdist_worker(config: pytest.Config) -> str | None:
    """This process's xdist worker id (``gw0``, ...), or None outside a worker."""
    workerinput = getattr(config, "workerinput", None)
    return None if workerinput is None else str(workerinput["workerid"])


def _shares(path: Path) -> list[Path]:
    return sorted(path.parent.glob(f"{path.name}.gw*"))


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    # The controller starts before its workers: a share left by an earlier run goes.
    target = session.config.getoption("--transition-coverage")
    if target and xdist_worker(session.config) is None:
        for stale in _shares(Path(target)):
            stale.unlink()


def pytest_sessionfinish(session: pytest.Session) -> None:
    target = session.config.getoption("--transition-coverage")
    if target:
        path = Path(target)
        worker = xdist_worker(session.config)
        if worker is not None:
            path = path.with_name(f"{path.name}.{worker}")
        else:
            # Workers end their sessions before the controller ends its own.
            RECORDER.shares = _shares(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(f"{line}\n" for line in RECORDER.lines()), encoding="utf-8")
        for share in RECORDER.shares:
            share.unlink()
        RECORDER.shares = []
    if RECORDER.gym_log is not None:
        RECORDER.gym_log.unlink(missing_ok=True)
        os.environ.pop("ENVCKPT_GYM_LOG", None)


def judged(config: pytest.Config) -> str | None:
    """Why this run's coverage is not judged; None when it is (``--transition-coverage``).

    Only ``make verify`` (which passes the option to a whole-suite run)
    judges: a subset of the tests cannot exercise every row, nor can one
    xdist worker (its share is merged with the others' after the run).
    """
    if not config.getoption("--transition-coverage"):
        return "coverage is judged by a whole-suite run with --transition-coverage (make verify)"
    if xdist_worker(config) is not None:
        return "an xdist worker sees its share: python -m transition_coverage judges the merge"
    return None
