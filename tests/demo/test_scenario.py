"""Tests for envckpt.demo.scenario: the demo's settings, instances and rollout tasks."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envckpt.demo.scenario import (
    SETTINGS_NAME,
    DemoSettings,
    load_settings,
    make_tasks,
    save_settings,
)
from envckpt.gym.instance import GymCheckpointInstance

from helpers.examples import examples


@st.composite
def demo_settings(draw: st.DrawFn) -> DemoSettings:
    min_turns = draw(st.integers(1, 6))
    return DemoSettings(
        instances=draw(st.integers(1, 5)),
        rollouts=draw(st.integers(1, 30)),
        seed=draw(st.integers(0, 2**32)),
        min_turns=min_turns,
        max_turns=draw(st.integers(min_turns, 12)),
    )


@pytest.mark.parametrize(
    "fields",
    [
        {"instances": 0},
        {"rollouts": 0},
        {"min_turns": 0},
        {"min_turns": 5, "max_turns": 4},
    ],
)
def test_settings_that_cannot_run_are_refused(fields: dict[str, int]) -> None:
    """No instance, no rollout, or an empty turn range: ValueError."""
    with pytest.raises(ValueError):
        DemoSettings(**fields)  # type: ignore[arg-type]


def test_the_instances_are_replicas_of_one_demo_shard() -> None:
    """instance_list is demo/replica-0 .. replica-(n-1)."""
    assert DemoSettings(instances=3).instance_list() == [
        GymCheckpointInstance("demo", 0),
        GymCheckpointInstance("demo", 1),
        GymCheckpointInstance("demo", 2),
    ]


def test_every_instance_plays_the_same_seeded_policy() -> None:
    """gym_seed is the job's seed, whatever the instance count."""
    assert DemoSettings(seed=7, instances=1).gym_seed() == DemoSettings(seed=7).gym_seed() == 7


def test_settings_survive_a_save_and_load(tmp_path: Path) -> None:
    """A saved job.json loads back equal, directory included; the file is sorted JSON."""
    original = DemoSettings(
        instances=2,
        rollouts=9,
        seed=3,
        directory=tmp_path / "demo",
        snapshot_every=0.25,
        allow_fresh_start=True,
    )
    path = tmp_path / SETTINGS_NAME
    save_settings(original, path)
    assert load_settings(path) == original
    raw = json.loads(path.read_text())
    assert list(raw) == sorted(raw) and raw["directory"] == str(tmp_path / "demo")
    assert [p.name for p in tmp_path.iterdir()] == [SETTINGS_NAME]  # no temporary left


def test_loading_an_edited_job_file_checks_it_again(tmp_path: Path) -> None:
    """A job.json edited into impossible settings is refused on load."""
    path = tmp_path / SETTINGS_NAME
    save_settings(DemoSettings(directory=tmp_path), path)
    raw = json.loads(path.read_text())
    raw["min_turns"] = 20
    path.write_text(json.dumps(raw))
    with pytest.raises(ValueError, match="min_turns"):
        load_settings(path)


@settings(max_examples=examples(100), deadline=None)
@given(demo=demo_settings())
def test_tasks_are_numbered_spread_round_robin_and_within_the_turn_range(
    demo: DemoSettings,
) -> None:
    """One task per rollout, ids in order, instances in turn, turns in [min, max]."""
    tasks = make_tasks(demo)
    instances = demo.instance_list()
    assert [t.rollout_id for t in tasks] == [f"rollout-{i:03d}" for i in range(demo.rollouts)]
    for index, task in enumerate(tasks):
        assert task.instance_id == instances[index % demo.instances].instance_id
        assert task.task["prompt"] == f"task {index}"
        assert demo.min_turns <= task.task["turns"] <= demo.max_turns


@settings(max_examples=examples(50), deadline=None)
@given(demo=demo_settings())
def test_the_same_settings_always_make_the_same_tasks(demo: DemoSettings) -> None:
    """Both demo processes (and a rerun) derive identical tasks from the settings."""
    assert make_tasks(demo) == make_tasks(replace(demo))


def test_the_seed_chooses_the_turns() -> None:
    """Another seed gives another turn plan (so the seed is not ignored)."""
    plans = {
        tuple(t.task["turns"] for t in make_tasks(DemoSettings(rollouts=40, seed=seed)))
        for seed in range(3)
    }
    assert len(plans) == 3
