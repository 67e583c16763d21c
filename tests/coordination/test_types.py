"""Tests for envckpt.coordination.types: members, the ordered participant set, prepare results."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envckpt.coordination.types import (
    ControlReplies,
    Member,
    Participants,
    PrepareResult,
    call_seconds,
    interned_member,
    interned_participants,
)
from envckpt.episodes import EnvironmentEpisode
from envckpt.protocol import STAGES, Kind, Mode

from helpers.examples import examples
from helpers.participant_doubles import ep

# --------------------------------------------------------------------- Member


def test_a_member_reads_its_kind_and_mode_from_wire_strings() -> None:
    """Strings from a status reply become the protocol's enums; mode defaults to export_restore."""
    member = Member("policy", "model")  # type: ignore[arg-type]
    assert member.kind is Kind.MODEL and member.mode is Mode.EXPORT_RESTORE
    assert Member("tools", "resources", "restart_only").mode is Mode.RESTART_ONLY  # type: ignore[arg-type]
    assert member.commit_stop is False


@pytest.mark.parametrize(("kind", "mode"), [("judge", "export_restore"), ("model", "sometimes")])
def test_a_member_refuses_an_unknown_kind_or_mode(kind: str, mode: str) -> None:
    """An unknown kind or mode is a ValueError, not a member."""
    with pytest.raises(ValueError, match="unknown participant"):
        Member("x", kind, mode)  # type: ignore[arg-type]


def test_a_members_stage_is_its_kinds_place_in_the_prepare_order() -> None:
    """stage indexes STAGES: environment first, resources last."""
    assert [Member("s", kind).stage for kind in STAGES] == list(range(len(STAGES)))


# --------------------------------------------------------------- Participants

members = st.lists(
    st.builds(
        Member,
        st.text(alphabet="abcxyz-", min_size=1, max_size=4),
        st.sampled_from(list(Kind)),
    ),
    max_size=6,
    unique_by=lambda member: member.server_name,
)


@settings(max_examples=examples(200), deadline=None)
@given(members=members, data=st.data())
def test_participants_are_ordered_by_stage_then_name_whatever_the_input_order(
    members: list[Member], data: st.DataObject
) -> None:
    """Any permutation of the same members gives the same stage-then-name order."""
    shuffled = data.draw(st.permutations(members))
    participants = Participants(tuple(shuffled))
    assert participants.members == tuple(
        sorted(members, key=lambda m: (STAGES.index(m.kind), m.server_name))
    )
    assert participants == Participants(tuple(members))
    assert participants.names == {m.server_name for m in members}


def test_duplicate_server_names_are_refused() -> None:
    """Two members with one server name cannot be one deployment."""
    with pytest.raises(ValueError, match="duplicate participant server names"):
        Participants((Member("a", Kind.AGENT), Member("a", Kind.MODEL)))


def test_an_interned_member_is_the_member_of_those_fields_made_once() -> None:
    """Equal fields give the same Member object, equal to a freshly made one."""
    made = interned_member("policy", Kind.MODEL, Mode.EXPORT_RESTORE, commit_stop=True)
    assert made == Member("policy", Kind.MODEL, Mode.EXPORT_RESTORE, commit_stop=True)
    assert interned_member("policy", Kind.MODEL, Mode.EXPORT_RESTORE, commit_stop=True) is made
    assert interned_member("policy", Kind.MODEL, Mode.EXPORT_RESTORE, commit_stop=False) != made


def test_interned_participants_are_ordered_and_checked_like_participants() -> None:
    """The shared value is ordered by stage then name, and duplicates are still refused."""
    tools, policy = Member("tools", Kind.RESOURCES), Member("policy", Kind.MODEL)
    made = interned_participants((tools, policy))
    assert made.members == (policy, tools)
    assert interned_participants((tools, policy)) is made
    with pytest.raises(ValueError, match="duplicate"):
        interned_participants((policy, Member("policy", Kind.AGENT)))


def test_members_are_found_by_kind_and_by_name() -> None:
    """of_kind keeps the order; member(name) finds one or raises KeyError."""
    participants = Participants(
        (Member("b", Kind.AGENT), Member("p", Kind.MODEL), Member("a", Kind.AGENT))
    )
    assert [m.server_name for m in participants.of_kind("agent")] == ["a", "b"]
    assert [m.server_name for m in participants.of_kind(Kind.MODEL, Kind.AGENT)] == [
        "p",
        "a",
        "b",
    ]
    assert participants.of_kind("resources") == ()
    assert participants.member("p").kind is Kind.MODEL
    with pytest.raises(KeyError):
        participants.member("judge")


# -------------------------------------------------------------- PrepareResult


def reply(phase: str, blockers: list[str] = (), restarts: list[str] = ()) -> dict[str, Any]:  # type: ignore[assignment]
    return {"phase": phase, "report": {"blockers": list(blockers), "restarts": list(restarts)}}


def test_replies_are_a_read_only_copy() -> None:
    """The result keeps its own read-only copy of the replies."""
    replies = {"policy": reply("prepared")}
    result = PrepareResult(prepared=True, replies=replies)
    replies["agent"] = reply("preparing")
    assert set(result.replies) == {"policy"}
    with pytest.raises(TypeError):
        result.replies["agent"] = reply("preparing")  # type: ignore[index]


def test_blockers_are_listed_for_unprepared_servers_only() -> None:
    """Each server not in phase prepared lists its blockers, sorted by server."""
    result = PrepareResult(
        prepared=False,
        replies={
            "policy": reply("prepared"),
            "b-agent": reply("preparing", ["t2", "t1"]),
            "a-agent": reply("preparing"),
        },
    )
    assert result.blockers() == {"a-agent": (), "b-agent": ("t2", "t1")}
    assert list(result.blockers()) == ["a-agent", "b-agent"]


def test_a_reply_without_a_report_has_no_blockers_and_no_restarts() -> None:
    """A reply with no report, or a null one, reads as nothing blocking and nothing restarting."""
    result = PrepareResult(
        prepared=False,
        replies={"agent": {"phase": "preparing"}, "model": {"phase": "preparing", "report": None}},
    )
    assert result.blockers() == {"agent": (), "model": ()}
    assert result.restarts() == frozenset()


restart_keys = st.lists(
    st.builds(ep, st.sampled_from(("a", "b", "c")), st.integers(0, 2)).map(lambda e: e.capture_key),
    max_size=3,
)


@settings(max_examples=examples(200), deadline=None)
@given(
    per_server=st.dictionaries(st.sampled_from(("s1", "s2", "s3")), restart_keys, max_size=3),
    episodes=st.lists(st.builds(ep, st.sampled_from(("a", "b", "c")), st.integers(0, 2))),
)
def test_restarts_are_the_union_and_continued_is_the_rest_in_order(
    per_server: dict[str, list[str]], episodes: list[EnvironmentEpisode]
) -> None:
    """An episode restarts if any server reports it; continued keeps the others in order."""
    result = PrepareResult(
        prepared=True,
        replies={server: reply("prepared", restarts=keys) for server, keys in per_server.items()},
    )
    union = {EnvironmentEpisode.from_capture_key(k) for keys in per_server.values() for k in keys}
    assert result.restarts() == union
    assert result.continued(episodes) == tuple(e for e in episodes if e not in union)


# ------------------------------------------------------------- call timings


def test_control_replies_are_a_dict_with_each_call_s_seconds() -> None:
    """A dict of replies to callers that index it; call_seconds reads its timings."""
    replies = ControlReplies({"a": 0.25}, {"a": {"phase": "prepared"}})
    assert replies == {"a": {"phase": "prepared"}} and isinstance(replies, dict)
    assert call_seconds(replies) == {"a": 0.25}
    assert call_seconds({"a": {}}) == {}  # a coordination that does not time its calls


def test_a_prepare_result_keeps_a_read_only_copy_of_its_timings() -> None:
    """The seconds given are copied; none given is empty."""
    seconds = {"agent": 0.5}
    result = PrepareResult(prepared=True, replies={}, seconds=seconds)
    seconds["agent"] = 9.0
    assert result.seconds == {"agent": 0.5}
    with pytest.raises(TypeError):
        result.seconds["agent"] = 1.0  # type: ignore[index]
    assert PrepareResult(prepared=True, replies={}).seconds == {}
