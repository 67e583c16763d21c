"""bench/h11_floor.py: its h11-framed client really snapshots envckpt's servers, and is timed."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers.repository_bench import repository_bench

h11_floor = repository_bench("h11_floor")
fleet = repository_bench("fleet")
raw_http = repository_bench("raw_http")
states = repository_bench("states")


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[object, Path]]:
    """One envckpt server process (three participants) and its checkpoint root."""
    workdir = tmp_path_factory.mktemp("h11-floor")
    root = workdir / "checkpoints"
    root.mkdir()
    with fleet.Fleet(
        "envckpt", count=1, workdir=workdir, token=h11_floor.TOKEN, checkpoint_root=root
    ) as started:
        yield started, root


def test_the_h11_client_commits_every_participant(servers: tuple[object, Path]) -> None:
    """A whole snapshot through H11Client: every participant publishes its 100 records."""
    started, root = servers
    client = h11_floor.H11Client(started.urls[0], token=h11_floor.TOKEN)  # type: ignore[attr-defined]

    async def snapshot() -> None:
        try:
            await raw_http.raw_cycle(
                client,
                checkpoint_id="h11-floor-1",
                checkpoint_dir=str(root / "h11-floor-1"),
                rollout_ids=states.rollout_ids(started.episodes),  # type: ignore[attr-defined]
                deadline_ts=time.time() + 60,
            )
        finally:
            await client.aclose()

    asyncio.run(snapshot())
    manifests = sorted((root / "h11-floor-1").glob("gym/*/*/manifest.json"))
    assert [path.parent.name for path in manifests] == ["agent", "policy", "resources"]
    assert {json.loads(path.read_bytes())["record_count"] for path in manifests} == {100}


def test_a_refused_call_fails_the_run(servers: tuple[object, Path]) -> None:
    """A wrong token is answered 401: the client raises instead of timing a refusal."""
    started, _ = servers
    client = h11_floor.H11Client(started.urls[0], token="not-the-token-at-all")  # type: ignore[attr-defined]

    async def prepare() -> None:
        try:
            await client.post("policy", "prepare", b"{}", expect_phase="prepared")
        finally:
            await client.aclose()

    with pytest.raises(RuntimeError, match="HTTP 401"):
        asyncio.run(prepare())


def test_measure_times_each_client_per_call_and_each_pause(tmp_path: Path) -> None:
    """One round of each variant after the warm-up: CPU per call and the pause."""
    runs = asyncio.run(h11_floor.measure(tmp_path, instances=1, rounds=1))
    assert {
        kind: {name: len(values) for name, values in by_name.items()}
        for kind, by_name in runs.items()
    } == {
        "cpu": {"raw": 1, "raw + h11": 1, "envckpt": 1},
        "wall": {"raw": 1, "raw + h11": 1, "envckpt": 1, "floor": 1, "floor + h11": 1},
    }
    assert all(
        value > 0 for by_name in runs.values() for values in by_name.values() for value in values
    )
    report = h11_floor.report(runs)
    assert "envckpt over raw + h11" in report and "floor + h11 over floor" in report
