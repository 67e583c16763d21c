"""The demo trainer's Prometheus endpoint: ``GET /metrics`` on the app it already serves.

With ``envckpt[prometheus]`` installed (``make install`` installs it), the
trainer process answers ``GET <trainer url>/metrics`` with its exporter's
registry and names the URL in the event log (``metrics`` event), so a
scraper, or a test, finds it while the job runs::

    observers = metrics_endpoint(app)               # before serving the app
    async with serve(app) as url:
        announce(events, url, observers)            # {"event": "metrics", "url": ".../metrics"}
        started = await start_trainer(..., observers=observers)

Without the extra there is no endpoint and no event: the demo runs the same.
"""

from __future__ import annotations

import importlib.util

from fastapi import FastAPI, Response

from envckpt.demo.events import EventLog
from envckpt.telemetry.observers import TelemetryObserver

METRICS_EVENT = "metrics"
METRICS_PATH = "/metrics"


def metrics_endpoint(app: FastAPI) -> list[TelemetryObserver]:
    """A ``GET /metrics`` route on ``app`` and its exporter; nothing without the extra."""
    if importlib.util.find_spec("prometheus_client") is None:
        return []
    from envckpt.telemetry.prometheus import PrometheusExporter

    exporter = PrometheusExporter()

    async def metrics() -> Response:
        body, content_type = exporter.exposition()
        return Response(body, media_type=content_type)

    app.add_api_route(METRICS_PATH, metrics, methods=["GET"])
    return [exporter]


def announce(events: EventLog, trainer_url: str, observers: list[TelemetryObserver]) -> None:
    """Name the scrape URL in the event log, when there is an endpoint."""
    if observers:
        events.emit(METRICS_EVENT, url=f"{trainer_url}{METRICS_PATH}")
