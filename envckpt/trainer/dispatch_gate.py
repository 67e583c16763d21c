"""The trainer's switch for sending new work to the environment.

A rollout snapshot closes it before pausing the environment and reopens it
after resuming, so no rollout is dispatched while Gym is parked (it would
only be refused with ``admission_closed``).

    gate = DispatchGate()
    await gate.wait_open()          # the rollout driver, before each dispatch
    with gate.closed():             # the snapshotter
        ...
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator


class DispatchGate:
    """Open by default; ``closed()`` shuts it for the duration of a block (nestable)."""

    def __init__(self) -> None:
        self._closers = 0
        self._open = asyncio.Event()
        self._open.set()

    @property
    def is_open(self) -> bool:
        return self._closers == 0

    async def wait_open(self) -> None:
        await self._open.wait()

    @contextlib.contextmanager
    def closed(self) -> Iterator[None]:
        self._closers += 1
        self._open.clear()
        try:
            yield
        finally:
            self._closers -= 1
            if self._closers == 0:
                self._open.set()
