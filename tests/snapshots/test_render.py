"""Tests for envckpt.snapshots.render: rich tables within 100 columns, and the JSON forms."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from envckpt.snapshots import render
from envckpt.snapshots.details import describe
from envckpt.snapshots.verify import Check, VerifyReport
from envckpt.trainer.catalog import EntryStatus, SnapshotCatalog, SnapshotEntry

from helpers.stepped_root import stepped_root


def printed(renderable: object) -> list[str]:
    stream = io.StringIO()
    render.make_console(stream).print(renderable)
    return stream.getvalue().splitlines()


def test_sizes_and_times_read_as_people_write_them() -> None:
    """Bytes in B/kB/MB/GB with one decimal past bytes; times in UTC to the second."""
    assert [render.size(n) for n in (0, 999, 1000, 1_234_567, 9_000_000_000_000)] == [
        "0 B",
        "999 B",
        "1.0 kB",
        "1.2 MB",
        "9000.0 GB",
    ]
    assert render.created(0.0) == "1970-01-01 00:00:00" and render.created(None) == "?"
    assert render.iso(86400.5) == "1970-01-02T00:00:00.500000+00:00" and render.iso(None) is None


def test_a_console_on_a_file_is_100_columns_wide() -> None:
    """Not a terminal: exactly 100 columns, so CI logs never wrap."""
    assert render.make_console(io.StringIO()).width == render.MAX_WIDTH == 100


def test_the_list_of_many_long_snapshots_fits_100_columns(tmp_path: Path) -> None:
    """The longest ids, large steps and sizes, and a damaged entry's problem stay within 100."""
    entries = [
        SnapshotEntry(
            checkpoint_id=f"rollouts-step{step:010d}-0123456789ab",
            path=tmp_path,
            status="ok",
            created_at=1.8e9 + step,
            step=step,
            size=123_456_789_012,
            files=10_000,
            instances={f"shard-{i}/replica-{i}": (1000, 10) for i in range(64)},
        )
        for step in (1, 99_999_999, 9_999_999_999)
    ]
    entries.append(
        SnapshotEntry(
            "rollouts-damaged", tmp_path, EntryStatus.DAMAGED, "MANIFEST.json: " + "x" * 300, size=5
        )
    )
    lines = printed(render.list_table(entries))
    assert max(len(line) for line in lines) <= 100
    text = "\n".join(lines)
    assert "rollouts-step9999999999-0123456789ab" in text, "ids are never wrapped"
    assert "64000" in text and "123.5 GB" in text and "damaged" in text


@pytest.fixture
async def entry(tmp_path: Path) -> SnapshotEntry:
    root, ids = await stepped_root(tmp_path, steps=(77,))
    return SnapshotCatalog(root).entry(ids[0])


async def test_show_and_its_json_carry_the_same_facts(entry: SnapshotEntry) -> None:
    """show names step, policy, instances, participants and the outlook; JSON has each."""
    details = describe(entry)
    lines = printed(render.show_view(details))
    assert max(len(line) for line in lines) <= 100
    text = "\n".join(lines)
    for expected in ("step", "77", "v77", "shard/replica-1", "agent/simple_agent", "continue"):
        assert expected in text
    document = json.loads(json.dumps(render.details_json(details)))
    assert (document["step"], document["policy_version"], document["status"]) == (77, "v77", "ok")
    instance = document["instances"]["shard/replica-0"]
    assert instance["continued"] == len(instance["continued_episodes"]) > 0
    assert len(document["participants"]) == 6
    assert sorted(document["restore"]["continued"]) == sorted(
        {e["rollout_id"] for i in document["instances"].values() for e in i["continued_episodes"]}
    )


def test_verify_view_and_json_say_which_check_failed(tmp_path: Path) -> None:
    """A failed check is marked FAIL with its detail; the summary counts failed snapshots."""
    good = VerifyReport("ck-good", tmp_path, [Check("trainer files", True, "3 files")])
    bad = VerifyReport(
        "ck-bad", tmp_path, [Check("trainer files", False, "checksum mismatch in " + "d/" * 80)]
    )
    lines = printed(render.verify_view([good, bad]))
    assert max(len(line) for line in lines) <= 100
    text = "\n".join(lines)
    assert "ck-good: PASS" in text and "ck-bad: FAIL" in text
    assert "2 snapshot(s) verified, 1 failed" in text
    assert render.report_json(bad)["checks"] == [
        {"check": "trainer files", "passed": False, "detail": "checksum mismatch in " + "d/" * 80}
    ]
    assert render.report_json(good)["passed"] is True
    assert "no snapshot to verify" in "\n".join(printed(render.verify_view([])))
