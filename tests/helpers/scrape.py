"""A Prometheus scrape as a person's dashboard would do it: HTTP GET, the client's own parser."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

PAUSE = "envckpt_snapshot_pause_seconds"


def scrape(url: str, *, timeout: float = 10.0) -> str:
    """The exposition text at ``url`` (a real GET)."""
    with urllib.request.urlopen(url, timeout=timeout) as reply:
        assert reply.status == 200, reply.status
        return str(reply.read().decode())


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the exposition: (name, sorted labels) -> value."""
    found: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = float(sample.value)
    return found


def pause_count(text: str) -> int:
    """How many pauses the exposition's pause histogram counted; AssertionError if absent."""
    families = {family.name: family for family in text_string_to_metric_families(text)}
    assert PAUSE in families, f"{PAUSE} is not exposed: {sorted(families)}"
    assert families[PAUSE].type == "histogram", families[PAUSE].type
    counts = [s.value for s in families[PAUSE].samples if s.name == f"{PAUSE}_count"]
    assert len(counts) == 1, counts
    return int(counts[0])
