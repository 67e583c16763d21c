"""The Prometheus exposition of a trainer's snapshots and restores (``envckpt[prometheus]``).

An observer (``observers.TelemetryObserver``): attach it to the snapshotter
and the restorer (or ``start_trainer(observers=...)``), then serve its
registry from the trainer process, on a port of its own or on a route of an
app the trainer already serves::

    exporter = PrometheusExporter()                 # its own CollectorRegistry
    url = exporter.serve(port=9400)                 # http://127.0.0.1:9400/metrics (a thread)
    body, content_type = exporter.exposition()      # or answer GET /metrics yourself
    snapshotter = RolloutSnapshotter(root, ..., observers=[exporter])

Series (one per label value; no label takes an instance id, so the count of
series does not grow with the deployment):

* ``envckpt_snapshot_pause_seconds`` (histogram): the pause of each published snapshot;
* ``envckpt_snapshot_phase_seconds{phase}`` (histogram): each phase of it;
* ``envckpt_snapshots_total{outcome}``: published and failed snapshots;
* ``envckpt_snapshot_failures_total{code}``: failures by protocol error code;
* ``envckpt_snapshot_bytes_total``, ``envckpt_snapshot_records_written_total``,
  ``envckpt_snapshot_episodes_total{fate}`` (parked, restarted);
* ``envckpt_snapshot_instance_seconds{step,stat}`` (gauge): the last snapshot's
  per-instance prepare and commit latency, p50, p90 and max;
* ``envckpt_last_snapshot_timestamp_seconds``, ``envckpt_last_snapshot_bytes``;
* ``envckpt_restores_total{outcome}``, ``envckpt_restore_seconds`` (histogram),
  ``envckpt_restore_episodes_total{fate}`` (continued, restarted).
"""

from __future__ import annotations

import threading
from typing import Any

from envckpt.extras import require
from envckpt.telemetry.latency import LatencySummary
from envckpt.telemetry.restore_record import RestoreTelemetry
from envckpt.telemetry.snapshot_record import SnapshotTelemetry

# Pauses from a few milliseconds (idle, in process) to minutes (large commits).
PAUSE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
PAUSE_METRIC = "envckpt_snapshot_pause_seconds"


class PrometheusExporter:
    """Keeps Prometheus metrics of every snapshot and restore record it hears."""

    def __init__(self, registry: Any = None) -> None:
        prometheus = require("prometheus_client", extra="prometheus")
        self._prometheus = prometheus
        self.registry = registry if registry is not None else prometheus.CollectorRegistry()
        histogram, counter, gauge = prometheus.Histogram, prometheus.Counter, prometheus.Gauge
        on = {"registry": self.registry}
        self.pause = histogram(
            PAUSE_METRIC, "Rollouts paused by each published snapshot", buckets=PAUSE_BUCKETS, **on
        )
        self.phase = histogram(
            "envckpt_snapshot_phase_seconds",
            "Seconds in each phase of a snapshot",
            ["phase"],
            buckets=PAUSE_BUCKETS,
            **on,
        )
        self.snapshots = counter("envckpt_snapshots", "Snapshots by outcome", ["outcome"], **on)
        self.failures = counter(
            "envckpt_snapshot_failures", "Failed snapshots' failures by code", ["code"], **on
        )
        self.bytes = counter("envckpt_snapshot_bytes", "Bytes of published snapshots", **on)
        self.records = counter(
            "envckpt_snapshot_records_written", "Records participants wrote", **on
        )
        self.episodes = counter(
            "envckpt_snapshot_episodes",
            "Rollouts saved (parked) or not (restarted)",
            ["fate"],
            **on,
        )
        self.instance = gauge(
            "envckpt_snapshot_instance_seconds",
            "The last snapshot's per-instance latency",
            ["step", "stat"],
            **on,
        )
        self.last_time = gauge(
            "envckpt_last_snapshot_timestamp_seconds", "When the last snapshot was published", **on
        )
        self.last_bytes = gauge("envckpt_last_snapshot_bytes", "The last snapshot's bytes", **on)
        self.restores = counter("envckpt_restores", "Restores by outcome", ["outcome"], **on)
        self.restore_seconds = histogram(
            "envckpt_restore_seconds", "Seconds of each restore", buckets=PAUSE_BUCKETS, **on
        )
        self.restore_episodes = counter(
            "envckpt_restore_episodes", "Rollouts a restore continued or restarted", ["fate"], **on
        )
        self._server: Any = None
        self._thread: threading.Thread | None = None

    # ---- observer --------------------------------------------------------------

    def snapshot_ended(self, record: SnapshotTelemetry) -> None:
        self.snapshots.labels(outcome=str(record.outcome)).inc()
        if not record.published:
            for code, count in record.failures_by_code:
                self.failures.labels(code=code).inc(count)
            return
        self.pause.observe(record.paused_seconds)
        for phase, seconds in record.phases.items():
            self.phase.labels(phase=phase).observe(seconds)
        self.bytes.inc(record.bytes)
        self.records.inc(record.records_written)
        self.episodes.labels(fate="parked").inc(record.episodes_parked)
        self.episodes.labels(fate="restarted").inc(record.episodes_restarted)
        self._latency("prepare", record.prepare_latency)
        self._latency("commit", record.commit_latency)
        self.last_time.set(record.ended_at)
        self.last_bytes.set(record.bytes)

    def restore_ended(self, record: RestoreTelemetry) -> None:
        self.restores.labels(outcome=str(record.outcome)).inc()
        self.restore_seconds.observe(record.seconds)
        self.restore_episodes.labels(fate="continued").inc(record.continued)
        self.restore_episodes.labels(fate="restarted").inc(record.restarted)

    def _latency(self, step: str, summary: LatencySummary) -> None:
        for stat, value in (("p50", summary.p50), ("p90", summary.p90), ("max", summary.max)):
            self.instance.labels(step=step, stat=stat).set(value)

    # ---- serving ---------------------------------------------------------------

    def exposition(self) -> tuple[bytes, str]:
        """The text exposition of the registry, and its content type (for a GET /metrics)."""
        body = self._prometheus.generate_latest(self.registry)
        return bytes(body), str(self._prometheus.CONTENT_TYPE_LATEST)

    def serve(self, *, port: int = 0, addr: str = "127.0.0.1") -> str:
        """Serve the registry over HTTP from a daemon thread; the scrape URL.

        ``port`` 0 picks a free one. Loopback by default: exposing it
        further is the host's decision.
        """
        if self._server is not None:
            raise RuntimeError("this exporter is already serving")
        self._server, self._thread = self._prometheus.start_http_server(
            port, addr=addr, registry=self.registry
        )
        host, bound = self._server.server_address[:2]
        return f"http://{host}:{bound}/metrics"

    def close(self) -> None:
        """Stop serving (nothing if not serving)."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
