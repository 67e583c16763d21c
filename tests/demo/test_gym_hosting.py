"""Tests for envckpt.demo.gym_hosting: Gym server processes the trainer can stop at once."""

from __future__ import annotations

from pathlib import Path

from envckpt.demo.gym_hosting import JobTokens, http_instances
from envckpt.demo.scenario import DemoSettings


async def test_gym_servers_start_answer_and_stop(tmp_path: Path) -> None:
    """Each instance gets its server process; stop() ends them all (a preempted node)."""
    settings = DemoSettings(instances=2, rollouts=1, directory=tmp_path)
    async with http_instances(
        settings, tokens=JobTokens.fresh(), rows_url="http://127.0.0.1:9/rows", incarnation=1
    ) as hosted:
        assert [i.instance_id for i in hosted.instances] == [
            i.instance_id for i in settings.instance_list()
        ]
        for instance in hosted.instances:
            await instance.discover()
            assert await instance.participant_names()
        await hosted.stop()
    assert sorted(p.name for p in (tmp_path / "run").glob("gym-*-1.json")) == [
        "gym-0-1.json",
        "gym-1-1.json",
    ]
