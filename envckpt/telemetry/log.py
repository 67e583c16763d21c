"""``<root>/telemetry.jsonl``: every snapshot's and restore's record, one JSON line each.

The snapshot root keeps only its latest snapshots; this log keeps the record
of every one, published or failed, and of every restore, so ``envckpt
report`` can draw a whole run from the root alone::

    log = TelemetryLog(root)
    log.append(record)                     # one write(2) with O_APPEND; never raises
    read = read_telemetry(root)            # records in order, and any damaged line

Each line is appended by one ``write`` on a descriptor opened with
``O_APPEND``: a killed trainer leaves whole lines (only a power cut can tear
the last one), and only the trainer that holds the root's lock writes. The
log is not fsynced: it is evidence for people, not state a restore needs, so
it costs the snapshot nothing durable. A line that cannot be read is reported
with its number and skipped; the rest still reads.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from envckpt import logs
from envckpt.telemetry.restore_record import RESTORE_KIND, RestoreTelemetry
from envckpt.telemetry.snapshot_record import SNAPSHOT_KIND, SnapshotTelemetry

TELEMETRY_NAME = "telemetry.jsonl"
Record = SnapshotTelemetry | RestoreTelemetry

_log = logs.get_logger("envckpt.telemetry")


class TelemetryLog:
    """Appends records to ``<root>/telemetry.jsonl``."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.path = Path(root) / TELEMETRY_NAME

    def append(self, record: Record) -> bool:
        """Append one line; False (and a warning) if the file system refused it.

        Telemetry never fails a snapshot or a restore: the snapshot stands
        whatever happens to its record.
        """
        line = orjson.dumps(record.to_json()) + b"\n"
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                view = memoryview(line)
                while view:
                    view = view[os.write(fd, view) :]
            finally:
                os.close(fd)
        except OSError as error:
            _log.warning("telemetry record not written", path=str(self.path), error=str(error))
            return False
        return True


@dataclass(frozen=True, slots=True)
class TelemetryRead:
    """What a telemetry log holds, in the order it was written, and the lines it could not read."""

    snapshots: tuple[SnapshotTelemetry, ...] = ()
    restores: tuple[RestoreTelemetry, ...] = ()
    problems: tuple[str, ...] = ()

    @property
    def published(self) -> tuple[SnapshotTelemetry, ...]:
        return tuple(record for record in self.snapshots if record.published)


def read_telemetry(root: str | os.PathLike[str]) -> TelemetryRead:
    """Every record of ``<root>/telemetry.jsonl`` (none if there is no log)."""
    path = Path(root) / TELEMETRY_NAME
    try:
        text = path.read_bytes()
    except FileNotFoundError:
        return TelemetryRead()
    snapshots: list[SnapshotTelemetry] = []
    restores: list[RestoreTelemetry] = []
    problems: list[str] = []
    for number, raw in enumerate(text.split(b"\n"), start=1):
        if not raw.strip():
            continue
        try:
            record = parse_record(json.loads(raw))
        except (ValueError, TypeError, KeyError) as error:
            problems.append(f"{path.name}:{number}: {_described(error)}")
            continue
        if isinstance(record, SnapshotTelemetry):
            snapshots.append(record)
        else:
            restores.append(record)
    return TelemetryRead(tuple(snapshots), tuple(restores), tuple(problems))


def parse_record(body: object) -> Record:
    """One parsed line as its record; ValueError, TypeError or KeyError if it is not one."""
    if not isinstance(body, Mapping):
        raise TypeError(f"a record is a JSON object, got {type(body).__name__}")
    kind: Any = body.get("kind")
    if kind == SNAPSHOT_KIND:
        return SnapshotTelemetry.from_json(body)
    if kind == RESTORE_KIND:
        return RestoreTelemetry.from_json(body)
    raise ValueError(f"unknown record kind {kind!r}")


def _described(error: Exception) -> str:
    if isinstance(error, KeyError):
        return f"missing field {error.args[0]!r}"
    if isinstance(error, json.JSONDecodeError):
        return f"not JSON ({error.msg})"
    return str(error)
