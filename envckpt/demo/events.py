"""The job's event log: one JSON line per event, flushed at once.

The trainer process appends to it; the demo parent reads it while the job
runs (progress bars) and after it died (the report). A SIGKILL loses no line
that was written, because each is flushed to the kernel before the next step.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any


class EventLog:
    def __init__(self, path: Path, *, incarnation: int) -> None:
        self.path = path
        self.incarnation = incarnation
        path.parent.mkdir(parents=True, exist_ok=True)
        self._stream = path.open("a", encoding="utf-8")

    def emit(self, event: str, **fields: Any) -> None:
        record = {"event": event, "incarnation": self.incarnation, "ts": time.time(), **fields}
        self._stream.write(json.dumps(record, sort_keys=True, default=str) + "\n")
        self._stream.flush()

    def close(self) -> None:
        self._stream.close()


def read_events(path: Path) -> Iterator[dict[str, Any]]:
    """Every complete line of the log (a line cut by a kill is skipped)."""
    if not path.exists():
        return
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            yield record
