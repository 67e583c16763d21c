"""Tests for envckpt.telemetry.names: the metric names, documented in docs/integration.md."""

from __future__ import annotations

import re
from pathlib import Path

from envckpt.telemetry import names

DOCS = Path(__file__).resolve().parents[2] / "docs" / "integration.md"
ROW = re.compile(r"^\| `([a-z0-9_]+)` \| ([^|]+) \| ([^|]+) \|$")


def documented(text: str) -> list[tuple[str, str, str]]:
    """The (name, unit, meaning) rows of the "### Metrics" section's tables."""
    section = text.split("### Metrics", 1)[1].split("\n### ", 1)[0]
    return [
        (m.group(1), m.group(2).strip(), m.group(3).strip())
        for line in section.splitlines()
        if (m := ROW.match(line))
    ]


def test_every_metric_is_documented_as_named_here_and_nothing_else() -> None:
    """The docs' tables are exactly SNAPSHOT_METRICS then RESTORE_METRICS, in order."""
    assert documented(DOCS.read_text()) == [*names.SNAPSHOT_METRICS, *names.RESTORE_METRICS]


def test_the_docs_check_sees_a_renamed_or_missing_metric() -> None:
    """The check is not vacuous: a renamed row, or a dropped one, no longer matches."""
    text = DOCS.read_text()
    renamed = text.replace("| `snapshot_paused_seconds` |", "| `snapshot_pause_s` |", 1)
    dropped = text.replace("| `restore_cleared_rows` |", "| restore_cleared_rows |", 1)
    expected = [*names.SNAPSHOT_METRICS, *names.RESTORE_METRICS]
    assert documented(renamed) != expected
    assert documented(dropped) != expected


def test_names_are_unique_and_every_constant_is_described() -> None:
    """No name twice; every *_SECONDS/... constant of the module is in a table."""
    assert len(set(names.ALL_METRICS)) == len(names.ALL_METRICS)
    constants = {
        value for key, value in vars(names).items() if key.isupper() and isinstance(value, str)
    }
    assert constants <= set(names.ALL_METRICS)
