"""Tests for envckpt.sim.gym: a whole Gym deployment snapshotted and restored in-process."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from envckpt.coordination.types import Participants
from envckpt.episodes import EnvironmentEpisode
from envckpt.errors import CoordinationError, ParticipantError
from envckpt.sim.gym import (
    AGENT_SERVER,
    JUDGE_SERVER,
    MODEL_SERVER,
    RESOURCES_SERVER,
    GymConfig,
    SimulatedGym,
    expected_transcript,
)

Ep = EnvironmentEpisode
TURNS = 30
TASK: dict[str, Any] = {"prompt": "walk the maze", "turns": TURNS}
ROLLOUTS = ("r0", "r1", "r2")
EPISODES = tuple(Ep(rollout, 0) for rollout in ROLLOUTS)


def deadline() -> float:
    return time.time() + 30


def slow_gym(**kwargs: Any) -> SimulatedGym:
    # A little latency per generation keeps rollouts mid-flight when control calls arrive.
    return SimulatedGym(seed=11, model_latency=0.002, park_poll_seconds=0.002, **kwargs)


async def wait_until(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end, "condition not reached in time"
        await asyncio.sleep(0.001)


def turns(gym: SimulatedGym) -> dict[str, int]:
    return {key: len(state["turns"]) for key, state in gym.agent.sessions().items()}


async def start_midway(gym: SimulatedGym) -> list[asyncio.Task[Any]]:
    runs = [gym.start(episode, TASK) for episode in EPISODES]
    await wait_until(lambda: len(turns(gym)) == 3 and min(turns(gym).values()) >= 2)
    return runs


async def snapshot(gym: SimulatedGym, directory: Path) -> tuple[Participants, dict[str, Any]]:
    """Prepare and commit every rollout under checkpoint id ck-1; leaves it open."""
    participants = await gym.coordinator.discover()
    prepared = await gym.coordinator.prepare(participants, "ck-1", deadline_ts=deadline())
    assert prepared.prepared, prepared.blockers()
    replies = await gym.coordinator.commit(
        participants, "ck-1", str(directory), EPISODES, deadline_ts=deadline()
    )
    return participants, replies


async def restore_fresh(gym: SimulatedGym, directory: Path) -> SimulatedGym:
    """Kill ``gym``, restore a fresh process of it from ``directory`` and reopen it."""
    await gym.shutdown()
    fresh = gym.fresh_process()
    participants = await fresh.coordinator.discover()
    replies = await fresh.coordinator.restore(
        participants, "rs-1", str(directory), EPISODES, deadline_ts=deadline()
    )
    for reply in replies.values():
        assert reply["source_checkpoint_id"] == "ck-1"
        assert reply["restored"] == ["r0-a1", "r1-a1", "r2-a1"]
    await fresh.coordinator.resume(participants, "rs-1", deadline_ts=deadline())
    return fresh


async def test_a_rollout_runs_to_completion_and_matches_the_expected_transcript() -> None:
    """An uninterrupted rollout equals the transcript computed without servers."""
    gym = SimulatedGym(seed=4)
    result = await gym.run(Ep("task-1", 0), TASK)
    assert result["status"] == "completed"
    assert result["transcript"] == gym.expected_transcript("task-1", TASK)
    assert len(result["transcript"]) == 1 + 2 * TURNS


def test_expected_transcript_is_a_pure_function_of_seed_rollout_and_task() -> None:
    """Same inputs give the same transcript; another seed or rollout gives another."""
    base = expected_transcript("r", TASK, seed=1)
    assert base == expected_transcript("r", dict(TASK), seed=1)
    assert base != expected_transcript("r", TASK, seed=2)
    assert base != expected_transcript("s", TASK, seed=1)
    with pytest.raises(ValueError):
        expected_transcript("r", {"prompt": "p"}, seed=1)


async def test_discover_finds_the_participants_and_skips_the_judge() -> None:
    """The judge answers 404 and is left out; the three participants are found in stage order."""
    gym = SimulatedGym()
    participants = await gym.coordinator.discover()
    assert [(m.server_name, m.kind, m.mode) for m in participants.members] == [
        (MODEL_SERVER, "model", "export_restore"),
        (AGENT_SERVER, "agent", "export_restore"),
        (RESOURCES_SERVER, "resources", "export_restore"),
    ]
    assert JUDGE_SERVER in gym.transport.server_names()
    assert set(gym.cores) == {MODEL_SERVER, AGENT_SERVER, RESOURCES_SERVER}


async def test_prepare_parks_rollouts_at_a_turn_boundary_and_reports_ready() -> None:
    """Staged prepare parks every mid-rollout run between turns; nothing advances meanwhile."""
    gym = slow_gym()
    runs = await start_midway(gym)
    participants = await gym.coordinator.discover()
    prepared = await gym.coordinator.prepare(participants, "ck-1", deadline_ts=deadline())
    assert prepared.prepared and prepared.restarts() == frozenset()
    assert set(prepared.replies) == {MODEL_SERVER, AGENT_SERVER, RESOURCES_SERVER}
    held = turns(gym)
    assert all(0 < count < TURNS for count in held.values())
    await asyncio.sleep(0.03)
    assert turns(gym) == held
    assert all(not core.fence.in_flight() for core in gym.cores.values())
    await gym.coordinator.resume(participants, "ck-1", deadline_ts=deadline())
    await asyncio.gather(*runs)


async def test_commit_writes_records_and_replies_with_ownership(tmp_path: Path) -> None:
    """Commit publishes every participant's records and names run episodes and staging keys."""
    gym = slow_gym()
    runs = await start_midway(gym)
    _, replies = await snapshot(gym, tmp_path)
    held = turns(gym)
    agent, model = replies[AGENT_SERVER], replies[MODEL_SERVER]
    assert agent["episode_ids"] == agent["run_episode_ids"] == list(ROLLOUTS)
    assert model["episode_ids"] == list(ROLLOUTS)
    by_episode = model["staging_keys_by_episode"]
    assert {key for keys in by_episode.values() for key in keys} == set(model["staging_keys"])
    for rollout in ROLLOUTS:
        assert by_episode[rollout] == sorted(f"{rollout}/t{t}" for t in range(held[rollout]))
    for server, kind in ((MODEL_SERVER, "model"), (AGENT_SERVER, "agent")):
        manifest = tmp_path / "gym" / kind / server / "manifest.json"
        assert json.loads(manifest.read_text())["record_count"] == 3
    await gym.shutdown()
    await asyncio.gather(*runs, return_exceptions=True)


async def test_resume_after_commit_lets_rollouts_finish_unchanged(tmp_path: Path) -> None:
    """Resuming the snapshotted process finishes every rollout with the expected transcript."""
    gym = slow_gym()
    runs = await start_midway(gym)
    participants, _ = await snapshot(gym, tmp_path)
    await gym.coordinator.resume(participants, "ck-1", deadline_ts=deadline())
    for rollout, result in zip(ROLLOUTS, await asyncio.gather(*runs), strict=True):
        assert result["transcript"] == gym.expected_transcript(rollout, TASK)
        assert result["resumed_from_turn"] == 0
    assert gym.agent.sessions() == {} and gym.model.staging_ledger() == {}


async def test_a_fresh_process_continues_each_rollout_at_its_saved_turn(tmp_path: Path) -> None:
    """Restored as attempt N+1, every rollout finishes exactly as an uninterrupted run would."""
    audit = tmp_path / "audit.jsonl"
    gym = slow_gym(audit_path=audit)
    await start_midway(gym)
    _, replies = await snapshot(gym, tmp_path / "ckpt")
    saved = turns(gym)
    fresh = await restore_fresh(gym, tmp_path / "ckpt")
    assert fresh.agent.sessions().keys() == {"r0-a1", "r1-a1", "r2-a1"}

    results = await asyncio.gather(*(fresh.run(e.next_attempt(), TASK) for e in EPISODES))
    for rollout, result in zip(ROLLOUTS, results, strict=True):
        assert result["transcript"] == expected_transcript(rollout, TASK, seed=11)
        assert result["resumed_from_turn"] == saved[rollout]
        attempts = [turn["attempt"] for turn in result["turns"]]
        assert attempts == [0] * saved[rollout] + [1] * (TURNS - saved[rollout])
        # Rows carried over from attempt 0 stay with the rollout; new ones are attempt 1's.
        carried = replies[MODEL_SERVER]["staging_keys_by_episode"][rollout]
        assert set(carried) < set(result["staging_keys"])

    # Every side effect happened exactly once across both processes.
    effects = Counter(json.loads(line)["effect"] for line in audit.read_text().splitlines())
    assert set(effects.values()) == {1}
    assert len(effects) == len(ROLLOUTS) * TURNS


async def test_the_stale_attempt_is_refused_after_restore(tmp_path: Path) -> None:
    """Once attempt N+1 exists, attempt N is refused with stale_attempt everywhere."""
    gym = slow_gym()
    await start_midway(gym)
    await snapshot(gym, tmp_path)
    fresh = await restore_fresh(gym, tmp_path)
    with pytest.raises(ParticipantError) as caught:
        await fresh.run(Ep("r0", 0), TASK)
    assert caught.value.code == "stale_attempt"
    with pytest.raises(ParticipantError) as caught:
        await fresh.model.generate(
            {"episode": Ep("r0", 0).to_wire(), "turn": 9, "observation": "x"}
        )
    assert caught.value.code == "stale_attempt"
    assert "r0-a1" in fresh.agent.sessions()


async def test_retire_through_the_coordinator_stops_a_running_rollout() -> None:
    """Retire stops the run (its caller sees stale_attempt) and frees it on every server."""
    gym = slow_gym()
    runs = await start_midway(gym)
    participants = await gym.coordinator.discover()
    await gym.coordinator.retire(participants, "rt-1", [Ep("r1", 0)], deadline_ts=deadline())
    first, retired, last = await asyncio.gather(*runs, return_exceptions=True)
    assert isinstance(retired, ParticipantError) and retired.code == "stale_attempt"
    assert isinstance(first, dict) and isinstance(last, dict)
    assert first["status"] == last["status"] == "completed"
    assert gym.agent.sessions() == {} and gym.model.staging_ledger() == {}
    assert gym.tool.sessions() == {}


async def test_restart_only_resources_report_every_touched_rollout_as_a_restart(
    tmp_path: Path,
) -> None:
    """With restart_only resources every live rollout restarts, so none is continued."""
    gym = slow_gym(resources_mode="restart_only")
    runs = await start_midway(gym)
    participants = await gym.coordinator.discover()
    assert participants.member(RESOURCES_SERVER).mode == "restart_only"
    prepared = await gym.coordinator.prepare(participants, "ck-1", deadline_ts=deadline())
    assert prepared.prepared
    assert prepared.restarts() == frozenset(EPISODES)
    assert prepared.continued(EPISODES) == ()
    replies = await gym.coordinator.commit(
        participants, "ck-1", str(tmp_path), prepared.continued(EPISODES), deadline_ts=deadline()
    )
    assert all(reply["episode_ids"] == [] for reply in replies.values())
    await gym.coordinator.resume(participants, "ck-1", deadline_ts=deadline())
    for rollout, result in zip(ROLLOUTS, await asyncio.gather(*runs), strict=True):
        assert result["transcript"] == gym.expected_transcript(rollout, TASK)


async def test_a_corrupt_checkpoint_is_refused_whole(tmp_path: Path) -> None:
    """A damaged records file fails the restore; nothing stays installed and rollouts restart."""
    gym = slow_gym()
    gym.faults.add("corrupt_records", server=AGENT_SERVER, route="commit")
    await start_midway(gym)
    await snapshot(gym, tmp_path)
    await gym.shutdown()
    fresh = gym.fresh_process()
    participants = await fresh.coordinator.discover()
    with pytest.raises(CoordinationError) as caught:
        await fresh.coordinator.restore(
            participants, "rs-1", str(tmp_path), EPISODES, deadline_ts=deadline()
        )
    assert "invalid_checkpoint_state" in caught.value.failures[AGENT_SERVER]
    assert fresh.agent.sessions() == {} and fresh.model.staging_ledger() == {}
    assert fresh.tool.sessions() == {}
    assert all(core.phase == "idle" for core in fresh.cores.values())
    # The failed attempt 1 was retired everywhere; the rollout restarts from its task.
    result = await fresh.run(Ep("r0", 2), TASK)
    assert result["resumed_from_turn"] == 0
    assert result["transcript"] == expected_transcript("r0", TASK, seed=11)


def test_a_fresh_process_is_the_same_deployment_with_new_cores() -> None:
    """The replacement keeps names, seed and mode but has cores that served nothing."""
    gym = SimulatedGym(seed=5, resources_mode="stateless", judge=False)
    fresh = gym.fresh_process()
    assert fresh.config == gym.config == GymConfig(seed=5, resources_mode="stateless", judge=False)
    assert fresh.transport.server_names() == gym.transport.server_names()
    assert all(fresh.cores[name] is not gym.cores[name] for name in gym.cores)
    assert fresh.clock is gym.clock and fresh.faults is not gym.faults


def test_gym_config_refuses_unknown_modes_and_negative_latency() -> None:
    """A deployment configuration is validated when it is built."""
    with pytest.raises(ValueError):
        GymConfig(resources_mode="maybe")
    with pytest.raises(ValueError):
        GymConfig(model_latency=-1.0)


async def test_every_participant_names_the_gym_instance_of_the_deployment() -> None:
    """instance_id reaches every core, and a fresh process of the deployment keeps it."""
    gym = SimulatedGym(seed=1, instance_id="shard/replica-7")
    for gym_process in (gym, gym.fresh_process()):
        assert {core.gym_instance_id for core in gym_process.cores.values()} == {"shard/replica-7"}
    assert {core.gym_instance_id for core in SimulatedGym().cores.values()} == {None}


# ------------------------------------------------- generations longer than the budget

SHORT: dict[str, Any] = {"prompt": "three long generations", "turns": 3}
GENERATION = 0.4  # seconds per generation; each prepare below allows 0.2 s


async def generating(gym: SimulatedGym) -> list[asyncio.Task[Any]]:
    """Every rollout started and, after its first turn, inside its next generation."""
    runs = [gym.start(episode, SHORT) for episode in EPISODES]
    await wait_until(lambda: len(turns(gym)) == 3 and min(turns(gym).values()) >= 1)
    await wait_until(lambda: len(gym.model.core.fence.in_flight()) == 3)
    return runs


async def test_generations_running_at_prepare_are_refused_and_asked_again(
    tmp_path: Path,
) -> None:
    """wait_then_refuse (the default): a 0.2 s prepare refuses the 0.4 s generations in
    flight, every agent parks at its last turn; after resume they generate again from that
    turn, and after a restore the next attempt does: every transcript as uninterrupted."""
    gym = SimulatedGym(seed=11, model_latency=GENERATION, park_poll_seconds=0.002)
    assert gym.model.calls.policy == "wait_then_refuse"
    runs = await generating(gym)
    saved = turns(gym)
    participants = await gym.coordinator.discover()
    started = time.monotonic()
    prepared = await gym.coordinator.prepare(participants, "ck-1", deadline_ts=time.time() + 0.2)
    assert prepared.prepared and time.monotonic() - started < GENERATION
    assert gym.model.calls.refused == 3 and gym.agent.model_calls_refused == 3
    assert turns(gym) == saved  # parked at the last committed turn, nothing recorded
    status = await gym.model.core.status()
    assert status["model_calls"]["refused"] == 3
    await gym.coordinator.commit(
        participants, "ck-1", str(tmp_path), EPISODES, deadline_ts=deadline()
    )
    fresh = await restore_fresh(gym, tmp_path)
    await asyncio.gather(*runs, return_exceptions=True)
    results = await asyncio.gather(*(fresh.run(e.next_attempt(), SHORT) for e in EPISODES))
    for rollout, result in zip(ROLLOUTS, results, strict=True):
        assert result["transcript"] == expected_transcript(rollout, SHORT, seed=11)
        assert result["resumed_from_turn"] == saved[rollout]


async def test_refused_generations_continue_in_the_same_process_after_resume() -> None:
    """The same refusal, then resume: each rollout asks again and finishes unchanged."""
    gym = SimulatedGym(seed=11, model_latency=GENERATION, park_poll_seconds=0.002)
    runs = await generating(gym)
    participants = await gym.coordinator.discover()
    prepared = await gym.coordinator.prepare(participants, "ck-1", deadline_ts=time.time() + 0.2)
    assert prepared.prepared and gym.agent.model_calls_refused == 3
    await gym.coordinator.resume(participants, "ck-1", deadline_ts=deadline())
    for rollout, result in zip(ROLLOUTS, await asyncio.gather(*runs), strict=True):
        assert result["transcript"] == expected_transcript(rollout, SHORT, seed=11)


async def test_with_the_wait_policy_a_long_generation_blocks_the_prepare() -> None:
    """model_calls=wait: the same prepare is not ready; the generations are the blockers."""
    gym = SimulatedGym(
        seed=11, model_latency=GENERATION, park_poll_seconds=0.002, model_calls="wait"
    )
    runs = await generating(gym)
    participants = await gym.coordinator.discover()
    prepared = await gym.coordinator.prepare(participants, "ck-1", deadline_ts=time.time() + 0.2)
    assert not prepared.prepared and gym.model.calls.refused == 0
    assert sorted(prepared.blockers()[MODEL_SERVER]) == list(ROLLOUTS)
    await gym.coordinator.resume(participants, "ck-1", deadline_ts=deadline())
    await asyncio.gather(*runs)
