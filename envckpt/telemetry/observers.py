"""Where a trainer's telemetry records go: the root's log first, then each observer.

A host attaches observers (the Prometheus exposition, OpenTelemetry spans,
its own) to the snapshotter and the restorer; every record reaches each of
them once, after the environment resumed::

    recorder = TelemetryRecorder(root, observers=[PrometheusExporter()])
    recorder.snapshot_ended(record)       # appended to telemetry.jsonl, then observed

An observer that raises is logged and skipped: telemetry never fails a
snapshot or a restore.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Protocol, runtime_checkable

from envckpt import logs
from envckpt.telemetry.log import TelemetryLog
from envckpt.telemetry.restore_record import RestoreTelemetry
from envckpt.telemetry.snapshot_record import SnapshotTelemetry

_log = logs.get_logger("envckpt.telemetry")


@runtime_checkable
class TelemetryObserver(Protocol):
    """Hears every snapshot's and restore's record."""

    def snapshot_ended(self, record: SnapshotTelemetry) -> None: ...

    def restore_ended(self, record: RestoreTelemetry) -> None: ...


class TelemetryRecorder:
    """Appends each record to ``<root>/telemetry.jsonl`` and hands it to every observer."""

    def __init__(
        self, root: str | os.PathLike[str], observers: Iterable[TelemetryObserver] = ()
    ) -> None:
        self.log = TelemetryLog(root)
        self.observers = list(observers)
        for observer in self.observers:
            if not isinstance(observer, TelemetryObserver):
                raise TypeError(
                    f"{observer!r} is no telemetry observer (snapshot_ended, restore_ended)"
                )
        self.last_snapshot: SnapshotTelemetry | None = None
        self.last_restore: RestoreTelemetry | None = None

    def snapshot_ended(self, record: SnapshotTelemetry) -> None:
        self.last_snapshot = record
        self._tell(record, lambda observer: observer.snapshot_ended(record))

    def restore_ended(self, record: RestoreTelemetry) -> None:
        self.last_restore = record
        self._tell(record, lambda observer: observer.restore_ended(record))

    def _tell(
        self,
        record: SnapshotTelemetry | RestoreTelemetry,
        tell: Callable[[TelemetryObserver], None],
    ) -> None:
        """Log ``record``, then ``tell`` each observer; one that fails is logged, the rest
        still hear it."""
        self.log.append(record)
        for observer in self.observers:
            try:
                tell(observer)
            except Exception as error:
                _failed(observer, error)


def _failed(observer: object, error: Exception) -> None:
    _log.warning(
        "a telemetry observer failed; the record was still logged",
        observer=type(observer).__name__,
        error=f"{type(error).__name__}: {error}",
    )
