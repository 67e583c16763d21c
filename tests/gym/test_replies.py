"""Tests for envckpt.gym.replies: the RL side's checks of participant replies (protocol.md 5).

Each test starts from a reply set that passes (``commit_replies``,
``restore_replies``) and breaks one rule of "RL-side checks on replies";
the check must raise ``ProtocolViolation``. The rule "every participant
that committed state must be live on restore" is the adapter's
(``GymCheckpointAdapter.restore``, tests/gym/test_adapter.py), not a reply check.
"""

from __future__ import annotations

from typing import Any

import pytest

from envckpt.coordination.types import ControlReplies, Member, Participants
from envckpt.episodes import EnvironmentEpisode
from envckpt.errors import ProtocolViolation
from envckpt.gym import replies
from envckpt.protocol import Kind

PARTICIPANTS = Participants(
    (
        Member("policy", Kind.MODEL),
        Member("agent-a", Kind.AGENT),
        Member("agent-b", Kind.AGENT),
        Member("tools", Kind.RESOURCES),
    )
)
SCOPE = (EnvironmentEpisode("a", 0), EnvironmentEpisode("b", 0), EnvironmentEpisode("c", 1))
SOURCE = "snap-1"


def commit_replies() -> dict[str, dict[str, Any]]:
    """Replies to a commit of SCOPE that satisfy every rule."""
    return {
        "policy": {
            "episode_ids": ["a", "b", "c-a1"],
            "staging_keys": ["a/s", "b/s", "c-a1/s", "shared"],
            "staging_keys_by_episode": {
                "a": ["a/s", "shared"],
                "b": ["b/s"],
                "c-a1": ["c-a1/s", "shared"],
            },
        },
        "agent-a": {"episode_ids": ["a", "b"], "run_episode_ids": ["a", "b"]},
        "agent-b": {"episode_ids": ["c-a1"], "run_episode_ids": ["c-a1"]},
        "tools": {"episode_ids": ["a"]},
    }


def restore_replies() -> dict[str, dict[str, Any]]:
    """Replies to a restore of SCOPE (as next attempts) that satisfy every rule."""
    return {
        "policy": {"source_checkpoint_id": SOURCE, "restored": ["a-a1", "b-a1", "c-a2"]},
        "agent-a": {"source_checkpoint_id": SOURCE, "restored": ["a-a1", "b-a1"]},
        "agent-b": {"source_checkpoint_id": SOURCE, "restored": ["c-a2"]},
        "tools": {"source_checkpoint_id": SOURCE, "restored": ["a-a1"]},
    }


def violation(raw: dict[str, Any], match: str) -> None:
    with pytest.raises(ProtocolViolation, match=match):
        replies.commit_summary(PARTICIPANTS, SCOPE, raw)


def restore_violation(raw: dict[str, Any], match: str) -> None:
    with pytest.raises(ProtocolViolation, match=match):
        replies.check_restore_replies(PARTICIPANTS, SCOPE, raw, source_checkpoint_id=SOURCE)


# ---------------------------------------------------------------- passing sets


def test_consistent_commit_replies_give_the_summary() -> None:
    """The untampered replies pass and are attributed: /run episodes, keys, participants."""
    summary = replies.commit_summary(PARTICIPANTS, SCOPE, commit_replies())
    assert summary.exported_episodes == SCOPE
    assert summary.staging_keys == ("a/s", "b/s", "c-a1/s", "shared")
    assert summary.participants == ("agent-a", "agent-b", "policy", "tools")
    assert summary.staging_keys_by_episode == {
        SCOPE[0]: ("a/s", "shared"),
        SCOPE[1]: ("b/s",),
        SCOPE[2]: ("c-a1/s", "shared"),
    }
    assert summary.unowned_live_episodes == ()


def test_consistent_restore_replies_pass() -> None:
    """The untampered restore replies pass."""
    replies.check_restore_replies(
        PARTICIPANTS, SCOPE, restore_replies(), source_checkpoint_id=SOURCE
    )


# ------------------------------------------------- rule: reply set == discovered


@pytest.mark.parametrize("change", ["missing", "extra"])
def test_commit_replies_must_come_from_exactly_the_discovered_servers(change: str) -> None:
    """A reply missing, or one from a server not discovered: unexpected participant set."""
    raw = commit_replies()
    if change == "missing":
        del raw["tools"]
    else:
        raw["judge"] = {"episode_ids": []}
    violation(raw, "commit returned an unexpected participant set")


@pytest.mark.parametrize("change", ["missing", "extra"])
def test_restore_replies_must_come_from_exactly_the_discovered_servers(change: str) -> None:
    """The same rule holds for restore."""
    raw = restore_replies()
    if change == "missing":
        del raw["policy"]
    else:
        raw["judge"] = {"source_checkpoint_id": SOURCE}
    restore_violation(raw, "restore returned an unexpected participant set")


# --------------------------------------------------- rule: exports within scope


@pytest.mark.parametrize("server", ["policy", "agent-a", "tools"])
def test_no_participant_may_export_an_episode_outside_the_scope(server: str) -> None:
    """An exported episode the commit did not ask for is refused, from any kind."""
    raw = commit_replies()
    raw[server]["episode_ids"].append("stranger")
    violation(raw, f"participant '{server}' exported episodes outside the scope")


def test_an_earlier_attempt_of_a_scope_rollout_is_outside_the_scope() -> None:
    """Scope names attempts: c attempt 0 is not c attempt 1."""
    raw = commit_replies()
    raw["tools"]["episode_ids"].append("c")
    violation(raw, "outside the scope")


# ------------------------------------------- rule: run episodes within exports


def test_an_agent_names_only_run_episodes_it_exported() -> None:
    """run_episode_ids beyond the agent's own episode_ids are refused."""
    raw = commit_replies()
    raw["agent-b"]["run_episode_ids"].append("a")
    violation(raw, "agent 'agent-b' names /run episodes it did not export")


# -------------------------------------------------- rule: one owner per episode


def test_no_episode_is_owned_by_two_agents() -> None:
    """Two agents both claiming an episode as their own /run episode is refused."""
    raw = commit_replies()
    raw["agent-b"]["episode_ids"].append("a")
    raw["agent-b"]["run_episode_ids"].append("a")
    violation(raw, r"exported as their own /run episode by two agents: \['a'\]")


# ---------------------------------------- rule: staging keys attributed exactly


def test_a_committed_staging_key_must_be_attributed() -> None:
    """A staging key no episode is attributed: the replies are inconsistent."""
    raw = commit_replies()
    raw["policy"]["staging_keys"].append("orphan")
    violation(raw, "commit replies are inconsistent: .*unattributed=\\['orphan'\\]")


def test_an_attributed_staging_key_must_be_committed() -> None:
    """An attribution naming a key that was not committed: inconsistent."""
    raw = commit_replies()
    raw["policy"]["staging_keys_by_episode"]["b"].append("ghost")
    violation(raw, "commit replies are inconsistent: .*unlisted=\\['ghost'\\]")


# --------------------------------------- rule: unowned agent sessions reported


def test_agent_sessions_no_agent_runs_are_reported_unowned() -> None:
    """An exported agent session that is nobody's /run episode is reported, not exported."""
    raw = commit_replies()
    raw["agent-a"]["run_episode_ids"] = ["a"]
    summary = replies.commit_summary(PARTICIPANTS, SCOPE, raw)
    assert summary.unowned_live_episodes == (SCOPE[1],)
    assert SCOPE[1] not in summary.exported_episodes


def test_an_agent_owning_an_episode_another_agent_parks_is_no_conflict() -> None:
    """A session parked in one agent and run by another is owned once: accepted."""
    raw = commit_replies()
    raw["agent-b"]["episode_ids"].append("a")
    summary = replies.commit_summary(PARTICIPANTS, SCOPE, raw)
    assert summary.unowned_live_episodes == ()


# ------------------------------------------------ rule: restore source and scope


def test_a_commit_of_episodes_no_agent_can_restore_is_refused() -> None:
    """A deployment without an agent: its snapshot could never be restored, so the commit of
    a non-empty scope is refused (an empty scope is fine)."""
    without_agents = Participants((Member("policy", Kind.MODEL), Member("tools", Kind.RESOURCES)))
    raw = commit_replies()
    raw = {"policy": raw["policy"], "tools": raw["tools"]}
    with pytest.raises(ProtocolViolation, match="no agent takes part"):
        replies.commit_summary(without_agents, SCOPE, raw)
    empty = {
        "policy": {"episode_ids": [], "staging_keys": [], "staging_keys_by_episode": {}},
        "tools": {"episode_ids": []},
    }
    assert replies.commit_summary(without_agents, (), empty).exported_episodes == ()


def test_every_participant_must_restore_from_the_expected_source() -> None:
    """A participant restoring another checkpoint's state is refused, naming it."""
    raw = restore_replies()
    raw["tools"]["source_checkpoint_id"] = "snap-0"
    restore_violation(raw, "wrong checkpoint: expected='snap-1', actual=\\{'tools': 'snap-0'\\}")


def test_a_restore_reply_without_a_source_is_refused() -> None:
    """A reply that does not name its source cannot be trusted to have the right one."""
    raw = restore_replies()
    del raw["policy"]["source_checkpoint_id"]
    restore_violation(raw, "wrong checkpoint")


def test_a_restore_reply_that_is_not_an_object_is_refused() -> None:
    """A reply that is not a JSON object is reported with its type."""
    raw: dict[str, Any] = restore_replies()
    raw["tools"] = ["ok"]
    restore_violation(raw, "actual=\\{'tools': 'list'\\}")


def test_every_restored_episode_must_be_restored_by_an_agent() -> None:
    """A scope episode no agent restored (as its next attempt) is refused, naming it."""
    raw = restore_replies()
    raw["agent-b"]["restored"] = []
    restore_violation(raw, r"no agent restored these episodes: \['c-a2'\]")


def test_an_agent_restoring_the_saved_attempt_instead_of_the_next_is_refused() -> None:
    """Restored attempts are the next ones: the saved attempt's key does not count."""
    raw = restore_replies()
    raw["agent-a"]["restored"] = ["a", "b-a1"]
    restore_violation(raw, r"\['a-a1'\]")


# ---------------------------------------------------------- malformed replies


@pytest.mark.parametrize("value", [None, "a", {"a": 1}, [1]])
def test_episode_ids_must_be_a_list_of_strings(value: object) -> None:
    """episode_ids absent, a string, an object or non-strings: refused."""
    raw = commit_replies()
    raw["tools"]["episode_ids"] = value
    violation(raw, "participant 'tools' replied without a list of episode_ids")


def test_an_agent_that_exported_must_name_its_run_episodes() -> None:
    """An agent exporting sessions without run_episode_ids is refused."""
    raw = commit_replies()
    del raw["agent-a"]["run_episode_ids"]
    violation(raw, "replied without a list of run_episode_ids")


def test_an_agent_that_exported_nothing_needs_no_run_episodes() -> None:
    """An agent with nothing exported may omit run_episode_ids."""
    raw = commit_replies()
    raw["agent-b"] = {"episode_ids": []}
    raw["policy"]["staging_keys"].remove("c-a1/s")
    del raw["policy"]["staging_keys_by_episode"]["c-a1"]
    summary = replies.commit_summary(PARTICIPANTS, SCOPE, raw)
    assert summary.exported_episodes == SCOPE[:2]


def test_a_model_must_attribute_its_staging_keys() -> None:
    """A model reply without staging_keys_by_episode, or with a non-list entry, is refused."""
    raw = commit_replies()
    del raw["policy"]["staging_keys_by_episode"]
    violation(raw, "model 'policy' replied without staging_keys_by_episode")
    raw = commit_replies()
    raw["policy"]["staging_keys_by_episode"]["a"] = "a/s"
    violation(raw, "staging keys of 'a' are not a list")
    raw = commit_replies()
    del raw["policy"]["staging_keys"]
    violation(raw, "replied without a list of staging_keys")


def test_an_attribution_to_a_malformed_capture_key_is_refused() -> None:
    """A key that names no episode makes the replies inconsistent, not a crash."""
    raw = commit_replies()
    raw["policy"]["staging_keys_by_episode"]["bad key!"] = []
    violation(raw, "commit replies are inconsistent")


def test_an_agents_restored_list_must_be_a_list_of_strings() -> None:
    """An agent restore reply without a list of restored keys is refused."""
    raw = restore_replies()
    raw["agent-a"]["restored"] = "a-a1"
    restore_violation(raw, "participant 'agent-a' replied without a list of restored")


def test_the_commit_summary_keeps_each_participant_s_records_and_call_seconds() -> None:
    """Records from each reply's manifest (a malformed count is not one), seconds from the
    coordinator's timed replies."""
    raw = commit_replies()
    raw["agent-a"]["manifest"] = {"record_count": 2}
    raw["agent-b"]["manifest"] = {"record_count": "1"}
    raw["tools"]["manifest"] = {"record_count": True}
    timed = ControlReplies({"policy": 0.1, "agent-a": 0.2}, raw)
    summary = replies.commit_summary(PARTICIPANTS, SCOPE, timed)
    assert summary.participant_records == {"agent-a": 2}
    assert summary.participant_seconds == {"policy": 0.1, "agent-a": 0.2}
    assert replies.commit_summary(PARTICIPANTS, SCOPE, commit_replies()).participant_seconds == {}
