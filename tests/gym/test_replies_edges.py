"""Edges of envckpt.gym.replies the mutation campaign found untested.

A refusal names at most ten episodes (the first ten, sorted) and the server
that broke the rule; the staging keys of every model are gathered, not the
last one's; a manifest recording zero records is a count; every restore reply
from the wrong source is named, even after one that is not an object.
"""

from __future__ import annotations

from typing import Any

import pytest

from envckpt.coordination.types import Member, Participants
from envckpt.episodes import EnvironmentEpisode
from envckpt.errors import ProtocolViolation
from envckpt.gym import replies
from envckpt.protocol import Kind

# Eleven rollouts: one more than a refusal names.
ELEVEN = tuple(EnvironmentEpisode(f"r{n:02d}", 0) for n in range(11))
KEYS = [episode.capture_key for episode in ELEVEN]
SOURCE = "snap-1"


def deployment(*members: tuple[str, Kind]) -> Participants:
    return Participants(tuple(Member(name, kind) for name, kind in members))


MODEL_AND_TWO_AGENTS = deployment(
    ("policy", Kind.MODEL), ("agent-a", Kind.AGENT), ("agent-b", Kind.AGENT)
)


def model_reply(keys: list[str]) -> dict[str, Any]:
    """A model that exported ``keys``, one staging key each."""
    return {
        "episode_ids": list(keys),
        "staging_keys": [f"{key}/s" for key in keys],
        "staging_keys_by_episode": {key: [f"{key}/s"] for key in keys},
    }


def refusal_of_commit(
    participants: Participants, raw: dict[str, Any], scope: tuple[EnvironmentEpisode, ...]
) -> str:
    with pytest.raises(ProtocolViolation) as caught:
        replies.commit_summary(participants, scope, raw)
    return str(caught.value)


def names_the_first_ten_only(message: str, keys: list[str]) -> bool:
    """``message`` lists the first ten of ``keys`` (sorted) and not the eleventh."""
    ordered = sorted(keys)
    return repr(ordered[:10]) in message and repr(ordered[10]) not in message


# ------------------------------------------------------- at most ten named


def test_a_commit_no_agent_can_restore_names_ten_episodes() -> None:
    """Eleven episodes in scope and no agent: the refusal lists the first ten."""
    policy_only = deployment(("policy", Kind.MODEL))
    message = refusal_of_commit(policy_only, {"policy": model_reply(KEYS)}, ELEVEN)
    assert "the 11 episode(s) in scope" in message
    assert names_the_first_ten_only(message, KEYS)


def test_exports_outside_the_scope_are_named_ten_at_most() -> None:
    """A participant exporting eleven strangers: ten are named."""
    raw = {
        "policy": model_reply([]),
        "agent-a": {"episode_ids": KEYS, "run_episode_ids": KEYS},
        "agent-b": {"episode_ids": []},
    }
    message = refusal_of_commit(MODEL_AND_TWO_AGENTS, raw, ())
    assert "'agent-a' exported episodes outside the scope" in message
    assert names_the_first_ten_only(message, KEYS)


def test_run_episodes_an_agent_did_not_export_are_named_ten_at_most() -> None:
    """An agent naming eleven /run episodes it did not export: ten are named."""
    raw = {
        "policy": model_reply(KEYS),
        "agent-a": {"episode_ids": KEYS[:1], "run_episode_ids": ["zz", *KEYS[1:], "zzz"]},
        "agent-b": {"episode_ids": []},
    }
    message = refusal_of_commit(MODEL_AND_TWO_AGENTS, raw, ELEVEN)
    assert "'agent-a' names /run episodes it did not export" in message
    assert names_the_first_ten_only(message, ["zz", *KEYS[1:], "zzz"])


def test_episodes_two_agents_own_are_named_ten_at_most() -> None:
    """Eleven episodes both agents run as their own: ten are named."""
    raw = {
        "policy": model_reply(KEYS),
        "agent-a": {"episode_ids": KEYS, "run_episode_ids": KEYS},
        "agent-b": {"episode_ids": KEYS, "run_episode_ids": KEYS},
    }
    message = refusal_of_commit(MODEL_AND_TWO_AGENTS, raw, ELEVEN)
    assert "by two agents" in message
    assert names_the_first_ten_only(message, KEYS)


def test_episodes_no_agent_restored_are_named_ten_at_most() -> None:
    """Eleven scope episodes no agent restored: the first ten next attempts are named."""
    raw = {
        "policy": {"source_checkpoint_id": SOURCE, "restored": []},
        "agent-a": {"source_checkpoint_id": SOURCE, "restored": []},
        "agent-b": {"source_checkpoint_id": SOURCE, "restored": []},
    }
    with pytest.raises(ProtocolViolation) as caught:
        replies.check_restore_replies(
            MODEL_AND_TWO_AGENTS, ELEVEN, raw, source_checkpoint_id=SOURCE
        )
    next_keys = [episode.next_attempt().capture_key for episode in ELEVEN]
    assert names_the_first_ten_only(str(caught.value), next_keys)


# ------------------------------------------------ the server is named


def test_an_agent_without_run_episodes_is_named() -> None:
    """The refusal of a missing run_episode_ids names the agent that omitted it."""
    raw = {
        "policy": model_reply(KEYS[:1]),
        "agent-a": {"episode_ids": KEYS[:1]},
        "agent-b": {"episode_ids": []},
    }
    message = refusal_of_commit(MODEL_AND_TWO_AGENTS, raw, ELEVEN[:1])
    assert "participant 'agent-a' replied without a list of run_episode_ids" in message


def test_a_model_without_staging_keys_is_named() -> None:
    """The refusal of a missing staging_keys names the model that omitted it."""
    reply = model_reply([])
    del reply["staging_keys"]
    raw = {"policy": reply, "agent-a": {"episode_ids": []}, "agent-b": {"episode_ids": []}}
    message = refusal_of_commit(MODEL_AND_TWO_AGENTS, raw, ())
    assert "participant 'policy' replied without a list of staging_keys" in message


# ---------------------------------------------------- gathered from every reply


def test_the_staging_keys_of_every_model_are_committed() -> None:
    """Two models each staging one episode: the summary holds both models' keys."""
    two_models = deployment(("policy", Kind.MODEL), ("critic", Kind.MODEL), ("agent", Kind.AGENT))
    scope = ELEVEN[:2]
    raw = {
        "policy": model_reply(KEYS[:1]),
        "critic": model_reply(KEYS[1:2]),
        "agent": {"episode_ids": KEYS[:2], "run_episode_ids": KEYS[:2]},
    }
    for order in (raw, dict(reversed(raw.items()))):
        summary = replies.commit_summary(two_models, scope, order)
        assert summary.staging_keys == (f"{KEYS[0]}/s", f"{KEYS[1]}/s")
        assert summary.staging_keys_by_episode == {
            scope[0]: (f"{KEYS[0]}/s",),
            scope[1]: (f"{KEYS[1]}/s",),
        }


def test_a_manifest_of_zero_records_is_reported_as_zero() -> None:
    """A commit that wrote no record is a count of 0, not a missing one (negative is)."""
    raw = {
        "policy": model_reply([]) | {"manifest": {"record_count": 0}},
        "agent-a": {"episode_ids": [], "manifest": {"record_count": 1}},
        "agent-b": {"episode_ids": [], "manifest": {"record_count": -1}},
    }
    summary = replies.commit_summary(MODEL_AND_TWO_AGENTS, (), raw)
    assert summary.participant_records == {"policy": 0, "agent-a": 1}


def test_every_wrong_restore_reply_is_named_after_one_that_is_no_object() -> None:
    """A reply that is not an object does not stop the check: later wrong sources are named."""
    raw: dict[str, Any] = {
        "policy": "restored",
        "agent-a": {"source_checkpoint_id": "snap-0", "restored": []},
        "agent-b": {"source_checkpoint_id": SOURCE, "restored": []},
    }
    with pytest.raises(ProtocolViolation) as caught:
        replies.check_restore_replies(MODEL_AND_TWO_AGENTS, (), raw, source_checkpoint_id=SOURCE)
    assert "actual={'policy': 'str', 'agent-a': 'snap-0'}" in str(caught.value)
