"""Tests for envckpt.demo.telemetry_hooks: the demo trainer's /metrics, scraped for real."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from envckpt.demo.events import EVENTS_NAME, EventLog, read_events
from envckpt.demo.telemetry_hooks import METRICS_EVENT, announce, metrics_endpoint
from envckpt.http.apps import new_app
from envckpt.http.serve import serve
from envckpt.telemetry.prometheus import PAUSE_METRIC

from helpers.scrape import pause_count, samples, scrape
from helpers.telemetry_samples import snapshot_record


async def test_the_endpoint_serves_the_exporter_on_the_trainer_s_app(tmp_path: Path) -> None:
    """GET /metrics on the app counts a snapshot the exporter heard; the URL is announced."""
    app = new_app()
    observers = metrics_endpoint(app)
    assert len(observers) == 1
    observers[0].snapshot_ended(snapshot_record(paused=0.3))
    events = EventLog(tmp_path / EVENTS_NAME, incarnation=1)
    async with serve(app) as url:
        announce(events, url, observers)
        events.close()
        [announced] = [e["url"] for e in read_events(tmp_path / EVENTS_NAME)]
        assert announced == f"{url}/metrics"
        # A blocking GET from a thread: the server runs on this loop.
        text = await asyncio.to_thread(scrape, announced)
    assert pause_count(text) == 1
    assert samples(text)[(f"{PAUSE_METRIC}_sum", ())] == 0.3


def test_without_an_endpoint_nothing_is_announced(tmp_path: Path) -> None:
    """No observers (the extra missing): no metrics event."""
    events = EventLog(tmp_path / EVENTS_NAME, incarnation=1)
    announce(events, "http://127.0.0.1:1", [])
    events.close()
    assert not [e for e in read_events(tmp_path / EVENTS_NAME) if e["event"] == METRICS_EVENT]


def test_a_scrape_of_the_running_demo_lists_the_pause_metric(scraped_demo: Any) -> None:
    """During a real `envckpt demo --dir D`, a GET of the trainer's endpoint, parsed by
    prometheus_client's own parser, counts published snapshots' pauses."""
    assert scraped_demo.code == 0, scraped_demo.out[-3000:]
    assert scraped_demo.scrapes, "no scrape of a running trainer counted a snapshot"
    url, text = scraped_demo.scrapes[0]
    assert url.startswith("http://127.0.0.1:") and url.endswith("/metrics")
    assert pause_count(text) >= 1
    assert samples(text)[("envckpt_snapshots_total", (("outcome", "published"),))] >= 1
