"""Tests for envckpt.telemetry.prometheus: the exposition, scraped over real HTTP."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from envckpt.telemetry.prometheus import PAUSE_METRIC, PrometheusExporter
from envckpt.telemetry.snapshot_record import SnapshotOutcome

from helpers.scrape import pause_count, samples, scrape
from helpers.telemetry_samples import restore_record, snapshot_record


@pytest.fixture
def exporter() -> Iterator[PrometheusExporter]:
    made = PrometheusExporter()
    yield made
    made.close()


def test_a_scrape_of_the_served_registry_counts_each_pause(exporter: PrometheusExporter) -> None:
    """Two published snapshots, one failed: the pause histogram counts two, over HTTP."""
    url = exporter.serve(port=0)
    assert url.startswith("http://127.0.0.1:") and url.endswith("/metrics")
    exporter.snapshot_ended(snapshot_record("rollouts-aaaaaaaaaaaa", paused=0.2))
    exporter.snapshot_ended(snapshot_record("rollouts-bbbbbbbbbbbb", paused=0.4))
    exporter.snapshot_ended(snapshot_record(outcome=SnapshotOutcome.FAILED))
    exporter.restore_ended(restore_record())
    text = scrape(url)
    assert pause_count(text) == 2
    found = samples(text)
    assert found[(f"{PAUSE_METRIC}_sum", ())] == pytest.approx(0.6)
    assert found[("envckpt_snapshots_total", (("outcome", "published"),))] == 2
    assert found[("envckpt_snapshots_total", (("outcome", "failed"),))] == 1
    assert found[("envckpt_snapshot_failures_total", (("code", "SnapshotNotReady"),))] == 1
    assert found[("envckpt_snapshot_bytes_total", ())] == 2 * 123_456
    assert found[("envckpt_snapshot_phase_seconds_count", (("phase", "prepare"),))] == 2
    prepare_max = (("stat", "max"), ("step", "prepare"))
    assert found[("envckpt_snapshot_instance_seconds", prepare_max)] == 0.08
    assert found[("envckpt_restore_episodes_total", (("fate", "continued"),))] == 2
    assert found[("envckpt_restores_total", (("outcome", "restored"),))] == 1


def test_the_scrape_check_fails_when_the_pause_metric_is_missing(
    exporter: PrometheusExporter,
) -> None:
    """The check is not vacuous: an exposition with the pause lines cut out fails it."""
    exporter.snapshot_ended(snapshot_record())
    body, content_type = exporter.exposition()
    assert content_type.startswith("text/plain")
    text = body.decode()
    assert pause_count(text) == 1
    tampered = "\n".join(line for line in text.splitlines() if PAUSE_METRIC not in line) + "\n"
    with pytest.raises(AssertionError, match="is not exposed"):
        pause_count(tampered)


def test_serving_twice_is_refused_and_close_stops_it(exporter: PrometheusExporter) -> None:
    """One server per exporter; after close a scrape finds nothing listening."""
    url = exporter.serve()
    with pytest.raises(RuntimeError, match="already serving"):
        exporter.serve()
    exporter.close()
    with pytest.raises(OSError):
        scrape(url, timeout=2)
