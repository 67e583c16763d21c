"""Tests for envckpt.coordination.coordinator over the in-process transport."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from envckpt.clock import SYSTEM_CLOCK
from envckpt.coordination.coordinator import (
    CLEANUP_SECONDS,
    CONTROL_CONNECT_TRIES,
    DISCOVER_TIMEOUT_SECONDS,
    DISCOVER_TRIES,
    REPLY_SLACK_SECONDS,
    Coordinator,
)
from envckpt.coordination.transport import ControlReply, TransportFailure
from envckpt.coordination.types import Member, Participants, PrepareResult, call_seconds
from envckpt.errors import CoordinationError
from envckpt.participant import store
from envckpt.protocol import Kind, Mode

from helpers.participant_doubles import (
    START,
    Cluster,
    Sent,
    TransportDouble,
    Turn,
    drain_tasks,
    ep,
)

ORDERED = [
    ("env", "environment"),
    ("policy", "model"),
    ("agent-a", "agent"),
    ("agent-b", "agent"),
    ("tools", "resources"),
]


class ScriptedTransport(TransportDouble):
    """Answers status with canned replies (or raises) per server."""

    def __init__(self, replies: Mapping[str, ControlReply | Exception]) -> None:
        self.replies = dict(replies)
        self.calls: list[tuple[str, float, int]] = []

    def server_names(self) -> tuple[str, ...]:
        return tuple(sorted(self.replies))

    async def answer(self, sent: Sent) -> ControlReply:
        self.calls.append((sent.server, sent.timeout, sent.connect_tries))
        reply = self.replies[sent.server]
        if isinstance(reply, Exception):
            raise reply
        return reply


def status(kind: str, **extra: Any) -> ControlReply:
    return ControlReply(200, {"kind": kind, "phase": "idle", **extra})


async def discovered(cluster: Cluster) -> Participants:
    return await cluster.coordinator.discover()


async def prepared_after_r1() -> tuple[Cluster, Participants, PrepareResult]:
    """A discovered cluster that ran r1 everywhere, and its prepare of c1."""
    cluster = Cluster()
    participants = await discovered(cluster)
    await cluster.run_everywhere(ep("r1"))
    result = await cluster.coordinator.prepare(participants, "c1", deadline_ts=cluster.deadline())
    return cluster, participants, result


async def prepared_past_a_turn_in(
    server: str,
) -> tuple[Cluster, Participants, Turn, PrepareResult]:
    """A discovered cluster whose ``server`` holds r1 in flight, and the prepare of c1 it
    blocks."""
    cluster = Cluster()
    participants = await discovered(cluster)
    turn = await Turn.start(cluster.cores[server], ep("r1"))
    result = await cluster.coordinator.prepare(participants, "c1", deadline_ts=cluster.deadline())
    return cluster, participants, turn, result


# --------------------------------------------------------------------- discover


async def test_discover_orders_by_stage_then_name_and_skips_non_participants() -> None:
    """Members come back by stage then server name; the judge (404) is skipped."""
    cluster = Cluster()
    participants = await discovered(cluster)
    assert [(m.server_name, m.kind) for m in participants.members] == ORDERED
    assert "judge" not in participants.names
    assert all(m.mode == "export_restore" for m in participants.members)
    assert {sent.server for sent in cluster.transport.sent} == {*cluster.cores, "judge"}
    assert all(
        (sent.method, sent.route, sent.timeout, sent.connect_tries)
        == ("GET", "status", DISCOVER_TIMEOUT_SECONDS, DISCOVER_TRIES)
        for sent in cluster.transport.sent
    )


async def test_discover_reads_an_absent_mode_as_export_restore() -> None:
    """Older Gym builds omit mode; it reads as export_restore."""
    transport = ScriptedTransport(
        {"policy": status("model"), "tools": status("resources", mode="restart_only")}
    )
    participants = await Coordinator(transport).discover()
    assert participants.members == (
        Member("policy", "model", "export_restore"),
        Member("tools", "resources", "restart_only"),
    )


async def test_discover_failures_aggregate() -> None:
    """Every failing server is named in one CoordinationError."""
    transport = ScriptedTransport(
        {
            "policy": status("model"),
            "down": TransportFailure("connection refused"),
            "locked": ControlReply(401, {"error": {"code": "unauthorized", "detail": "no"}}),
            "odd": status("judge"),
            "moody": status("agent", mode="sometimes"),
            "text": ControlReply(500, None, raw="Internal Server Error"),
            "aux": ControlReply(404, {"detail": "Not Found"}),
        }
    )
    with pytest.raises(CoordinationError) as caught:
        await Coordinator(transport).discover()
    failures = caught.value.failures
    assert caught.value.operation == "discover"
    assert set(failures) == {"down", "locked", "odd", "moody", "text"}
    assert "connection refused" in failures["down"]
    assert failures["locked"].startswith("unauthorized")
    assert "unknown participant kind" in failures["odd"]
    assert "unknown participant mode" in failures["moody"]
    assert failures["text"] == "HTTP 500 Internal Server Error"


async def test_discover_without_a_policy_model_fails() -> None:
    """A deployment with no model participant fails discovery."""
    transport = ScriptedTransport({"agent": status("agent"), "judge": ControlReply(404, None)})
    with pytest.raises(CoordinationError) as caught:
        await Coordinator(transport).discover()
    assert caught.value.failures == {"deployment": "no policy model takes part in checkpoints"}


async def test_discover_allows_environment_participants() -> None:
    """The coordinator itself accepts environment participants (the RL side refuses them)."""
    transport = ScriptedTransport({"env": status("environment"), "policy": status("model")})
    participants = await Coordinator(transport).discover()
    assert [m.kind for m in participants.members] == ["environment", "model"]


async def test_discover_unreachable_fault_fails() -> None:
    """An unreachable server fails discovery outright."""
    cluster = Cluster()
    cluster.faults.add("unreachable", server="agent-b", route="status")
    with pytest.raises(CoordinationError) as caught:
        await discovered(cluster)
    assert set(caught.value.failures) == {"agent-b"}


async def test_discover_asks_every_server_at_once() -> None:
    """No status request waits for another's reply: each is answered only once all have arrived."""
    arrived: list[str] = []
    everyone = asyncio.Event()

    class MeetingTransport(ScriptedTransport):
        async def request(self, server: str, *args: Any, **kwargs: Any) -> ControlReply:
            arrived.append(server)
            if len(arrived) == len(self.replies):
                everyone.set()
            await asyncio.wait_for(everyone.wait(), 5)  # one at a time would time out here
            return await super().request(server, *args, **kwargs)

    transport = MeetingTransport(
        {"agent": status("agent"), "policy": status("model"), "tools": status("resources")}
    )
    participants = await Coordinator(transport).discover()
    assert participants.names == {"agent", "policy", "tools"}


async def test_discover_lets_an_error_that_is_not_a_transport_failure_go_on() -> None:
    """A bug in this process (not a failing server) is raised as it is, not named a failure."""
    transport = ScriptedTransport({"policy": status("model"), "tools": RuntimeError("a bug")})
    with pytest.raises(RuntimeError, match="a bug"):
        await Coordinator(transport).discover()


async def test_deployments_that_answer_alike_share_one_participants_value() -> None:
    """Equal answers give the same frozen Participants object; a different answer another."""
    replies = {"agent": status("agent"), "policy": status("model", capabilities=["commit_stop"])}
    first = await Coordinator(ScriptedTransport(replies)).discover()
    second = await Coordinator(ScriptedTransport(replies)).discover()
    assert second is first
    assert first == Participants(
        members=(Member("policy", Kind.MODEL, commit_stop=True), Member("agent", Kind.AGENT))
    )
    restart_only = {**replies, "agent": status("agent", mode="restart_only")}
    other = await Coordinator(ScriptedTransport(restart_only)).discover()
    assert other is not first and other.member("agent").mode is Mode.RESTART_ONLY
    assert other.member("policy") is first.member("policy")


def test_coordinators_given_no_clock_share_the_system_clock() -> None:
    """Without a clock every coordinator reads the one SYSTEM_CLOCK (no clock per instance)."""
    transport = ScriptedTransport({"policy": status("model")})
    first, second = Coordinator(transport), Coordinator(transport)
    assert first.clock is SYSTEM_CLOCK and second.clock is SYSTEM_CLOCK


# ---------------------------------------------------------------------- prepare


async def test_prepare_all_ready() -> None:
    """With every episode parked every stage prepares and restarts are empty."""
    cluster, _, result = await prepared_after_r1()
    assert result.prepared
    assert set(result.replies) == set(cluster.cores)
    assert result.blockers() == {}
    assert result.restarts() == frozenset()
    assert set(cluster.phases().values()) == {"prepared"}
    assert cluster.transport.servers_of("prepare") == [name for name, _ in ORDERED]


async def test_prepare_stops_at_the_first_unready_stage() -> None:
    """An unready agent stage leaves the resources stage untouched and idle."""
    cluster, _, turn, result = await prepared_past_a_turn_in("agent-b")
    assert not result.prepared
    assert result.blockers() == {"agent-b": ("r1",)}
    assert set(result.replies) == {"env", "policy", "agent-a", "agent-b"}
    assert cluster.phases() == {
        "env": "prepared",
        "policy": "prepared",
        "agent-a": "prepared",
        "agent-b": "preparing",
        "tools": "idle",
    }
    assert "tools" not in cluster.transport.servers_of("prepare")
    await turn.finish()


async def test_prepare_and_commit_time_each_participant_s_call(tmp_path: Path) -> None:
    """Every contacted server has its call's seconds (monotonic), none it did not contact."""
    cluster, participants, turn, blocked = await prepared_past_a_turn_in("agent-b")
    assert set(blocked.seconds) == {"env", "policy", "agent-a", "agent-b"}  # tools not reached
    assert all(seconds >= 0 for seconds in blocked.seconds.values())
    await turn.finish()
    await cluster.coordinator.resume(participants, "c1", deadline_ts=cluster.deadline())
    _, _, replies = await committed_cluster(tmp_path)
    assert set(call_seconds(replies)) == set(replies) == set(cluster.cores)


async def test_prepare_unready_environment_leaves_every_later_stage_idle() -> None:
    """An unready first stage means no later stage is contacted."""
    cluster, _, turn, result = await prepared_past_a_turn_in("env")
    assert not result.prepared
    assert set(result.replies) == {"env"}
    assert [p for n, p in cluster.phases().items() if n != "env"] == ["idle"] * 4
    await turn.finish()


async def test_prepare_restarts_are_the_union_over_replies() -> None:
    """An episode restarts if any participant reports it; continued() drops it."""
    kinds = (("policy", "model", "export_restore"), ("tools", "resources", "restart_only"))
    cluster = Cluster(kinds=kinds)
    participants = await discovered(cluster)
    await cluster.run_everywhere(ep("keep"))
    cluster.hooks["tools"].put(ep("lost"))
    result = await cluster.coordinator.prepare(participants, "c1", deadline_ts=cluster.deadline())
    assert result.prepared
    assert result.restarts() == {ep("keep"), ep("lost")}
    assert result.continued([ep("keep"), ep("other")]) == (ep("other"),)


async def test_prepare_failure_raises_coordination_error() -> None:
    """A participant that fails prepare raises one CoordinationError naming it."""
    cluster = Cluster()
    participants = await discovered(cluster)
    cluster.faults.add("error", server="policy", route="prepare")
    with pytest.raises(CoordinationError) as caught:
        await cluster.coordinator.prepare(participants, "c1", deadline_ts=cluster.deadline())
    assert caught.value.failures == {"policy": "HTTP 500 Internal Server Error"}
    assert cluster.phases()["agent-a"] == "idle"


async def test_per_call_timeout_is_deadline_minus_now_plus_slack() -> None:
    """Each control call is bounded by deadline_ts - now + 5 s."""
    cluster = Cluster()
    participants = await discovered(cluster)
    cluster.transport.sent.clear()
    await cluster.coordinator.prepare(participants, "c1", deadline_ts=START + 42)
    await cluster.coordinator.renew(participants, "c1", deadline_ts=START)
    timeouts = {(s.route, s.timeout, s.connect_tries) for s in cluster.transport.sent}
    assert timeouts == {
        ("prepare", 42 + REPLY_SLACK_SECONDS, CONTROL_CONNECT_TRIES),
        ("renew", REPLY_SLACK_SECONDS, CONTROL_CONNECT_TRIES),
    }


# ----------------------------------------------------------------------- resume


async def test_resume_runs_in_reverse_stage_order() -> None:
    """resume reopens resources first and the environment last."""
    cluster = Cluster()
    participants = await discovered(cluster)
    await cluster.coordinator.prepare(participants, "c1", deadline_ts=cluster.deadline())
    await cluster.coordinator.resume(participants, "c1", deadline_ts=cluster.deadline())
    order = cluster.transport.servers_of("resume")
    assert order[0] == "tools" and order[-1] == "env"
    assert set(order[1:3]) == {"agent-a", "agent-b"} and order[3] == "policy"
    assert set(cluster.phases().values()) == {"idle"}


async def test_resume_keeps_going_past_failures() -> None:
    """Failing participants do not stop the others from resuming; one error names all."""
    cluster = Cluster()
    participants = await discovered(cluster)
    await cluster.coordinator.prepare(participants, "c1", deadline_ts=cluster.deadline())
    cluster.faults.add("unreachable", server="agent-a", route="resume")
    cluster.faults.add("error", server="policy", route="resume")
    with pytest.raises(CoordinationError) as caught:
        await cluster.coordinator.resume(participants, "c1", deadline_ts=cluster.deadline())
    assert caught.value.operation == "resume"
    assert set(caught.value.failures) == {"agent-a", "policy"}
    assert caught.value.failures["policy"] == "HTTP 500 Internal Server Error"
    assert "unreachable" in caught.value.failures["agent-a"]
    assert cluster.phases() == {
        "env": "idle",
        "policy": "prepared",
        "agent-a": "prepared",
        "agent-b": "idle",
        "tools": "idle",
    }


# ---------------------------------------------------------------- retire/forget


async def test_retire_runs_callers_before_callees() -> None:
    """retire goes to the environment, then agents, then model and resources."""
    cluster = Cluster()
    participants = await discovered(cluster)
    cluster.transport.sent.clear()
    await cluster.coordinator.retire(
        participants, "c1", [ep("r1", 1), ep("r2")], deadline_ts=cluster.deadline()
    )
    order = cluster.transport.servers_of("retire")
    assert order[0] == "env"
    assert set(order[1:3]) == {"agent-a", "agent-b"}
    assert set(order[3:]) == {"policy", "tools"}
    assert cluster.transport.sent[0].body == {
        "checkpoint_id": "c1",
        "deadline_ts": cluster.deadline(),
        "episode_ids": [{"rollout_id": "r1", "attempt": 1}, {"rollout_id": "r2", "attempt": 0}],
    }
    assert all(core.fence.mark("r1") == 1 for core in cluster.cores.values())


async def test_forget_runs_callers_before_callees_with_sorted_ids() -> None:
    """forget follows the retire order and sends sorted, de-duplicated rollout ids."""
    cluster = Cluster()
    participants = await discovered(cluster)
    cluster.transport.sent.clear()
    await cluster.coordinator.forget(
        participants, "c1", ["r2", "r1", "r2"], deadline_ts=cluster.deadline()
    )
    order = cluster.transport.servers_of("forget")
    assert order[0] == "env" and set(order[1:3]) == {"agent-a", "agent-b"}
    assert set(order[3:]) == {"policy", "tools"}
    assert {tuple(s.body["rollout_ids"]) for s in cluster.transport.sent if s.body} == {
        ("r1", "r2")
    }


async def test_retire_stops_before_callees_when_a_caller_fails() -> None:
    """A failing agent retire leaves the model and resources untouched."""
    cluster = Cluster()
    participants = await discovered(cluster)
    cluster.faults.add("error", server="agent-a", route="retire")
    with pytest.raises(CoordinationError):
        await cluster.coordinator.retire(
            participants, "c1", [ep("r1")], deadline_ts=cluster.deadline()
        )
    assert "policy" not in cluster.transport.servers_of("retire")
    assert cluster.cores["policy"].fence.mark("r1") is None


async def test_empty_retire_and_forget_send_nothing() -> None:
    """An empty list is a no-op: no request at all."""
    cluster = Cluster()
    participants = await discovered(cluster)
    cluster.transport.sent.clear()
    await cluster.coordinator.retire(participants, "c1", [], deadline_ts=cluster.deadline())
    await cluster.coordinator.forget(participants, "c1", [], deadline_ts=cluster.deadline())
    assert cluster.transport.sent == []


# ------------------------------------------------------------- commit / restore


async def committed_cluster(tmp_path: Path) -> tuple[Cluster, Participants, dict[str, Any]]:
    cluster = Cluster()
    participants = await discovered(cluster)
    await cluster.run_everywhere(ep("r1"), turn=2)
    await cluster.run_everywhere(ep("r2", 1), turn=4)
    result = await cluster.coordinator.prepare(participants, "c1", deadline_ts=cluster.deadline())
    assert result.prepared
    replies = await cluster.coordinator.commit(
        participants, "c1", str(tmp_path), [ep("r1"), ep("r2", 1)], deadline_ts=cluster.deadline()
    )
    await cluster.coordinator.resume(participants, "c1", deadline_ts=cluster.deadline())
    return cluster, participants, replies


async def test_commit_fans_out_to_everyone(tmp_path: Path) -> None:
    """commit reaches every participant and returns each one's reply."""
    cluster, _, replies = await committed_cluster(tmp_path)
    assert set(replies) == set(cluster.cores)
    assert all(reply["episode_ids"] == ["r1", "r2-a1"] for reply in replies.values())
    assert replies["policy"]["staging_keys"] == ["r1/stage", "r2-a1/stage"]
    for name, core in cluster.cores.items():
        manifest = store.read_manifest(tmp_path, kind=core.kind, instance=name)
        assert manifest.checkpoint_id == "c1"
    commits = [s for s in cluster.transport.sent if s.route == "commit"]
    assert all("stop" not in (s.body or {}) for s in commits)


async def test_commit_sends_stop_only_when_true(tmp_path: Path) -> None:
    """stop is sent only when true, and a null scope means everything."""
    cluster = Cluster()
    participants = await discovered(cluster)
    await cluster.coordinator.prepare(participants, "c1", deadline_ts=cluster.deadline())
    cluster.faults.add("error", route="commit", times=-1)  # stop before any write
    with pytest.raises(CoordinationError):
        await cluster.coordinator.commit(
            participants, "c1", str(tmp_path), None, deadline_ts=cluster.deadline(), stop=True
        )
    bodies = [s.body for s in cluster.transport.sent if s.route == "commit"]
    assert len(bodies) == 5
    assert all(b is not None and b["stop"] is True and b["episode_ids"] is None for b in bodies)


async def test_stop_goes_only_to_participants_that_declare_it(tmp_path: Path) -> None:
    """A participant whose status lacks commit_stop (Gym's, older builds) never gets stop."""
    cluster = Cluster()
    participants = await discovered(cluster)
    assert all(member.commit_stop for member in participants.members)
    mixed = Participants(
        members=tuple(
            dataclasses.replace(m, commit_stop=m.server_name != "policy")
            for m in participants.members
        )
    )
    await cluster.coordinator.prepare(mixed, "c1", deadline_ts=cluster.deadline())
    await cluster.coordinator.commit(
        mixed, "c1", str(tmp_path), None, deadline_ts=cluster.deadline(), stop=True
    )
    bodies = {s.server: s.body for s in cluster.transport.sent if s.route == "commit"}
    assert "stop" not in (bodies.pop("policy") or {})
    assert all(b is not None and b["stop"] is True for b in bodies.values())
    assert cluster.hooks["policy"].released == 0
    assert all(cluster.hooks[name].released == 1 for name in bodies)


async def test_discover_reads_declared_capabilities() -> None:
    """commit_stop counts only when status lists it; unknown entries are ignored."""
    transport = ScriptedTransport(
        {
            "policy": status("model", capabilities=["later-feature", 3, {}, "commit_stop"]),
            "agent": status("agent", capabilities="commit_stop"),
            "tools": status("resources"),
        }
    )
    participants = await Coordinator(transport).discover()
    declared = {m.server_name: m.commit_stop for m in participants.members}
    assert declared == {"policy": True, "agent": False, "tools": False}


async def test_restore_fans_out_and_renew_reaches_everyone(tmp_path: Path) -> None:
    """restore installs next attempts everywhere; renew then reaches every participant."""
    source, _, _ = await committed_cluster(tmp_path)
    cluster = source.fresh()
    participants = await discovered(cluster)
    replies = await cluster.coordinator.restore(
        participants,
        "rst-1",
        str(tmp_path),
        [ep("r1"), ep("r2", 1)],
        deadline_ts=cluster.deadline(),
    )
    assert set(replies) == set(cluster.cores)
    assert all(r["source_checkpoint_id"] == "c1" for r in replies.values())
    assert all(r["restored"] == ["r1-a1", "r2-a2"] for r in replies.values())
    assert set(cluster.phases().values()) == {"restored"}
    await cluster.coordinator.renew(participants, "rst-1", deadline_ts=cluster.deadline(900))
    assert set(cluster.transport.servers_of("renew")) == set(cluster.cores)
    assert all(
        core.lease_expires_at == cluster.deadline(900) + core.lease_grace
        for core in cluster.cores.values()
    )


async def test_restore_is_all_or_nothing(tmp_path: Path) -> None:
    """One failed restore retires the next attempts everywhere, resumes all, then raises."""
    source, _, _ = await committed_cluster(tmp_path)
    cluster = source.fresh()
    participants = await discovered(cluster)
    cluster.faults.add("error", server="tools", route="restore")
    deadline = cluster.deadline(1)
    with pytest.raises(CoordinationError) as caught:
        await cluster.coordinator.restore(
            participants, "rst-1", str(tmp_path), [ep("r1"), ep("r2", 1)], deadline_ts=deadline
        )
    assert caught.value.operation == "restore"
    assert caught.value.failures == {"tools": "HTTP 500 Internal Server Error"}
    assert set(cluster.phases().values()) == {"idle"}
    for core in cluster.cores.values():
        assert core.fence.mark("r1") == 1 and core.fence.mark("r2") == 2
    for name in ("env", "policy", "agent-a", "agent-b"):
        assert cluster.hooks[name].states == {}
    routes = [s.route for s in cluster.transport.sent if s.route != "status"]
    assert routes == ["restore"] * 5 + ["retire"] * 5 + ["resume"] * 5
    retire = next(s for s in cluster.transport.sent if s.route == "retire")
    assert retire.body is not None
    assert retire.body["deadline_ts"] == START + CLEANUP_SECONDS
    assert retire.body["episode_ids"] == [
        {"rollout_id": "r1", "attempt": 1},
        {"rollout_id": "r2", "attempt": 2},
    ]


async def test_restore_cleanup_retires_past_a_failing_stage(tmp_path: Path) -> None:
    """If the environment cannot retire, the later stages are still retired and resumed;
    the warning names the Gym instance."""
    source, _, _ = await committed_cluster(tmp_path)
    cluster = source.fresh()
    participants = await discovered(cluster)
    cluster.faults.add("error", server="tools", route="restore")
    cluster.faults.add("unreachable", server="env", route="retire")
    cluster.coordinator.instance_id = "shard/replica-0"
    with capture_logs() as logs, pytest.raises(CoordinationError) as caught:
        await cluster.coordinator.restore(
            participants, "rst-1", str(tmp_path), [ep("r1")], deadline_ts=cluster.deadline()
        )
    assert set(caught.value.failures) == {"tools"}
    [warned] = [e for e in logs if e["event"] == "restore cleanup: retire failed"]
    assert (warned["instance_id"], warned["checkpoint_id"]) == ("shard/replica-0", "rst-1")
    assert cluster.cores["env"].fence.mark("r1") is None
    for name in ("policy", "agent-a", "agent-b", "tools"):
        assert cluster.cores[name].fence.mark("r1") == 1
    assert set(cluster.phases().values()) == {"idle"}


# ------------------------------------------------------------------------ faults


async def test_drop_reply_on_commit_then_retry_returns_the_same_reply(tmp_path: Path) -> None:
    """A lost commit reply fails the call, but the participant committed; a retry collects it."""
    cluster, participants, _ = await prepared_after_r1()
    cluster.faults.add("drop_reply", server="agent-a", route="commit")
    args = (participants, "c1", str(tmp_path), [ep("r1")])
    with pytest.raises(CoordinationError) as caught:
        await cluster.coordinator.commit(*args, deadline_ts=cluster.deadline())
    assert set(caught.value.failures) == {"agent-a"}
    assert "no reply" in caught.value.failures["agent-a"]
    assert cluster.cores["agent-a"].phase == "committed"
    replies = await cluster.coordinator.commit(*args, deadline_ts=cluster.deadline())
    assert replies["agent-a"]["episode_ids"] == ["r1"]


async def test_crash_before_publish_leaves_no_manifest(tmp_path: Path) -> None:
    """A crash between records and manifest fails that commit and publishes nothing there."""
    cluster, participants, _ = await prepared_after_r1()
    cluster.faults.add("crash_before_publish", server="policy", route="commit")
    with pytest.raises(CoordinationError) as caught:
        await cluster.coordinator.commit(
            participants, "c1", str(tmp_path), [ep("r1")], deadline_ts=cluster.deadline()
        )
    assert set(caught.value.failures) == {"policy"}
    assert caught.value.failures["policy"].startswith("checkpoint_error")
    policy_dir = store.participant_dir(tmp_path, "model", "policy")
    assert not (policy_dir / store.MANIFEST_NAME).exists()
    assert cluster.cores["policy"].phase == "prepared"
    assert cluster.cores["policy"].before_publish == []
    assert (store.participant_dir(tmp_path, "agent", "agent-a") / store.MANIFEST_NAME).exists()


async def test_crash_fault_on_a_refused_commit_does_not_linger(tmp_path: Path) -> None:
    """A crash fault taken by a commit that never started a write is dropped with it."""
    cluster = Cluster()
    participants = await discovered(cluster)
    cluster.faults.add("crash_before_publish", server="policy", route="commit")
    with pytest.raises(CoordinationError):
        await cluster.coordinator.commit(
            participants, "c1", str(tmp_path), [ep("r1")], deadline_ts=cluster.deadline()
        )
    assert cluster.cores["policy"].before_publish == []
    await cluster.coordinator.prepare(participants, "c2", deadline_ts=cluster.deadline())
    await cluster.coordinator.commit(
        participants, "c2", str(tmp_path), [ep("r1")], deadline_ts=cluster.deadline()
    )
    assert (store.participant_dir(tmp_path, "model", "policy") / store.MANIFEST_NAME).exists()


async def test_corrupt_records_make_the_restore_fail(tmp_path: Path) -> None:
    """A flipped byte in one records file fails the restore invalid_checkpoint_state, all undone."""
    cluster, participants, _ = await prepared_after_r1()
    cluster.faults.add("corrupt_records", server="agent-b", route="commit")
    await cluster.coordinator.commit(
        participants, "c1", str(tmp_path), [ep("r1")], deadline_ts=cluster.deadline()
    )
    assert ("corrupt_records", "agent-b", "commit") in cluster.faults.fired
    fresh = cluster.fresh()
    fresh_participants = await discovered(fresh)
    with pytest.raises(CoordinationError) as caught:
        await fresh.coordinator.restore(
            fresh_participants, "rst-1", str(tmp_path), [ep("r1")], deadline_ts=fresh.deadline()
        )
    assert set(caught.value.failures) == {"agent-b"}
    assert caught.value.failures["agent-b"].startswith("invalid_checkpoint_state")
    assert set(fresh.phases().values()) == {"idle"}
    assert all(core.fence.mark("r1") == 1 for core in fresh.cores.values())
    await drain_tasks()


async def test_unreachable_participant_fails_the_fan_out() -> None:
    """An unreachable participant fails renew with a transport failure text."""
    cluster = Cluster()
    participants = await discovered(cluster)
    await cluster.coordinator.prepare(participants, "c1", deadline_ts=cluster.deadline())
    cluster.faults.add("unreachable", server="tools", route="renew")
    with pytest.raises(CoordinationError) as caught:
        await cluster.coordinator.renew(participants, "c1", deadline_ts=cluster.deadline())
    assert caught.value.failures == {
        "tools": "TransportFailure: tools unreachable (connection refused)"
    }


async def test_failures_carry_the_protocol_codes_of_envelope_replies() -> None:
    """A refusal with the envelope records its code; a bare 500 records none."""
    cluster = Cluster()
    participants = await discovered(cluster)
    cluster.faults.add("error", server="policy", route="renew")
    with pytest.raises(CoordinationError) as caught:
        await cluster.coordinator.renew(
            participants, "never-opened", deadline_ts=cluster.deadline()
        )
    codes = caught.value.codes
    assert set(caught.value.failures) == set(codes) | {"policy"}
    assert "policy" not in codes and codes
    assert set(codes.values()) == {"invalid_phase"}
