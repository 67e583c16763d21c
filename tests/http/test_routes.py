"""Tests for envckpt.http.routes: the participant control routes served by uvicorn.

Every row of protocol.md section 7 is provoked over real HTTP, driven by
``HttpTransport`` and ``Coordinator``, and each refusal is checked to leave the
participant's phase as it was.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import time
import weakref
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.responses import JSONResponse

from envckpt.coordination.inprocess import corrupt_records_file
from envckpt.errors import CoordinationError
from envckpt.http import routes
from envckpt.http.routes import MAX_BODY_BYTES, control_router, mount_participant
from envckpt.http.serve import serve
from envckpt.participant.hooks import NoState
from envckpt.participant.store import MANIFEST_NAME, participant_dir
from envckpt.protocol import CHECKPOINT_ROUTE_PREFIX, ROUTES

from helpers.http_deployment import (
    TOKEN,
    Deployment,
    deadline,
    deploy,
    ep,
    make_core,
    new_id,
    trio,
)

EPISODES = (ep("task-1"), ep("task-2", 3))


def body(checkpoint_id: str, seconds: float = 30.0, **fields: Any) -> dict[str, Any]:
    return {"checkpoint_id": checkpoint_id, "deadline_ts": deadline(seconds), **fields}


def wire(*episodes: Any) -> list[dict[str, Any]]:
    return [episode.to_wire() for episode in episodes]


async def expect(
    d: Deployment,
    server: str,
    route: str,
    payload: dict[str, Any] | None,
    *,
    code: str,
    status: int,
    method: str = "POST",
) -> str:
    """Send one control call and check the envelope's code and the HTTP status."""
    reply = await d.transport.request(server, method, route, payload, timeout=10.0)
    assert (reply.status, reply.error_code) == (status, code), reply.describe()
    assert set(reply.body) == {"error"} and set(reply.body["error"]) == {"code", "detail"}
    return str(reply.body["error"]["detail"])


async def play_turns(d: Deployment, *servers: str) -> None:
    for server in servers:
        for episode in EPISODES:
            response = await d.turn(server, episode.rollout_id, episode.attempt)
            assert response.status_code == 200, response.text


@pytest.fixture
async def one_agent() -> AsyncIterator[Deployment]:
    async with deploy({"agent": make_core("agent", "agent")}) as d:
        yield d


# ------------------------------------------------------------------ happy paths


async def test_snapshot_cycle_over_http(tmp_path: Path) -> None:
    """discover -> prepare -> commit -> resume through the coordinator writes every participant."""
    async with deploy(trio(), others={"judge": FastAPI()}) as d:
        await play_turns(d, "policy", "agent", "resources")
        participants = await d.coordinator.discover()
        assert [(m.server_name, m.kind) for m in participants.members] == [
            ("policy", "model"),
            ("agent", "agent"),
            ("resources", "resources"),
        ]
        cid = new_id()
        result = await d.coordinator.prepare(participants, cid, deadline_ts=deadline())
        assert result.prepared and not result.restarts()
        for server in d.cores:
            assert await d.phase(server) == "prepared"
        replies = await d.coordinator.commit(
            participants, cid, str(tmp_path), result.continued(EPISODES), deadline_ts=deadline()
        )
        keys = sorted(e.capture_key for e in EPISODES)
        for server, reply in replies.items():
            assert reply["phase"] == "committed"
            assert reply["episode_ids"] == keys
            assert reply["manifest"]["record_count"] == 2
            kind = d.cores[server].kind
            assert (participant_dir(tmp_path, kind, server) / MANIFEST_NAME).is_file()
        await d.coordinator.resume(participants, cid, deadline_ts=deadline())
        for server in d.cores:
            status = await d.status(server)
            assert (status["phase"], status["checkpoint_id"]) == ("idle", None)
            assert status["lease_expires_at"] is None
        assert (await d.turn("agent", "task-1")).status_code == 200


async def test_prepare_replay_and_idempotent_resume(one_agent: Deployment) -> None:
    """A repeated prepare replays its ready reply verbatim; a repeated resume says idempotent."""
    d = one_agent
    cid = new_id()
    first = await d.post("agent", "prepare", body(cid))
    second = await d.post("agent", "prepare", body(cid))
    assert first.status == second.status == 200
    assert first.body == second.body and first.body["phase"] == "prepared"
    renewed = await d.post("agent", "renew", body(cid, 120))
    assert renewed.status == 200 and renewed.body["lease_expires_at"] > time.time() + 600
    assert (await d.post("agent", "resume", body(cid))).body == {
        "phase": "idle",
        "idempotent": False,
    }
    assert (await d.post("agent", "resume", body(cid))).body == {
        "phase": "idle",
        "idempotent": True,
    }


async def test_restore_on_fresh_servers_continues_next_attempts(tmp_path: Path) -> None:
    """A fresh deployment restores every part as attempt N+1; the old attempt is then stale."""
    async with deploy(trio()) as d:
        await play_turns(d, "policy", "agent", "resources")
        participants = await d.coordinator.discover()
        cid = new_id()
        await d.coordinator.prepare(participants, cid, deadline_ts=deadline())
        await d.coordinator.commit(
            participants, cid, str(tmp_path), EPISODES, deadline_ts=deadline()
        )
        await d.coordinator.resume(participants, cid, deadline_ts=deadline())
        saved = {server: dict(d.hooks(server).states) for server in d.cores}

    async with deploy(trio()) as fresh:
        participants = await fresh.coordinator.discover()
        rid = new_id("restore")
        replies = await fresh.coordinator.restore(
            participants, rid, str(tmp_path), EPISODES, deadline_ts=deadline()
        )
        expected = sorted(e.next_attempt().capture_key for e in EPISODES)
        for server, reply in replies.items():
            assert reply["phase"] == "restored"
            assert reply["source_checkpoint_id"] == cid
            assert reply["restored"] == expected
            installed = fresh.hooks(server).states
            assert installed == {e.next_attempt(): saved[server][e] for e in EPISODES}
            assert await fresh.phase(server) == "restored"
        # Admission stays closed until resume.
        blocked = await fresh.turn("agent", "task-1", 1)
        assert blocked.status_code == 409 and blocked.json()["error"]["code"] == "admission_closed"
        await fresh.coordinator.resume(participants, rid, deadline_ts=deadline())
        assert (await fresh.turn("agent", "task-1", 1)).status_code == 200
        stale = await fresh.turn("agent", "task-1", 0)
        assert stale.status_code == 409 and stale.json()["error"]["code"] == "stale_attempt"


async def test_retire_and_forget_through_the_coordinator(one_agent: Deployment) -> None:
    """retire frees the state and fences the attempt; forget clears the mark again."""
    d = one_agent
    await d.turn("agent", "task-1")
    assert await d.phase("agent") == "idle"
    reply = await d.post("agent", "retire", body(new_id(), episode_ids=wire(ep("task-1"))))
    assert reply.status == 200 and reply.body == {"retired": ["task-1"]}
    assert d.hooks("agent").states == {}
    assert (await d.status("agent"))["retired_rollouts"] == 1
    reply = await d.post("agent", "forget", body(new_id(), rollout_ids=["task-1", "task-0"]))
    assert reply.status == 200 and reply.body == {"forgotten": ["task-0", "task-1"]}
    assert (await d.status("agent"))["retired_rollouts"] == 0
    assert (await d.turn("agent", "task-1")).status_code == 200


# ------------------------------------------------------- section 7, row by row


async def test_stale_checkpoint(one_agent: Deployment) -> None:
    """A finished id is refused with 409 stale_checkpoint and nothing reopens."""
    d = one_agent
    cid = new_id()
    assert (await d.post("agent", "prepare", body(cid))).status == 200
    assert (await d.post("agent", "resume", body(cid))).status == 200
    for route in ("prepare", "renew"):
        await expect(d, "agent", route, body(cid), code="stale_checkpoint", status=409)
    commit = body(cid, checkpoint_dir="/tmp/x", episode_ids=None)
    await expect(d, "agent", "commit", commit, code="stale_checkpoint", status=409)
    assert await d.phase("agent") == "idle"
    # A resume for an id never seen fences it too.
    fenced = new_id()
    assert (await d.post("agent", "resume", body(fenced))).body["idempotent"] is True
    await expect(d, "agent", "prepare", body(fenced), code="stale_checkpoint", status=409)
    assert await d.phase("agent") == "idle"


async def test_checkpoint_conflict(one_agent: Deployment, tmp_path: Path) -> None:
    """Another open id, or a commit replayed with another directory, is 409 checkpoint_conflict."""
    d = one_agent
    await d.turn("agent", "task-1")
    cid = new_id()
    assert (await d.post("agent", "prepare", body(cid))).status == 200
    other = new_id()
    for route in ("prepare", "renew", "resume"):
        await expect(d, "agent", route, body(other), code="checkpoint_conflict", status=409)
    assert (await d.status("agent"))["checkpoint_id"] == cid
    scope = wire(ep("task-1"))
    first = await d.post(
        "agent", "commit", body(cid, checkpoint_dir=str(tmp_path / "a"), episode_ids=scope)
    )
    assert first.status == 200
    replay = await d.post(
        "agent", "commit", body(cid, checkpoint_dir=str(tmp_path / "a"), episode_ids=scope)
    )
    assert replay.body == first.body
    for changed in (
        body(cid, checkpoint_dir=str(tmp_path / "b"), episode_ids=scope),
        body(cid, checkpoint_dir=str(tmp_path / "a"), episode_ids=None),
    ):
        await expect(d, "agent", "commit", changed, code="checkpoint_conflict", status=409)
    assert not (tmp_path / "b").exists()
    status = await d.status("agent")
    assert (status["phase"], status["checkpoint_id"]) == ("committed", cid)


async def test_invalid_phase(one_agent: Deployment, tmp_path: Path) -> None:
    """Operations the phase forbids are 409 invalid_phase and change nothing."""
    d = one_agent
    cid = new_id()
    commit = body(cid, checkpoint_dir=str(tmp_path), episode_ids=None)
    await expect(d, "agent", "commit", commit, code="invalid_phase", status=409)
    await expect(d, "agent", "renew", body(cid), code="invalid_phase", status=409)
    assert await d.phase("agent") == "idle"
    assert (await d.post("agent", "prepare", body(cid))).status == 200
    retire = body(cid, episode_ids=wire(ep("task-1")))
    await expect(d, "agent", "retire", retire, code="invalid_phase", status=409)
    forget = body(cid, rollout_ids=["task-1"])
    await expect(d, "agent", "forget", forget, code="invalid_phase", status=409)
    assert await d.phase("agent") == "prepared"
    restore = body(cid, checkpoint_dir=str(tmp_path), episode_ids=wire(ep("task-1")))
    await expect(d, "agent", "restore", restore, code="invalid_phase", status=409)
    assert await d.phase("agent") == "prepared"
    assert (await d.post("agent", "resume", body(cid))).status == 200


async def test_gym_fidelity_over_http(tmp_path: Path) -> None:
    """The issue-9 points over HTTP: cleanup under a finished id, prepare replayed after
    commit, a null model scope, forget of held state, Gym's records, a second restore."""
    async with deploy(trio()) as d:
        await play_turns(d, "policy", "agent", "resources")
        cid = new_id()
        prepared = await d.post("policy", "prepare", body(cid))
        commit = body(cid, checkpoint_dir=str(tmp_path), episode_ids=None)
        committed = await d.post("policy", "commit", commit)
        assert committed.status == 200, committed.describe()
        assert committed.body["episode_ids"] == ["task-1", "task-2-a3"]  # null scope: all
        assert (await d.post("policy", "prepare", body(cid))).body == prepared.body
        directory = participant_dir(tmp_path, "model", "policy")
        manifest = json.loads((directory / MANIFEST_NAME).read_text())
        lines = (directory / manifest["records_file"]).read_text().splitlines()
        assert json.loads(lines[1])["episode_id"] == {"rollout_id": "task-2", "attempt": 3}
        assert len(manifest) == 7 and "episode_ids" not in manifest
        assert (await d.post("policy", "resume", body(cid))).status == 200
        retire = await d.post("policy", "retire", body(cid, episode_ids=wire(ep("task-1"))))
        assert retire.status == 200 and retire.body == {"retired": ["task-1"]}
        forget = await d.post("policy", "forget", body(cid, rollout_ids=["task-1", "task-2"]))
        assert forget.status == 200 and ep("task-2", 3) in d.hooks("policy").states
        # This process served traffic and restores anyway; task-2's older attempt
        # is retired under the same lock hold as the install.
        rid = new_id("restore")
        scope = wire(ep("task-2", 3))
        restore = body(rid, checkpoint_dir=str(tmp_path), episode_ids=scope)
        restored = await d.post("policy", "restore", restore)
        assert restored.status == 200 and restored.body["restored"] == ["task-2-a4"]
        assert set(d.hooks("policy").states) == {ep("task-2", 4)}
        again = body(new_id("restore"), checkpoint_dir=str(tmp_path), episode_ids=scope)
        assert (await d.post("policy", "resume", body(rid))).status == 200
        await expect(d, "policy", "restore", again, code="stale_attempt", status=409)


async def test_commit_not_ready_is_invalid_phase(tmp_path: Path) -> None:
    """A turn admitted after a not-ready prepare blocks; commit then refuses, nothing written."""
    async with deploy({"agent": make_core("agent", "agent")}) as d:
        d.apps["agent"].state.gate.clear()
        held = asyncio.create_task(d.turn("agent", "task-1"))
        while not d.cores["agent"].fence.in_flight():
            await asyncio.sleep(0.01)
        cid = new_id()
        reply = await d.post("agent", "prepare", body(cid, 0.3))
        assert reply.status == 200 and reply.body["phase"] == "preparing"
        assert reply.body["report"]["blockers"] == ["task-1"]
        never = tmp_path / "never"
        commit = body(cid, checkpoint_dir=str(never), episode_ids=None)
        await expect(d, "agent", "commit", commit, code="invalid_phase", status=409)
        assert await d.phase("agent") == "preparing"
        d.apps["agent"].state.gate.set()
        assert (await held).status_code == 200
        assert (await d.post("agent", "prepare", body(cid))).body["phase"] == "prepared"
        assert not never.exists()


async def test_a_commit_past_its_deadline_writes_nothing_and_a_retry_commits(
    one_agent: Deployment, tmp_path: Path
) -> None:
    """A commit whose deadline passed is 409 deadline_exceeded before any write; a retry commits."""
    d = one_agent
    await d.turn("agent", "task-1")
    cid = new_id()
    assert (await d.post("agent", "prepare", body(cid))).status == 200
    late = body(cid, -1.0, checkpoint_dir=str(tmp_path), episode_ids=wire(ep("task-1")))
    await expect(d, "agent", "commit", late, code="deadline_exceeded", status=409)
    assert await d.phase("agent") == "prepared"
    assert not participant_dir(tmp_path, "agent", "agent").exists()
    retry = await d.post(
        "agent", "commit", body(cid, checkpoint_dir=str(tmp_path), episode_ids=wire(ep("task-1")))
    )
    assert retry.status == 200 and retry.body["episode_ids"] == ["task-1"]
    assert await d.phase("agent") == "committed"
    # A restore whose deadline already passed is refused before reading anything.
    async with deploy({"agent": make_core("agent", "agent")}) as fresh:
        restore = body(new_id(), -1.0, checkpoint_dir=str(tmp_path), episode_ids=wire(ep("task-1")))
        await expect(fresh, "agent", "restore", restore, code="deadline_exceeded", status=409)
        assert await fresh.phase("agent") == "idle"
        assert fresh.hooks("agent").installed == []


async def test_stale_attempt_after_retire(one_agent: Deployment) -> None:
    """A retired attempt, and every earlier one, is refused with 409 stale_attempt."""
    d = one_agent
    assert (await d.turn("agent", "task-1", 2)).status_code == 200
    retire = body(new_id(), episode_ids=wire(ep("task-1", 2)))
    assert (await d.post("agent", "retire", retire)).status == 200
    for attempt in (0, 2):
        refused = await d.turn("agent", "task-1", attempt)
        assert refused.status_code == 409
        assert refused.json()["error"]["code"] == "stale_attempt"
    assert await d.phase("agent") == "idle"
    assert (await d.turn("agent", "task-1", 3)).status_code == 200


async def test_admission_closed_while_a_checkpoint_is_open(one_agent: Deployment) -> None:
    """A new turn during an open checkpoint is 409 admission_closed until resume."""
    d = one_agent
    cid = new_id()
    assert (await d.post("agent", "prepare", body(cid))).status == 200
    refused = await d.turn("agent", "task-9")
    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "admission_closed"
    status = await d.status("agent")
    assert (status["phase"], status["checkpoint_id"]) == ("prepared", cid)
    assert status["report"]["counts"]["live"] == 0
    assert (await d.post("agent", "resume", body(cid))).status == 200
    assert (await d.turn("agent", "task-9")).status_code == 200


async def test_restart_in_scope(tmp_path: Path) -> None:
    """A commit scope naming a restart a restart_only participant reported is restart_in_scope."""
    cores = trio()
    cores["resources"] = make_core("resources", "resources", hooks=NoState(), mode="restart_only")
    async with deploy(cores) as d:
        await play_turns(d, "policy", "agent", "resources")
        participants = await d.coordinator.discover()
        assert participants.member("resources").mode == "restart_only"
        cid = new_id()
        result = await d.coordinator.prepare(participants, cid, deadline_ts=deadline())
        assert result.prepared and result.restarts() == frozenset(EPISODES)
        scope = body(cid, checkpoint_dir=str(tmp_path), episode_ids=wire(*EPISODES))
        detail = await expect(d, "resources", "commit", scope, code="restart_in_scope", status=409)
        assert "task-1" in detail
        assert await d.phase("resources") == "prepared"
        with pytest.raises(CoordinationError) as raised:
            await d.coordinator.commit(
                participants, cid, str(tmp_path), EPISODES, deadline_ts=deadline()
            )
        assert set(raised.value.failures) == {"resources"}
        assert raised.value.failures["resources"].startswith("restart_in_scope:")
        # The restart_only participant accepts the scope without its restarts.
        retry = await d.post(
            "resources",
            "commit",
            body(cid, checkpoint_dir=str(tmp_path), episode_ids=wire(*result.continued(EPISODES))),
        )
        assert retry.status == 200 and retry.body["episode_ids"] == []
        await d.coordinator.resume(participants, cid, deadline_ts=deadline())


@pytest.mark.parametrize(
    "authorization",
    [
        None,
        "Bearer wrong",
        f"Basic {TOKEN}",
        "Bearer",
        f"bearer {TOKEN}",
        f"Bearer {TOKEN}x",
        TOKEN,
    ],
)
async def test_unauthorized_on_every_route(
    one_agent: Deployment, authorization: str | None
) -> None:
    """Every route, status included, answers 401 unauthorized without the right bearer token."""
    d = one_agent
    cid = new_id()
    payloads: dict[str, dict[str, Any]] = {
        "prepare": body(cid),
        "renew": body(cid),
        "resume": body(cid),
        "commit": body(cid, checkpoint_dir="/tmp/never", episode_ids=None),
        "restore": body(cid, checkpoint_dir="/tmp/never", episode_ids=[]),
        "retire": body(cid, episode_ids=wire(ep("task-1"))),
        "forget": body(cid, rollout_ids=["task-1"]),
    }
    headers = {} if authorization is None else {"Authorization": authorization}
    for route in ROUTES:
        method = "GET" if route == "status" else "POST"
        content = None if route == "status" else json.dumps(payloads[route]).encode()
        response = await d.send(
            "agent", method, route, content=content, headers=headers, authorized=False
        )
        assert response.status_code == 401, (route, response.text)
        assert response.json()["error"]["code"] == "unauthorized"
        assert TOKEN not in response.text
    status = await d.status("agent")
    assert (status["phase"], status["checkpoint_id"], status["retired_rollouts"]) == (
        "idle",
        None,
        0,
    )
    # The id was never seen, so it is not fenced.
    assert (await d.post("agent", "prepare", body(cid))).status == 200


async def test_rollout_id_required(one_agent: Deployment) -> None:
    """Episode work without a rollout identity is 400 rollout_id_required."""
    d = one_agent
    refused = await d.turn("agent")
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "rollout_id_required"
    assert d.cores["agent"].counters.refused == {"rollout_id_required": 1}
    assert not d.cores["agent"].served_traffic
    assert await d.phase("agent") == "idle"


def _invalid_bodies() -> list[tuple[str, str, bytes]]:
    """(label, route, raw body) of malformed requests."""
    cid = "ckpt-ok"
    now = deadline()

    def dump(route: str, label: str, **fields: Any) -> tuple[str, str, bytes]:
        return (label, route, json.dumps(fields).encode())

    good = {"checkpoint_id": cid, "deadline_ts": now}
    ep0 = {"rollout_id": "task-1", "attempt": 0}
    cases = [
        ("bad JSON", "prepare", b"{not json"),
        ("empty body", "prepare", b""),
        ("array body", "prepare", b"[1, 2]"),
        ("string body", "prepare", b'"prepare"'),
        ("NaN deadline", "prepare", b'{"checkpoint_id": "ckpt-ok", "deadline_ts": NaN}'),
        ("Infinity deadline", "renew", b'{"checkpoint_id": "ckpt-ok", "deadline_ts": Infinity}'),
        (
            "huge exponent deadline",
            "prepare",
            b'{"checkpoint_id": "ckpt-ok", "deadline_ts": 1e999}',
        ),
        ("not UTF-8", "prepare", b'{"checkpoint_id": "\xff\xfe", "deadline_ts": 1}'),
        ("deep nesting", "prepare", b"[" * 100_000),
        dump("prepare", "unknown field", **good, extra=1),
        dump("resume", "unknown field on resume", **good, force=True),
        dump("prepare", "missing deadline", checkpoint_id=cid),
        dump("prepare", "missing checkpoint id", deadline_ts=now),
        dump("prepare", "string deadline", checkpoint_id=cid, deadline_ts="soon"),
        dump("prepare", "bool deadline", checkpoint_id=cid, deadline_ts=True),
        dump("prepare", "null deadline", checkpoint_id=cid, deadline_ts=None),
        dump("prepare", "int checkpoint id", checkpoint_id=5, deadline_ts=now),
        dump("commit", "missing checkpoint_dir", **good, episode_ids=None),
        dump("commit", "int checkpoint_dir", **good, checkpoint_dir=5),
        dump("commit", "empty checkpoint_dir", **good, checkpoint_dir=""),
        dump("commit", "episode_ids not a list", **good, checkpoint_dir="/x", episode_ids="task-1"),
        dump("commit", "string stop", **good, checkpoint_dir="/x", episode_ids=None, stop="yes"),
        dump("restore", "restore without scope", **good, checkpoint_dir="/x"),
        dump("retire", "empty retire", **good, episode_ids=[]),
        dump("forget", "empty forget", **good, rollout_ids=[]),
        dump("forget", "int rollout id", **good, rollout_ids=[5]),
    ]
    bad_episodes = {
        "episode missing attempt": {"rollout_id": "r"},
        "episode extra key": {**ep0, "turn": 1},
        "string attempt": {**ep0, "attempt": "0"},
        "negative attempt": {**ep0, "attempt": -1},
        "float attempt": {**ep0, "attempt": 1.5},
        "bool attempt": {**ep0, "attempt": True},
    }
    for label, episode in bad_episodes.items():
        cases.append(dump("commit", label, **good, checkpoint_dir="/x", episode_ids=[episode]))
    for bad_id in ("../x", "a/b", "", ".hidden", "-x", "x" * 129, "a b", "é"):
        cases.append(
            dump("prepare", f"checkpoint id {bad_id!r}", checkpoint_id=bad_id, deadline_ts=now)
        )
    for bad_rollout in ("x-a1", "task-a12", "-x", "a b", "../x", "", "x\n"):
        cases.append(
            dump(
                "retire",
                f"rollout id {bad_rollout!r}",
                **good,
                episode_ids=[{"rollout_id": bad_rollout, "attempt": 0}],
            )
        )
        cases.append(
            dump("forget", f"forget rollout id {bad_rollout!r}", **good, rollout_ids=[bad_rollout])
        )
    return cases


async def test_invalid_request_bodies(one_agent: Deployment) -> None:
    """Every malformed body is 422 invalid_request in the envelope, and nothing changes."""
    d = one_agent
    for label, route, content in _invalid_bodies():
        response = await d.send("agent", "POST", route, content=content)
        assert response.status_code == 422, (label, response.text)
        assert response.json()["error"]["code"] == "invalid_request", label
    for method, route in (("GET", "prepare"), ("POST", "status"), ("GET", "commit")):
        response = await d.send("agent", method, route, content=None)
        assert response.status_code == 405, (method, route, response.text)
        assert response.json()["error"]["code"] == "invalid_request"
        assert response.headers["allow"] == ("GET" if route == "status" else "POST")
    status = await d.status("agent")
    assert (status["phase"], status["checkpoint_id"], status["retired_rollouts"]) == (
        "idle",
        None,
        0,
    )
    assert (await d.post("agent", "prepare", body("ckpt-ok"))).status == 200


async def streamed_without_end(url: str, total: int, block: int = 1024 * 1024) -> bytes:
    """POST ``total`` bytes of chunked body to ``url`` with the token, never ending the body;
    return everything the server sent until it closed the connection."""
    host_port, _, path = url.removeprefix("http://").partition("/")
    host, _, port = host_port.partition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    head = (
        f"POST /{path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {TOKEN}\r\n"
        "Content-Type: application/json\r\n"
    )
    writer.write(f"{head}Transfer-Encoding: chunked\r\n\r\n".encode())
    sent = 0
    try:
        while sent < total:
            piece = min(block, total - sent)
            writer.write(f"{piece:x}\r\n".encode() + b" " * piece + b"\r\n")
            await writer.drain()
            sent += piece
        return await asyncio.wait_for(reader.read(), timeout=30)
    finally:
        writer.close()


async def test_body_size_limit() -> None:
    """A body over the limit is 413 in the envelope, whether declared or streamed."""
    assert MAX_BODY_BYTES == 64 * 1024 * 1024
    async with deploy({"agent": make_core("agent", "agent")}, max_body_bytes=512) as d:
        small = json.dumps(body("ckpt-1")).encode()
        padded = json.dumps({**body("ckpt-1"), "pad": "x" * 600}).encode()
        declared = await d.send("agent", "POST", "prepare", content=padded)
        assert declared.status_code == 413 and "exceeds" in declared.json()["error"]["detail"]
        url = f"{d.urls['agent']}/ng-control/v1/checkpoint/prepare"
        streamed = await streamed_without_end(url, 513, block=100)
        assert streamed.startswith(b"HTTP/1.1 413") and b"exceeds the limit" in streamed
        assert await d.phase("agent") == "idle"
        assert (await d.send("agent", "POST", "prepare", content=small)).status_code == 200


async def test_default_body_limit_is_64_mib(one_agent: Deployment) -> None:
    """A streamed body one byte over 64 MiB is refused with 413 in the envelope, unfinished."""
    d = one_agent
    url = f"{d.urls['agent']}/ng-control/v1/checkpoint/prepare"
    reply = await streamed_without_end(url, MAX_BODY_BYTES + 1)
    head, _, rest = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413")
    assert json.loads(rest)["error"]["code"] == "invalid_request"
    assert await d.phase("agent") == "idle"


async def test_invalid_checkpoint_state(tmp_path: Path) -> None:
    """Missing, damaged, foreign or escaping checkpoint state is 422 and installs nothing."""
    source = tmp_path / "source"
    scope = wire(*EPISODES)
    cores = {
        "agent": make_core("agent", "agent"),
        "twin": make_core("twin", "agent", instance="agent-other"),
    }
    async with deploy(cores) as d:
        await play_turns(d, "agent", "twin")
        cid = new_id()
        for server in ("agent", "twin"):
            assert (await d.post(server, "prepare", body(cid))).status == 200
            commit = body(cid, checkpoint_dir=str(source), episode_ids=scope)
            assert (await d.post(server, "commit", commit)).status == 200
            assert (await d.post(server, "resume", body(cid))).status == 200
    agent_dir = participant_dir(source, "agent", "agent")
    records = next(agent_dir.glob("records-*.jsonl")).name

    def variant(name: str) -> tuple[Path, Path]:
        root = tmp_path / name
        shutil.copytree(source, root)
        return root, participant_dir(root, "agent", "agent")

    def edit_manifest(directory: Path, **changes: Any) -> None:
        path = directory / MANIFEST_NAME
        manifest = json.loads(path.read_text())
        manifest.update(changes)
        path.unlink()
        path.write_text(json.dumps(manifest, sort_keys=True))

    cases: dict[str, Path] = {"missing directory": tmp_path / "missing"}
    root, directory = variant("truncated")
    data = (directory / records).read_bytes()
    (directory / records).write_bytes(data[: len(data) - 7])
    cases["truncated records"] = root
    root, directory = variant("flipped")
    corrupt_records_file(directory / records)
    cases["one byte flipped"] = root
    root, directory = variant("edited")
    data = (directory / records).read_bytes()
    assert b'"turns":1' in data
    (directory / records).write_bytes(data.replace(b'"turns":1', b'"turns":7', 1))
    cases["a value edited, still valid JSON"] = root
    root, directory = variant("foreign")
    shutil.rmtree(directory)
    shutil.copytree(participant_dir(source, "agent", "agent-other"), directory)
    cases["manifest of another instance"] = root
    root, directory = variant("escape")
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.copy(directory / records, outside / records)
    edit_manifest(directory, records_file=f"../../../../outside/{records}")
    cases["records_file points outside"] = root
    root, directory = variant("absolute")
    edit_manifest(directory, records_file=str(outside / records))
    cases["records_file is absolute"] = root
    root, directory = variant("symlink")
    (directory / records).unlink()
    os.symlink(outside / records, directory / records)
    cases["records file is a symlink out"] = root
    root, directory = variant("unpublished")
    (directory / MANIFEST_NAME).unlink()
    cases["no manifest"] = root
    root, directory = variant("schema")
    edit_manifest(directory, schema_version=2)
    cases["unknown schema"] = root
    root, directory = variant("count")
    edit_manifest(directory, record_count=3)
    cases["wrong record count"] = root

    async with deploy({"agent": make_core("agent", "agent")}) as fresh:
        hooks = fresh.hooks("agent")
        for label, checkpoint_dir in cases.items():
            restore = body(new_id("restore"), checkpoint_dir=str(checkpoint_dir), episode_ids=scope)
            await expect(
                fresh, "agent", "restore", restore, code="invalid_checkpoint_state", status=422
            )
            status = await fresh.status("agent")
            assert (status["phase"], status["checkpoint_id"]) == ("idle", None), label
            assert hooks.installed == [] and hooks.states == {}, label
        # State the kind itself refuses is invalid too, and nothing of it is installed.
        hooks.fail.clear()
        original_validate = hooks.validate

        def picky(episode: Any, state: Any) -> object:
            if episode.attempt == 3:
                raise ValueError("unsupported state version")
            return original_validate(episode, state)

        hooks.validate = picky  # type: ignore[method-assign]
        restore = body(new_id("restore"), checkpoint_dir=str(source), episode_ids=scope)
        await expect(
            fresh, "agent", "restore", restore, code="invalid_checkpoint_state", status=422
        )
        assert hooks.installed == []
        hooks.validate = original_validate  # type: ignore[method-assign]
        # The untouched checkpoint still restores on the same (still fresh) process.
        good = await fresh.post(
            "agent",
            "restore",
            body(new_id("restore"), checkpoint_dir=str(source), episode_ids=scope),
        )
        assert good.status == 200 and good.body["source_checkpoint_id"] == cid
        assert sorted(hooks.installed) == [e.next_attempt() for e in EPISODES]


async def test_checkpoint_error_from_hooks(tmp_path: Path) -> None:
    """A hook that raises is 500 checkpoint_error and the phase stays where it was."""
    async with deploy({"agent": make_core("agent", "agent")}) as d:
        hooks = d.hooks("agent")
        await d.turn("agent", "task-1")
        hooks.fail.add("close_admission")
        await expect(d, "agent", "prepare", body(new_id()), code="checkpoint_error", status=500)
        assert await d.phase("agent") == "idle"
        assert (await d.turn("agent", "task-1")).status_code == 200  # admission reopened
        hooks.fail.clear()

        cid = new_id()
        assert (await d.post("agent", "prepare", body(cid))).status == 200
        hooks.fail.add("export")
        commit = body(cid, checkpoint_dir=str(tmp_path), episode_ids=wire(ep("task-1")))
        detail = await expect(d, "agent", "commit", commit, code="checkpoint_error", status=500)
        assert "injected failure in export" in detail
        assert await d.phase("agent") == "prepared"
        assert not (participant_dir(tmp_path, "agent", "agent") / MANIFEST_NAME).exists()
        assert (await d.post("agent", "resume", body(cid))).status == 200
        hooks.fail = {"retire"}
        retire = body(new_id(), episode_ids=wire(ep("task-1")))
        await expect(d, "agent", "retire", retire, code="checkpoint_error", status=500)
        # The mark went up before the hook failed, and it stays.
        stale = await d.turn("agent", "task-1")
        assert stale.json()["error"]["code"] == "stale_attempt"
        assert await d.phase("agent") == "idle"


# ------------------------------------------------------------- installation


@pytest.mark.parametrize("token", ["", "t", "x" * 15, " " + "x" * 20])
def test_routes_refuse_a_short_or_blank_token(token: str) -> None:
    """Neither the router nor mount_participant installs routes with a token under 16 characters."""
    core = make_core("agent", "agent")
    with pytest.raises(ValueError, match=r"16|whitespace"):
        control_router(core, token=token, unconfined=True)
    app = FastAPI()
    with pytest.raises(ValueError, match=r"16|whitespace"):
        mount_participant(app, core, token=token, checkpoint_root="/tmp")
    assert len(app.routes) == len(FastAPI().routes)
    assert not core.bounds.confined


def test_routes_need_a_checkpoint_root_or_an_explicit_opt_out(tmp_path: Path) -> None:
    """Without checkpoint_root a mount is refused; unconfined=True or a root makes it."""
    app = FastAPI()
    with pytest.raises(ValueError, match="no checkpoint root"):
        mount_participant(app, make_core("agent", "agent"), token=TOKEN)
    assert len(app.routes) == len(FastAPI().routes)
    core = make_core("agent", "agent")
    mount_participant(FastAPI(), core, token=TOKEN, checkpoint_root=tmp_path)
    assert core.bounds.checkpoint_root == tmp_path
    with pytest.raises(ValueError, match="already confined"):
        mount_participant(FastAPI(), core, token=TOKEN, checkpoint_root=tmp_path / "other")
    with pytest.raises(ValueError, match="not both"):
        mount_participant(
            FastAPI(),
            make_core("a", "agent"),
            token=TOKEN,
            checkpoint_root=tmp_path,
            unconfined=True,
        )
    open_core = make_core("agent", "agent")
    mount_participant(FastAPI(), open_core, token=TOKEN, unconfined=True)
    assert not open_core.bounds.confined


def test_one_participant_per_app() -> None:
    """Mounting a second participant on the same app is refused."""
    app = FastAPI()
    mount_participant(app, make_core("agent", "agent"), token=TOKEN, unconfined=True)
    with pytest.raises(ValueError, match="already serves checkpoint control routes"):
        mount_participant(app, make_core("other", "agent"), token=TOKEN, unconfined=True)


def test_router_serves_exactly_the_protocol_routes() -> None:
    """The router has the eight protocol routes under the checkpoint prefix, then its 404s."""
    router = control_router(make_core("agent", "agent"), token=TOKEN, unconfined=True)
    paths = [getattr(route, "path", "") for route in router.routes]
    prefix = "/ng-control/v1/checkpoint"
    assert paths[:-2] == [f"{prefix}/{route}" for route in ROUTES]
    assert paths[-2:] == [prefix, f"{prefix}/{{rest:path}}"]


async def test_token_never_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    """Neither refusals nor a logged hook failure print the bearer token."""
    caplog.set_level("DEBUG")
    async with deploy({"agent": make_core("agent", "agent")}) as d:
        await d.turn("agent", "task-1")
        await d.send(
            "agent",
            "GET",
            "status",
            headers={"Authorization": f"Bearer {TOKEN}x"},
            authorized=False,
        )
        cid = new_id()
        await d.post("agent", "prepare", body(cid))
        d.hooks("agent").fail.add("export")
        await d.post("agent", "commit", body(cid, checkpoint_dir=str(tmp_path), episode_ids=None))
        assert TOKEN not in repr(d.transport)
    captured = capsys.readouterr()
    assert "injected failure" in captured.out + captured.err + caplog.text
    assert TOKEN not in captured.out + captured.err + caplog.text


async def test_lease_watchdog_reopens_an_abandoned_participant() -> None:
    """With no further call, the mounted watchdog resumes a participant past its lease."""
    core = make_core("agent", "agent", lease_grace=0.2)
    async with deploy({"agent": core}, lease_check_seconds=0.05) as d:
        cid = new_id()
        assert (await d.post("agent", "prepare", body(cid, 0.1))).status == 200
        give_up = time.monotonic() + 5.0
        while core.phase != "idle" and time.monotonic() < give_up:
            await asyncio.sleep(0.02)
        assert core.phase == "idle"
        await expect(d, "agent", "prepare", body(cid), code="stale_checkpoint", status=409)


async def test_a_directory_reused_for_another_checkpoint_is_refused(
    one_agent: Deployment, tmp_path: Path
) -> None:
    """Committing a second checkpoint into a published directory is 422 and changes nothing."""
    d = one_agent
    await play_turns(d, "agent")
    first = new_id()
    assert (await d.post("agent", "prepare", body(first))).status == 200
    commit = body(first, checkpoint_dir=str(tmp_path), episode_ids=wire(*EPISODES))
    assert (await d.post("agent", "commit", commit)).status == 200
    assert (await d.post("agent", "resume", body(first))).status == 200
    published = participant_dir(tmp_path, "agent", "agent")
    before = {path.name: path.read_bytes() for path in published.iterdir()}

    second = new_id()
    assert (await d.post("agent", "prepare", body(second))).status == 200
    reused = body(second, checkpoint_dir=str(tmp_path), episode_ids=wire(*EPISODES))
    detail = await expect(d, "agent", "commit", reused, code="invalid_checkpoint_state", status=422)
    assert "already published" in detail
    assert await d.phase("agent") == "prepared"
    assert {path.name: path.read_bytes() for path in published.iterdir()} == before
    assert json.loads((published / MANIFEST_NAME).read_text())["checkpoint_id"] == first


@pytest.mark.parametrize(
    "order", ["right first", "wrong first", "right twice"], ids=lambda order: order
)
async def test_two_authorization_headers_are_refused_on_every_route(
    one_agent: Deployment, order: str
) -> None:
    """Two Authorization headers are 400 invalid_request on every route (status included),
    even when the right token comes first: which one a proxy or framework reads is
    ambiguous. Nothing runs: the participant stays idle."""
    d = one_agent
    right, wrong = f"Bearer {TOKEN}", "Bearer wrong-token-of-sixteen"
    pair = {
        "right first": (right, wrong),
        "wrong first": (wrong, right),
        "right twice": (right, right),
    }[order]
    cid = new_id()
    for route in ROUTES:
        method = "GET" if route == "status" else "POST"
        content = None if route == "status" else json.dumps(body(cid)).encode()
        response = await d.raw.request(
            method,
            f"{d.urls['agent']}{CHECKPOINT_ROUTE_PREFIX}/{route}",
            content=content,
            headers=[
                ("Content-Type", "application/json"),
                ("Authorization", pair[0]),
                ("Authorization", pair[1]),
            ],
        )
        assert response.status_code == 400, (route, response.text)
        error = response.json()["error"]
        assert error["code"] == "invalid_request" and "2 Authorization headers" in error["detail"]
        assert TOKEN not in response.text
    status = await d.status("agent")
    assert (status["phase"], status["checkpoint_id"]) == ("idle", None)


async def test_on_a_host_app_every_answer_under_the_prefix_is_the_envelope(tmp_path: Path) -> None:
    """A host's own FastAPI app: unknown control paths 404, wrong methods 405, all enveloped,
    and 401 first without the token; the host's other routes keep FastAPI's answers."""
    import httpx

    app = FastAPI()
    mount_participant(app, make_core("agent", "agent"), token=TOKEN, checkpoint_root=tmp_path)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    prefix = "/ng-control/v1/checkpoint"
    async with serve(app) as url, httpx.AsyncClient(base_url=url) as client:
        for method, path, status in (
            ("GET", prefix, 404),
            ("GET", f"{prefix}/", 404),
            ("GET", f"{prefix}/nope", 404),
            ("POST", f"{prefix}/status/x", 404),
            ("PUT", f"{prefix}/prepare", 405),
            ("DELETE", f"{prefix}/status", 405),
            ("OPTIONS", f"{prefix}/commit", 405),
            ("PATCH", f"{prefix}/nope", 404),
        ):
            reply = await client.request(method, path, headers=auth)
            assert reply.status_code == status, (method, path, reply.text)
            assert reply.json()["error"]["code"] == "invalid_request"
            bare = await client.request(method, path)
            assert bare.status_code == 401 and bare.json()["error"]["code"] == "unauthorized"
        head = await client.head(f"{prefix}/status", headers=auth)
        assert head.status_code == 405 and head.headers["content-type"] == "application/json"
        assert (await client.get("/elsewhere")).json() == {"detail": "Not Found"}


# ------------------------------------------------ JSON in and out, as the standard library


@pytest.mark.parametrize(
    "content",
    [
        {"phase": "prepared", "report": {"ready": True, "blockers": [], "counts": {"live": 3}}},
        {"phase": "committed", "episode_ids": ["é", "r1"], "manifest": {"record_count": 2}},
        {"checkpoint_id": None, "lease_expires_at": 1.5},
        {"big": 2**70},
        {1: "int key"},
    ],
)
def test_replies_are_the_bytes_jsonresponse_sends(content: dict[Any, Any]) -> None:
    """Same body, status and content type as JSONResponse, whichever encoder wrote it."""
    reply = routes._reply(409, content)
    expected = JSONResponse(status_code=409, content=content)
    assert (reply.body, reply.status_code) == (expected.body, 409)
    assert reply.headers["content-type"] == "application/json"


def test_a_reply_holding_nan_is_refused_as_jsonresponse_refuses_it() -> None:
    """NaN is not JSON: raising, as before, rather than sending null."""
    with pytest.raises(ValueError):
        routes._reply(200, {"lease_expires_at": float("nan")})


class _WatchedBody(dict[str, Any]):
    """A parsed body that a weak reference can watch."""


async def test_the_route_lets_the_parsed_body_go_before_the_commit_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over HTTP, while the commit exports, neither the route nor the edge holds the parsed
    body (a dict per named episode) any more: only the validated request."""
    watched: list[weakref.ref[_WatchedBody]] = []
    parse = routes.parse_json

    def watching_parse(raw: bytes) -> Any:
        value = parse(raw)
        if isinstance(value, dict) and "episode_ids" in value:
            value = _WatchedBody(value)
            watched.append(weakref.ref(value))
        return value

    monkeypatch.setattr(routes, "parse_json", watching_parse)
    core = make_core("agent", "agent")
    alive_during_export: list[bool] = []
    export = core.hooks.export

    def watching_export(scope: frozenset[Any]) -> Any:
        alive_during_export.extend(ref() is not None for ref in watched)
        return export(scope)

    monkeypatch.setattr(core.hooks, "export", watching_export)
    async with deploy({"agent": core}) as d:
        await play_turns(d, "agent")
        cid = new_id()
        prepared = await d.transport.request("agent", "POST", "prepare", body(cid), timeout=10.0)
        assert prepared.status == 200, prepared.describe()
        commit = body(cid, checkpoint_dir=str(tmp_path), episode_ids=wire(*EPISODES))
        reply = await d.transport.request("agent", "POST", "commit", commit, timeout=10.0)
        assert reply.status == 200, reply.describe()
    assert alive_during_export == [False]


async def test_a_dispatch_replaces_the_core_edge_after_authentication(tmp_path: Path) -> None:
    """With ``dispatch``, an authenticated request goes there (parsed), a bad token never does."""
    import httpx

    seen: list[tuple[str, str, Any]] = []

    async def dispatch(method: str, route: str, parsed: Any) -> tuple[int, dict[str, Any]]:
        seen.append((method, route, parsed))
        return 200, {"answered": "by the dispatch"}

    app = FastAPI()
    mount_participant(
        app, make_core("agent", "agent"), token=TOKEN, checkpoint_root=tmp_path, dispatch=dispatch
    )
    async with serve(app) as url, httpx.AsyncClient(trust_env=False) as client:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        reply = await client.post(
            f"{url}/ng-control/v1/checkpoint/renew", json={"x": 1}, headers=headers
        )
        refused = await client.get(
            f"{url}/ng-control/v1/checkpoint/status", headers={"Authorization": "Bearer nope"}
        )
    assert reply.json() == {"answered": "by the dispatch"}
    assert refused.status_code == 401
    assert seen == [("POST", "renew", {"x": 1})]
