"""bench/routes.py at its smallest: every figure is a request that did its route's work."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import orjson
import pytest

from helpers.repository_bench import repository_bench

routes = repository_bench("routes")


def test_each_cycle_times_three_requests_that_committed_on_both_apps(tmp_path: Path) -> None:
    """Two cycles per app (the warm-up dropped); every commit published its manifest."""
    runs = asyncio.run(routes.measure(tmp_path, cycles=2))
    assert {
        app: {route: len(times) for route, times in by_route.items()}
        for app, by_route in runs.items()
    } == {app: dict.fromkeys(routes.ROUTES, 2) for app in ("envckpt", "floor")}
    assert all(
        time > 0 for by_route in runs.values() for times in by_route.values() for time in times
    )
    manifests = sorted(
        (tmp_path / "checkpoints").glob("*/instance-0/gym/model/policy/manifest.json")
    )
    # The warm-up round's two commits as well: six in all, each of 100 records.
    assert len(manifests) == 6
    assert {json.loads(path.read_bytes())["record_count"] for path in manifests} == {100}
    report = routes.report(runs)
    assert [line.split()[0] for line in report.splitlines()] == list(routes.ROUTES)


def test_a_request_refused_by_the_app_fails_the_run(tmp_path: Path) -> None:
    """A commit without its prepare is refused (409): no figure is taken from it."""
    states = routes.parked_states(2, state_bytes=100)
    app, _ = routes.envckpt_app(
        server_name="policy",
        kind="model",
        token=routes.TOKEN,
        states=states,
        checkpoint_root=tmp_path,
    )
    body = orjson.dumps(
        {
            "checkpoint_id": "never-prepared",
            "deadline_ts": time.time() + 60,
            "checkpoint_dir": str(tmp_path / "never-prepared"),
            "episode_ids": [],
        }
    )
    with pytest.raises(routes.RouteFailed, match="commit: HTTP 409"):
        asyncio.run(routes.post(app, "commit", body))
