"""Tests for envckpt.demo.gym_hosting: Gym server processes the trainer can stop at once."""

from __future__ import annotations

from pathlib import Path

import pytest

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


def test_job_tokens_are_random_distinct_strong_and_hidden() -> None:
    """Each pair is new, its two tokens differ, both are long, and repr never shows them."""
    pairs = [JobTokens.fresh() for _ in range(20)]
    assert len({p.control for p in pairs} | {p.rows for p in pairs}) == 40
    assert pairs[0].control not in repr(pairs[0]) and "<hidden>" in repr(pairs[0])
    with pytest.raises(ValueError, match="differ"):
        JobTokens("x" * 20, "x" * 20)
    with pytest.raises(ValueError, match="16"):
        JobTokens("short", "y" * 20)


def test_job_tokens_travel_in_the_environment() -> None:
    """The pair a trainer gets from the demo is the one it reads back; none: a fresh pair."""
    pair = JobTokens.fresh()
    assert JobTokens.from_env(pair.trainer_env()) == pair
    assert JobTokens.from_env({}) != JobTokens.from_env({})
    with pytest.raises(ValueError):
        JobTokens.from_env({"ENVCKPT_DEMO_TOKEN": pair.control})  # half a pair is refused
