"""Tests for envckpt.coordination.inprocess: the in-process transport and its injected faults.

One model participant ("policy") and one server without control routes
("judge") sit behind the transport; each fault of ``faults.py`` is fired on
a real participant core and judged by what the caller saw and what the
participant did.
"""

from __future__ import annotations

import asyncio
import enum
import gc
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from envckpt.clock import FakeClock
from envckpt.coordination.faults import FaultPlan
from envckpt.coordination.inprocess import (
    InProcessTransport,
    corrupt_records_file,
    through_json,
)
from envckpt.coordination.transport import ControlReply, TransportFailure
from envckpt.episodes import EnvironmentEpisode
from envckpt.errors import CorruptCheckpoint
from envckpt.participant import store
from envckpt.participant.core import ParticipantCore
from envckpt.protocol import Phase

from helpers.participant_doubles import START, TOKEN, JsonStateHooks, drain_tasks, run_turn

EPISODE = EnvironmentEpisode("r", 0)


class Deployment:
    """A policy core with one parked episode, a judge, and the transport in front."""

    def __init__(self, faults: FaultPlan | None = None, **options: Any) -> None:
        self.clock = FakeClock(START)
        self.hooks = JsonStateHooks("model")
        self.core = ParticipantCore(
            server_name="policy", kind="model", hooks=self.hooks, clock=self.clock
        )
        self.faults = faults if faults is not None else FaultPlan()
        self.transport = InProcessTransport(
            {"policy": self.core, "judge": None}, token=TOKEN, faults=self.faults, **options
        )

    async def park(self) -> None:
        await run_turn(self.core, self.hooks, EPISODE)

    def body(self, seconds: float = 60.0, **fields: Any) -> dict[str, Any]:
        return {"checkpoint_id": "c1", "deadline_ts": self.clock.now() + seconds, **fields}

    def commit_body(self, directory: Path, **fields: Any) -> dict[str, Any]:
        return self.body(checkpoint_dir=str(directory), episode_ids=[EPISODE.to_wire()], **fields)

    async def post(
        self,
        route: str,
        body: Mapping[str, Any] | None,
        *,
        server: str = "policy",
        timeout: float = 30.0,
        **options: Any,
    ) -> ControlReply:
        method = "GET" if route == "status" else "POST"
        return await self.transport.request(server, method, route, body, timeout=timeout, **options)

    def published(self, directory: Path) -> bool:
        return (store.participant_dir(directory, "model", "policy") / "manifest.json").exists()


async def prepared_with_a_commit_fault(fault: str) -> Deployment:
    """A deployment with its episode parked and c1 prepared, whose next commit takes ``fault``."""
    deployment = Deployment()
    await deployment.park()
    await deployment.post("prepare", deployment.body())
    deployment.faults.add(fault, route="commit")
    return deployment


# ------------------------------------------------------------------ addressing


def test_server_names_are_every_configured_server_sorted() -> None:
    """Participants and non-participants alike, sorted; core() finds only participants."""
    deployment = Deployment()
    assert deployment.transport.server_names() == ("judge", "policy")
    assert deployment.transport.core("policy") is deployment.core
    with pytest.raises(KeyError, match="judge is not a participant"):
        deployment.transport.core("judge")


def test_a_transport_needs_a_token() -> None:
    """An empty bearer token is refused when the transport is built."""
    with pytest.raises(ValueError, match="non-empty bearer token"):
        InProcessTransport({}, token="")


async def test_an_unknown_server_is_a_refused_connection() -> None:
    """A server the deployment does not have: TransportFailure, as a refused connect."""
    deployment = Deployment()
    with pytest.raises(TransportFailure, match="no server named 'ghost'"):
        await deployment.post("status", None, server="ghost")


async def test_a_server_without_control_routes_answers_404() -> None:
    """A non-participant answers FastAPI's 404, which carries no error code."""
    reply = await Deployment().post("status", None, server="judge")
    assert (reply.status, reply.body, reply.error_code) == (404, {"detail": "Not Found"}, None)


async def test_requests_go_through_the_edge_with_the_bearer_token() -> None:
    """The transport's token is sent by default; a wrong one is answered 401 unauthorized."""
    deployment = Deployment()
    assert (await deployment.post("status", None)).status == 200
    refused = await deployment.post("prepare", deployment.body(), authorization="Bearer nope")
    assert (refused.status, refused.error_code) == (401, "unauthorized")
    assert deployment.core.phase is Phase.IDLE


async def test_every_request_is_counted_refused_or_not() -> None:
    """``requests`` counts each request, whatever became of it."""
    deployment = Deployment()
    deployment.faults.add("unreachable", route="status")
    with pytest.raises(TransportFailure):
        await deployment.post("status", None)
    with pytest.raises(TransportFailure):
        await deployment.post("status", None, server="ghost")
    await deployment.post("status", None, server="judge")
    await deployment.post("status", None)
    assert deployment.transport.requests == 4


# ----------------------------------------------------------------- JSON bodies


async def test_replies_are_plain_json() -> None:
    """The reply holds JSON types only: the core's enums arrive as plain strings."""
    reply = await Deployment().post("status", None)
    assert type(reply.body["kind"]) is str and reply.body["kind"] == "model"
    assert type(reply.body["phase"]) is str and reply.body["phase"] == "idle"


async def test_a_caller_cannot_reach_into_the_participants_recorded_reply() -> None:
    """Each reply is a fresh copy: editing one leaves the replayed prepare reply intact."""
    deployment = Deployment()
    first = await deployment.post("prepare", deployment.body())
    first.body["phase"] = "tampered"
    first.body["report"]["restarts"].append("x")
    again = await deployment.post("prepare", deployment.body())
    assert again.body["phase"] == "prepared" and again.body["report"]["restarts"] == []


async def test_a_body_json_cannot_carry_never_reaches_the_participant() -> None:
    """A body that does not survive JSON (a set) fails in the transport; nothing is opened."""
    deployment = Deployment()
    with pytest.raises(TypeError):
        await deployment.post("prepare", deployment.body(extra={"a", "b"}))
    assert deployment.core.phase is Phase.IDLE


async def test_tuples_travel_as_json_lists() -> None:
    """A body built with tuples reaches the participant as JSON arrays and is accepted."""
    deployment = Deployment()
    await deployment.post("retire", deployment.body(episode_ids=(EPISODE.to_wire(),)))
    assert deployment.core.fence.mark("r") == 0


# ---------------------------------------------------------------------- faults


async def test_unreachable_never_arrives_and_fires_once() -> None:
    """unreachable: a refused connection, the participant untouched; then requests pass."""
    deployment = Deployment()
    deployment.faults.add("unreachable", server="policy", route="prepare")
    await deployment.post("status", None)  # another route: not fired
    with pytest.raises(TransportFailure, match="policy unreachable"):
        await deployment.post("prepare", deployment.body())
    assert deployment.core.phase is Phase.IDLE
    assert deployment.faults.fired == [("unreachable", "policy", "prepare")]
    assert (await deployment.post("prepare", deployment.body())).body["phase"] == "prepared"


async def test_error_answers_a_bare_500_without_running_the_request() -> None:
    """error: Gym's plain-text 500 without the envelope; the participant did nothing."""
    deployment = Deployment()
    deployment.faults.add("error", route="prepare")
    reply = await deployment.post("prepare", deployment.body())
    assert (reply.status, reply.body, reply.raw) == (500, None, "Internal Server Error")
    assert reply.error_code is None and reply.describe() == "HTTP 500 Internal Server Error"
    assert deployment.core.phase is Phase.IDLE


async def test_slow_times_out_at_the_callers_timeout_and_then_arrives_late() -> None:
    """slow: the caller gives up after its timeout; the request still reaches the participant."""
    deployment = Deployment()
    deployment.faults.add("slow", route="prepare")
    with pytest.raises(TransportFailure, match=r"no reply within 5\.0 s"):
        await deployment.post("prepare", deployment.body(60), timeout=5.0)
    assert deployment.clock.now() == START + 5.0
    await drain_tasks()
    assert deployment.core.phase is Phase.PREPARED
    assert deployment.core.checkpoint_id == "c1"
    assert deployment.faults.fired == [("slow", "policy", "prepare")]


async def test_a_slow_request_arrives_past_its_deadline_and_is_refused_there() -> None:
    """A slow retire whose deadline is within the timeout arrives late and changes nothing."""
    deployment = Deployment()
    deployment.faults.add("slow", route="retire")
    body = deployment.body(10, episode_ids=[EPISODE.to_wire()])
    with pytest.raises(TransportFailure, match="no reply"):
        await deployment.post("retire", body, timeout=15.0)
    assert deployment.clock.now() >= body["deadline_ts"]
    await drain_tasks()
    assert deployment.core.fence.mark("r") is None  # refused: deadline_exceeded


async def test_drop_reply_runs_the_request_and_loses_its_reply() -> None:
    """drop_reply: the participant acted; the caller only saw a timeout; a retry replays."""
    deployment = Deployment()
    deployment.faults.add("drop_reply", route="prepare")
    with pytest.raises(TransportFailure, match="no reply within"):
        await deployment.post("prepare", deployment.body())
    assert deployment.core.phase is Phase.PREPARED
    assert (await deployment.post("prepare", deployment.body())).body["phase"] == "prepared"


async def test_crash_before_publish_leaves_records_without_a_manifest(tmp_path: Path) -> None:
    """crash_before_publish: the commit fails after its records, nothing is published."""
    deployment = await prepared_with_a_commit_fault("crash_before_publish")
    reply = await deployment.post("commit", deployment.commit_body(tmp_path))
    assert reply.status == 500 and "SimulatedCrash" in reply.describe()
    directory = store.participant_dir(tmp_path, "model", "policy")
    assert list(directory.glob("records-*.jsonl")) and not deployment.published(tmp_path)
    assert deployment.core.before_publish == []  # it crashed once and is gone


async def test_a_crash_fault_on_a_refused_commit_does_not_wait_for_a_later_one(
    tmp_path: Path,
) -> None:
    """A commit that writes nothing consumes the crash: the next commit publishes."""
    deployment = await prepared_with_a_commit_fault("crash_before_publish")
    refused = await deployment.post("commit", deployment.commit_body(tmp_path, checkpoint_id="c9"))
    assert refused.error_code == "checkpoint_conflict"
    assert deployment.core.before_publish == []
    assert (await deployment.post("commit", deployment.commit_body(tmp_path))).status == 200
    assert deployment.published(tmp_path)


async def test_corrupt_records_flips_a_byte_after_a_successful_commit(tmp_path: Path) -> None:
    """corrupt_records: the commit replies 200, then its records no longer verify."""
    deployment = await prepared_with_a_commit_fault("corrupt_records")
    reply = await deployment.post("commit", deployment.commit_body(tmp_path))
    assert reply.status == 200
    manifest = store.read_manifest(tmp_path, kind="model", instance="policy")
    with pytest.raises(CorruptCheckpoint):
        store.verify_records(tmp_path, manifest)


async def test_corrupt_records_waits_for_a_commit_that_succeeds(tmp_path: Path) -> None:
    """A refused commit does not use up corrupt_records; the next successful one does."""
    deployment = await prepared_with_a_commit_fault("corrupt_records")
    refused = await deployment.post("commit", deployment.commit_body(tmp_path, checkpoint_id="c9"))
    assert refused.status == 409 and deployment.faults.fired == []
    await deployment.post("commit", deployment.commit_body(tmp_path))
    assert deployment.faults.fired == [("corrupt_records", "policy", "commit")]


async def test_a_custom_delivery_replaces_the_edge_and_keeps_the_faults() -> None:
    """``deliver`` carries the request instead of the edge; faults still fire around it."""
    delivered: list[tuple[str, str]] = []

    async def deliver(
        core: ParticipantCore, method: str, route: str, body: Mapping[str, Any] | None
    ) -> tuple[int, dict[str, Any]]:
        delivered.append((method, route))
        return 200, {"via": "custom"}

    deployment = Deployment(deliver=deliver)
    assert (await deployment.post("status", None)).body == {"via": "custom"}
    deployment.faults.add("error", route="renew")
    assert (await deployment.post("renew", deployment.body())).status == 500
    deployment.faults.add("drop_reply", route="resume")
    with pytest.raises(TransportFailure):
        await deployment.post("resume", deployment.body())
    assert delivered == [("GET", "status"), ("POST", "resume")]


async def test_a_fault_planned_while_a_request_is_delivered_still_strikes_it() -> None:
    """With no fault planned the request takes the plain path; a drop_reply planned
    while the participant works on it (the plan was empty when it started) still
    loses its reply, as when the plan is read at each step."""
    deployment = Deployment()

    async def deliver(
        core: ParticipantCore, method: str, route: str, body: Mapping[str, Any] | None
    ) -> tuple[int, dict[str, Any]]:
        deployment.faults.add("drop_reply", route=route)
        return 200, {"phase": "prepared"}

    deployment.transport = InProcessTransport(
        {"policy": deployment.core}, token=TOKEN, faults=deployment.faults, deliver=deliver
    )
    with pytest.raises(TransportFailure, match="no reply within"):
        await deployment.post("prepare", deployment.body())
    assert deployment.faults.fired == [("drop_reply", "policy", "prepare")]


# ------------------------------------------------------------------ corruption


def test_corrupt_records_file_flips_one_bit_in_the_middle(tmp_path: Path) -> None:
    """Exactly one byte changes, the middle one, by one bit; the length stays."""
    path = tmp_path / "records.jsonl"
    original = b'{"a": 1}\n{"b": 2}\n'
    path.write_bytes(original)
    corrupt_records_file(path)
    changed = path.read_bytes()
    assert len(changed) == len(original)
    diffs = [i for i, (a, b) in enumerate(zip(original, changed, strict=True)) if a != b]
    assert diffs == [len(original) // 2]
    assert original[diffs[0]] ^ changed[diffs[0]] == 0x01


def test_corrupt_records_file_makes_an_empty_file_non_empty(tmp_path: Path) -> None:
    """An empty records file gets one byte, so its digest changes too."""
    path = tmp_path / "records.jsonl"
    path.write_bytes(b"")
    corrupt_records_file(path)
    assert path.read_bytes() == b"x"


async def test_a_late_delivery_that_fails_leaves_no_unretrieved_exception() -> None:
    """The late request of slow may fail; its failure is collected, never reported unhandled."""

    async def broken(
        core: ParticipantCore, method: str, route: str, body: Mapping[str, Any] | None
    ) -> tuple[int, dict[str, Any]]:
        raise RuntimeError("the participant fell over")

    deployment = Deployment(deliver=broken)
    deployment.faults.add("slow", route="prepare")
    loop = asyncio.get_running_loop()
    unhandled: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: unhandled.append(context))
    try:
        with pytest.raises(TransportFailure):
            await deployment.post("prepare", deployment.body(), timeout=1.0)
        for _ in range(5):  # let the late request run (gathering it would retrieve its error)
            await asyncio.sleep(0)
        gc.collect()  # an unretrieved task exception is reported when the task is freed
        await asyncio.sleep(0)
    finally:
        loop.set_exception_handler(None)
    assert unhandled == []


# ---- bodies and replies carried as JSON would carry them ---------------------


class Shade(enum.StrEnum):
    DARK = "dark"


def _typed(value: Any) -> Any:
    # The value with the type of every leaf, so 1 and 1.0 and True are told apart.
    if isinstance(value, dict):
        return {key: _typed(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_typed(item) for item in value]
    if isinstance(value, float) and math.isnan(value):
        return ("nan",)
    return (type(value).__name__, value)


@pytest.mark.parametrize(
    "value",
    [
        {"phase": "idle", "checkpoint_id": None, "lease": 1.5, "ok": True, "n": 1},
        {"kind": Shade.DARK, "values": (1, 2.0, "3")},
        {"lease": float("nan"), "other": [float("inf")]},
        {"big": 2**70, 1: "int key"},
        {"nested": {"list": [{"a": None}, [1, 2]]}, "text": "é ☃"},
    ],
)
def test_the_trip_is_the_standard_librarys(value: dict[Any, Any]) -> None:
    """Same values and same types as json.loads(json.dumps(value)), NaN and tuples included."""
    assert _typed(through_json(value)) == _typed(json.loads(json.dumps(value)))


def test_what_json_cannot_carry_is_refused_as_before() -> None:
    """A value neither encoder can write raises the standard library's TypeError."""
    with pytest.raises(TypeError):
        through_json({"x": object()})
