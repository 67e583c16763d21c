"""Tests for envckpt.participant.edge: auth, validation and the error envelope."""

from __future__ import annotations

import math
import uuid
import weakref
from pathlib import Path
from typing import Any

import pytest

from envckpt.clock import FakeClock
from envckpt.episodes import EnvironmentEpisode
from envckpt.participant import edge
from envckpt.participant.core import ParticipantCore

from helpers.participant_doubles import START, TOKEN, JsonStateHooks, run_turn

AUTH = f"Bearer {TOKEN}"
BASE: dict[str, Any] = {"checkpoint_id": "c1", "deadline_ts": START + 30}


@pytest.fixture
def hooks() -> JsonStateHooks:
    return JsonStateHooks("agent")


@pytest.fixture
def core(hooks: JsonStateHooks) -> ParticipantCore:
    return ParticipantCore(server_name="agent", kind="agent", hooks=hooks, clock=FakeClock(START))


async def call(
    core: ParticipantCore,
    route: str,
    body: Any = None,
    *,
    method: str = "POST",
    authorization: str | None = AUTH,
) -> tuple[int, dict[str, Any]]:
    return await edge.handle(core, method, route, body, authorization=authorization, token=TOKEN)


def code_of(body: dict[str, Any]) -> str:
    return str(body["error"]["code"])


def test_check_token_refuses_an_empty_token() -> None:
    """A participant refuses to install its routes without a secret."""
    with pytest.raises(ValueError):
        edge.check_token("")
    with pytest.raises(ValueError):
        edge.check_token(None)  # type: ignore[arg-type]
    assert edge.check_token("t") == "t"


@pytest.mark.parametrize(
    "header",
    [None, "", TOKEN, "Bearer", "Bearer ", "Bearer wrong", f"bearer {TOKEN}", f"Basic {TOKEN}"],
)
def test_authorized_needs_the_exact_bearer_token(header: str | None) -> None:
    """Only ``Bearer <token>`` with the exact token is authorised."""
    assert not edge.authorized(header, TOKEN)
    assert edge.authorized(AUTH, TOKEN)


def test_an_empty_secret_authorises_nobody() -> None:
    """With an empty token even an empty bearer header is refused."""
    assert not edge.authorized("Bearer ", "")


@pytest.mark.parametrize("authorization", [None, "Bearer nope"])
async def test_every_route_requires_the_token(
    core: ParticipantCore, authorization: str | None
) -> None:
    """status included, a missing or wrong token gets 401 unauthorized."""
    for route, method in (("status", "GET"), ("prepare", "POST"), ("nope", "POST")):
        status, body = await call(core, route, BASE, method=method, authorization=authorization)
        assert status == 401
        assert code_of(body) == "unauthorized"
    assert core.phase == "idle"


async def test_status_with_the_right_token(core: ParticipantCore) -> None:
    """GET status with the right token answers 200 and the status body."""
    status, body = await call(core, "status", method="GET")
    assert status == 200
    assert body["kind"] == "agent" and body["phase"] == "idle"


async def test_unknown_route_is_invalid(core: ParticipantCore) -> None:
    """A route the protocol does not define gets invalid_request."""
    status, body = await call(core, "pause", BASE)
    assert status == 422
    assert code_of(body) == "invalid_request"


@pytest.mark.parametrize(("route", "method"), [("status", "POST"), ("prepare", "GET")])
async def test_wrong_method_is_invalid(core: ParticipantCore, route: str, method: str) -> None:
    """status is GET only and the other routes POST only."""
    status, body = await call(core, route, BASE, method=method)
    assert status == 422
    assert code_of(body) == "invalid_request"
    assert core.phase == "idle"


@pytest.mark.parametrize("body", [None, [], "text", 3])
async def test_body_must_be_an_object(core: ParticipantCore, body: Any) -> None:
    """A POST body that is not a JSON object gets invalid_request."""
    status, reply = await call(core, "prepare", body)
    assert status == 422
    assert code_of(reply) == "invalid_request"


async def test_unknown_fields_are_refused(core: ParticipantCore) -> None:
    """An unknown field gets invalid_request and the call does not run."""
    status, body = await call(core, "prepare", {**BASE, "force": True})
    assert status == 422
    assert "force" in body["error"]["detail"]
    assert core.phase == "idle"


@pytest.mark.parametrize(
    ("route", "extra"),
    [
        ("retire", {"episode_ids": [{"rollout_id": "../x", "attempt": 0}]}),
        ("retire", {"episode_ids": [{"rollout_id": "a/b", "attempt": 0}]}),
        ("retire", {"episode_ids": [{"rollout_id": "x-a1", "attempt": 0}]}),
        ("forget", {"rollout_ids": ["x-a1"]}),
        ("prepare", {"checkpoint_id": "c" * 129}),
        ("prepare", {"checkpoint_id": "../c"}),
    ],
)
async def test_bad_ids_are_refused(
    core: ParticipantCore, route: str, extra: dict[str, Any]
) -> None:
    """Rollout and checkpoint ids outside the grammar get invalid_request."""
    status, body = await call(core, route, {**BASE, **extra})
    assert status == 422
    assert code_of(body) == "invalid_request"
    assert core.fence.mark("x") is None


@pytest.mark.parametrize("deadline", [math.nan, math.inf, -math.inf, True, "soon", None])
async def test_bad_deadlines_are_refused(core: ParticipantCore, deadline: object) -> None:
    """Non-finite, boolean and string deadlines get invalid_request."""
    status, body = await call(core, "prepare", {**BASE, "deadline_ts": deadline})
    assert status == 422
    assert code_of(body) == "invalid_request"
    assert core.phase == "idle"


@pytest.mark.parametrize(
    ("route", "body"),
    [
        ("prepare", {"checkpoint_id": "c1"}),
        ("prepare", {"deadline_ts": START}),
        ("commit", BASE),
        ("restore", {**BASE, "checkpoint_dir": "/x"}),
        ("retire", BASE),
        ("forget", BASE),
    ],
)
async def test_missing_fields_are_refused(
    core: ParticipantCore, route: str, body: dict[str, Any]
) -> None:
    """A body without a required field gets invalid_request."""
    status, reply = await call(core, route, body)
    assert status == 422
    assert code_of(reply) == "invalid_request"


@pytest.mark.parametrize(("route", "field"), [("retire", "episode_ids"), ("forget", "rollout_ids")])
async def test_retire_and_forget_refuse_empty_lists(
    core: ParticipantCore, route: str, field: str
) -> None:
    """retire and forget need at least one item."""
    status, body = await call(core, route, {**BASE, field: []})
    assert status == 422
    assert code_of(body) == "invalid_request"


async def test_protocol_errors_keep_their_code_and_status(core: ParticipantCore) -> None:
    """A refusal by the core comes back as its envelope with the code's HTTP status."""
    status, body = await call(core, "renew", BASE)
    assert status == 409
    assert body == {"error": {"code": "invalid_phase", "detail": body["error"]["detail"]}}


async def test_unexpected_hook_failure_is_a_500_envelope(
    core: ParticipantCore, hooks: JsonStateHooks
) -> None:
    """An unexpected exception from a hook answers 500 checkpoint_error with the envelope."""
    hooks.status_error = RuntimeError("hook exploded")
    status, body = await call(core, "status", method="GET")
    assert status == 500
    assert body == {"error": {"code": "checkpoint_error", "detail": "RuntimeError: hook exploded"}}


async def test_every_route_reaches_the_core(
    core: ParticipantCore, hooks: JsonStateHooks, tmp_path: Path
) -> None:
    """Each POST route runs the matching core operation with the parsed body."""
    episode = {"rollout_id": "r1", "attempt": 0}
    await run_turn(core, hooks, EnvironmentEpisode("r1", 0))
    status, body = await call(core, "prepare", BASE)
    assert (status, body["phase"]) == (200, "prepared")
    status, body = await call(core, "renew", {**BASE, "deadline_ts": START + 60})
    assert (status, body) == (200, {"lease_expires_at": START + 60 + core.lease_grace})
    commit = {**BASE, "checkpoint_dir": str(tmp_path), "episode_ids": [episode], "stop": True}
    status, body = await call(core, "commit", commit)
    assert (status, body["episode_ids"]) == (200, ["r1"])
    assert hooks.released == 1
    status, body = await call(core, "resume", BASE)
    assert (status, body) == (200, {"phase": "idle", "idempotent": False})
    retire = {"checkpoint_id": "c2", "deadline_ts": START + 30, "episode_ids": [episode]}
    status, body = await call(core, "retire", retire)
    assert (status, body) == (200, {"retired": ["r1"]})
    forget = {"checkpoint_id": "c2", "deadline_ts": START + 30, "rollout_ids": ["r1"]}
    status, body = await call(core, "forget", forget)
    assert (status, body) == (200, {"forgotten": ["r1"]})
    fresh = ParticipantCore(
        server_name="agent", kind="agent", hooks=JsonStateHooks(), clock=FakeClock(START)
    )
    restore = {
        **BASE,
        "checkpoint_id": "r-1",
        "checkpoint_dir": str(tmp_path),
        "episode_ids": [episode],
    }
    status, body = await call(fresh, "restore", restore)
    assert (status, body["restored"], body["source_checkpoint_id"]) == (200, ["r1-a1"], "c1")


async def test_a_logged_failure_never_shows_the_token(capsys: pytest.CaptureFixture[str]) -> None:
    """An unexpected hook failure is logged with a traceback that holds no bearer token."""
    import structlog

    class Exploding(JsonStateHooks):
        def live_episodes(self) -> frozenset[EnvironmentEpisode]:
            raise RuntimeError("boom")

    # Made at run time, so the rendered source lines cannot contain it.
    secret = "token-" + uuid.uuid4().hex
    core = ParticipantCore(server_name="agent", kind="agent", hooks=Exploding())
    # The console renderer prints frame locals of a logged traceback.
    structlog.configure(
        processors=[structlog.dev.ConsoleRenderer()],
        logger_factory=structlog.PrintLoggerFactory(),
    )
    try:
        status, body = await edge.handle(
            core, "GET", "status", None, authorization=f"Bearer {secret}", token=secret
        )
    finally:
        structlog.reset_defaults()
    assert (status, body["error"]["code"]) == (500, "checkpoint_error")
    printed = capsys.readouterr().out
    assert "boom" in printed
    assert secret not in printed


# ------------------------------------------------------------- request bounds


async def test_a_deadline_beyond_the_longest_lease_is_refused_on_every_route(
    core: ParticipantCore,
) -> None:
    """deadline_ts more than max_lease_seconds past the core's own clock: 422, nothing changes."""
    far = {"checkpoint_id": "c-far", "deadline_ts": START + 3600.5}
    bodies = {
        "prepare": far,
        "renew": far,
        "resume": far,
        "commit": {**far, "checkpoint_dir": "/x"},
        "restore": {**far, "checkpoint_dir": "/x", "episode_ids": []},
        "retire": {**far, "episode_ids": [{"rollout_id": "r", "attempt": 0}]},
        "forget": {**far, "rollout_ids": ["r"]},
    }
    for route, body in bodies.items():
        status, reply = await call(core, route, body)
        assert (status, code_of(reply)) == (422, "invalid_request"), route
        assert "max_lease_seconds" in reply["error"]["detail"]
    assert (core.phase, core.checkpoint_id) == ("idle", None)
    status, _ = await call(core, "prepare", {**far, "deadline_ts": START + 3600.0})
    assert status == 200


async def test_the_lease_bound_is_configurable(hooks: JsonStateHooks) -> None:
    """max_lease_seconds on the core sets how far ahead a deadline may lie."""
    core = ParticipantCore(
        server_name="agent", kind="agent", hooks=hooks, clock=FakeClock(START), max_lease_seconds=10
    )
    status, _ = await call(core, "prepare", {"checkpoint_id": "c1", "deadline_ts": START + 11})
    assert status == 422
    status, _ = await call(core, "prepare", {"checkpoint_id": "c1", "deadline_ts": START + 9})
    assert status == 200


@pytest.mark.parametrize("route", ["commit", "restore"])
async def test_directories_outside_the_root_are_refused_before_any_file_operation(
    hooks: JsonStateHooks, tmp_path: Path, route: str
) -> None:
    """A confined core refuses '/', a sibling and a relative path with 422; nothing is created."""
    root = tmp_path / "root"
    core = ParticipantCore(
        server_name="agent",
        kind="agent",
        hooks=hooks,
        clock=FakeClock(START),
        checkpoint_root=root,
    )
    assert (await call(core, "prepare", BASE))[0] == 200
    episodes: dict[str, Any] = {"episode_ids": []} if route == "restore" else {}
    for directory in ("/", str(tmp_path / "elsewhere"), "relative", str(root) + "/../x"):
        status, reply = await call(core, route, {**BASE, "checkpoint_dir": directory, **episodes})
        assert (status, code_of(reply)) == (422, "invalid_request"), directory
    assert sorted(path.name for path in tmp_path.iterdir()) == []
    assert core.phase == "prepared"


class _Body(dict[str, Any]):
    """A parsed body that a weak reference can watch."""


async def test_the_body_is_let_go_once_validated(
    core: ParticipantCore, hooks: JsonStateHooks, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the commit runs, nothing holds the parsed body any more (only the validated
    request): a commit naming many episodes does not keep a dict per episode alive."""
    episode = {"rollout_id": "r1", "attempt": 0}
    hooks.put(EnvironmentEpisode("r1", 0))
    assert (await call(core, "prepare", BASE))[0] == 200
    body = _Body({**BASE, "checkpoint_dir": str(tmp_path), "episode_ids": [episode]})
    watched = weakref.ref(body)
    alive_during_export: list[bool] = []
    export = hooks.export

    def watching_export(scope: frozenset[EnvironmentEpisode]) -> Any:
        alive_during_export.append(watched() is not None)
        return export(scope)

    monkeypatch.setattr(hooks, "export", watching_export)
    pending = edge.handle(core, "POST", "commit", body, authorization=AUTH, token=TOKEN)
    del body
    status, reply = await pending
    assert status == 200, reply
    assert reply["episode_ids"] == ["r1"]
    assert alive_during_export == [False]


def test_validate_refuses_what_handle_refuses_and_touches_nothing(core: ParticipantCore) -> None:
    """``validate`` checks a request as ``handle`` would, without calling the core."""
    assert edge.validate(core, "GET", "status", None) is None
    request = edge.validate(core, "POST", "prepare", dict(BASE))
    assert request is not None and request.checkpoint_id == "c1"
    with pytest.raises(edge.ParticipantError) as refused:
        edge.validate(core, "POST", "prepare", {**BASE, "extra": 1})
    assert refused.value.code == "invalid_request"
    with pytest.raises(edge.ParticipantError):
        edge.validate(core, "POST", "prepare", {**BASE, "deadline_ts": START + 10**7})
    assert core.phase == "idle" and core.checkpoint_id is None
