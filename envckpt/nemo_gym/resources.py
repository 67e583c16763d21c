"""The generic session participant of a nemo-gym resources server.

A resources server keys rollout state by the session id of its signed cookie.
This participant links each session to the episode that seeded it and admits
every request of that episode through ``core.admit``::

    participant = install_resources_participant(server, app)   # from hosting.checkpointable
    # POST /ng-rollout/<capture key>/seed_session (or /reset)  -> admitted; session linked
    # POST /<tool> with the session cookie                    -> admitted as the linked episode
    # POST /ng-rollout/<capture key>/verify, /close_session, /close,
    #      or a /step replying terminated or truncated        -> the session ends

The gate runs inside nemo-gym's session middleware (so it reads the session)
and inside ``RolloutContextMiddleware`` (so it sees the prefix's capture key).
A refused request is answered with the protocol's envelope (409
``admission_closed`` while a checkpoint is open, ``stale_attempt`` for a
retired attempt) and never reaches the server. Tool calls carry no attempt:
a session stays linked to its episode after it ends or is retired, so a late
call of a retired attempt is still refused.

State goes through the server's ``SessionCheckpoint`` (``sessions.py``):
export at commit, ``restore_session`` at restore (linked to the next
attempt), ``drop_session`` at retire. Without one the participant is
``restart_only``. With an audit file, every admitted request that succeeded
is logged (one flushed JSON line, before the reply leaves) with an
application id also sent as the ``x-envckpt-application`` header, so a
checker can tell which applications a finished rollout kept.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envckpt.episodes import EnvironmentEpisode, retired_by
from envckpt.errors import ParticipantError
from envckpt.nemo_gym import sessions as session_protocol
from envckpt.nemo_gym.gate import envelope_response, refuse
from envckpt.nemo_gym.sessions import SessionCheckpoint
from envckpt.nemo_gym.settings import envckpt_block
from envckpt.participant.core import ParticipantCore
from envckpt.participant.hooks import HookDefaults
from envckpt.protocol import CHECKPOINT_ROUTE_PREFIX

SEED_ROUTES = frozenset({"/seed_session", "/reset"})
END_ROUTES = frozenset({"/verify", "/close_session", "/close"})
STEP_ROUTE = "/step"
APPLICATION_HEADER = "x-envckpt-application"
MAX_AUDITED_BODY = 64 * 1024


@dataclass(slots=True)
class _Link:
    episode: EnvironmentEpisode
    live: bool = True


@dataclass(frozen=True, slots=True)
class SavedSession:
    """One episode's validated session, ready to install."""

    session_id: str
    state: dict[str, Any]


class SessionParticipant(HookDefaults):
    """Session links, admission and ``StateHooks`` of one resources server."""

    def __init__(
        self,
        *,
        server_name: str,
        sessions: SessionCheckpoint | None,
        audit_path: str | Path | None = None,
    ) -> None:
        self.sessions = sessions
        mode = "restart_only" if sessions is None else sessions.checkpoint_mode
        self.core = ParticipantCore(
            server_name=server_name, kind="resources", hooks=self, mode=mode
        )
        self.audit_path = None if audit_path is None else Path(audit_path)
        if self.audit_path is not None:
            self.audit_path.parent.mkdir(parents=True, exist_ok=True)
        self.process_tag = uuid.uuid4().hex[:12]
        self._applied = 0
        self._links: dict[str, _Link] = {}
        self._live: dict[EnvironmentEpisode, str] = {}

    # -------------------------------------------------------------- links

    def episode_for(
        self, capture_key: str | None, session_id: str | None
    ) -> EnvironmentEpisode | None:
        """The episode a request belongs to: its prefix, else its session's link, else none."""
        if capture_key is not None:
            try:
                return EnvironmentEpisode.from_capture_key(capture_key)
            except ValueError as error:
                raise ParticipantError("rollout_id_required", str(error)) from None
        link = self._links.get(session_id) if session_id is not None else None
        return None if link is None else link.episode

    def link(self, session_id: str, episode: EnvironmentEpisode) -> None:
        previous = self._links.get(session_id)
        if previous is not None and previous.live:
            self._live.pop(previous.episode, None)
        stale = self._live.pop(episode, None)
        if stale is not None and stale != session_id:
            self._links[stale].live = False
        self._links[session_id] = _Link(episode)
        self._live[episode] = session_id

    def end(self, episode: EnvironmentEpisode) -> None:
        session_id = self._live.pop(episode, None)
        if session_id is not None:
            self._links[session_id].live = False

    def linked_sessions(self) -> dict[str, str]:
        """Session id -> capture key of every live session (inspection)."""
        return {sid: episode.capture_key for episode, sid in self._live.items()}

    # -------------------------------------------------------------- audit

    def next_application(self) -> str:
        self._applied += 1
        return f"{self.process_tag}/{self._applied}"

    def audit(self, record: Mapping[str, Any]) -> None:
        if self.audit_path is None:
            return
        # One flushed line per application, before its reply: a killed process loses none.
        with self.audit_path.open("a", encoding="utf-8") as stream:
            stream.write(json.dumps(record, sort_keys=True) + "\n")
            stream.flush()

    def session_state(self, session_id: str | None) -> dict[str, Any] | None:
        if session_id is None or self.sessions is None:
            return None
        return self.sessions.export_session(session_id)

    # -------------------------------------------------------- state hooks

    def live_episodes(self) -> frozenset[EnvironmentEpisode]:
        return frozenset(self._live)

    def export(
        self, scope: frozenset[EnvironmentEpisode]
    ) -> Iterator[tuple[EnvironmentEpisode, dict[str, Any]]]:
        if self.sessions is None or self.core.mode != "export_restore":
            return
        for episode in sorted(scope & self._live.keys()):
            session_id = self._live[episode]
            state = self.sessions.export_session(session_id)
            if state is not None:  # None: the server holds nothing for it any more
                yield episode, {"session_id": session_id, "state": state}

    def validate(self, episode: EnvironmentEpisode, state: Mapping[str, Any]) -> SavedSession:
        if self.sessions is None:
            raise ValueError("this resources server saves no session state")
        if not isinstance(state, Mapping) or set(state) != {"session_id", "state"}:
            raise ValueError("a saved session has exactly session_id and state")
        session_id, body = state["session_id"], state["state"]
        if not isinstance(session_id, str) or not session_id:
            raise ValueError("session_id must be a non-empty string")
        if not isinstance(body, Mapping):
            raise ValueError("a session's state must be a JSON object")
        session_protocol.validate_state(self.sessions, body)
        return SavedSession(session_id, json.loads(json.dumps(body)))

    def install(self, restored: Sequence[tuple[EnvironmentEpisode, object]]) -> None:
        assert self.sessions is not None  # validate refused every state otherwise
        saved = [(episode, _as_saved(state)) for episode, state in restored]
        for episode, session in saved:
            self.sessions.restore_session(session.session_id, session.state)
            self.link(session.session_id, episode)

    async def retire(self, episodes: tuple[EnvironmentEpisode, ...]) -> None:
        for episode in [e for e in self._live if retired_by(e, episodes)]:
            session_id = self._live.pop(episode)
            # The link stays (not live): a late call of this attempt is refused.
            self._links[session_id].live = False
            session_protocol.drop(self.sessions, session_id)

    def forget(self, rollout_ids: Iterable[str]) -> None:
        gone = set(rollout_ids)
        for session_id in [s for s, link in self._links.items() if link.episode.rollout_id in gone]:
            if not self._links[session_id].live:
                del self._links[session_id]


def _as_saved(state: object) -> SavedSession:
    if not isinstance(state, SavedSession):
        raise TypeError(f"expected a validated SavedSession, got {type(state).__name__}")
    return state


class SessionGate:
    """Pure-ASGI middleware: admit each request of an episode, link and end sessions."""

    def __init__(self, app: Any, participant: SessionParticipant) -> None:
        self.app = app
        self.participant = participant

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        from nemo_gym.rollout_correlation import current_rollout_id
        from nemo_gym.server_utils import SESSION_ID_KEY

        participant = self.participant
        route = str(scope.get("path", ""))
        if route.startswith(CHECKPOINT_ROUTE_PREFIX):
            # The control plane is never episode work, whatever cookie it carries:
            # admitted as one, a prepare would wait for itself.
            await self.app(scope, receive, send)
            return
        session = scope.get("session")
        session_id = session.get(SESSION_ID_KEY) if isinstance(session, Mapping) else None
        try:
            episode = participant.episode_for(current_rollout_id(), session_id)
        except ParticipantError as error:
            await envelope_response(error)(scope, receive, send)
            return
        if episode is None:
            await self.app(scope, receive, send)  # not rollout work (metrics, health, ...)
            return
        exchange = _Exchange(participant, episode, route, scope)
        try:
            async with participant.core.admit(episode):
                if not participant.core.fence.is_current(episode):
                    raise refuse("stale_attempt", f"{episode.capture_key} is not current")
                await self.app(scope, exchange.receive(receive), exchange.send(send))
        except ParticipantError as error:
            if exchange.started:
                raise
            await envelope_response(error)(scope, receive, send)


@dataclass(slots=True, eq=False)
class _Exchange:
    """One admitted request: records its body, stamps and audits its reply."""

    participant: SessionParticipant
    episode: EnvironmentEpisode
    route: str
    scope: Any
    started: bool = False
    status: int = 0
    request: bytearray = field(default_factory=bytearray)
    reply: bytearray = field(default_factory=bytearray)

    def session_id(self) -> str | None:
        from nemo_gym.server_utils import SESSION_ID_KEY

        session = self.scope.get("session")
        value = session.get(SESSION_ID_KEY) if isinstance(session, Mapping) else None
        return value if isinstance(value, str) else None

    def receive(self, receive: Any) -> Any:
        async def wrapped() -> Any:
            message = await receive()
            if message.get("type") == "http.request" and len(self.request) < MAX_AUDITED_BODY:
                self.request.extend(message.get("body", b"") or b"")
            return message

        return wrapped

    def send(self, send: Any) -> Any:
        async def wrapped(message: dict[str, Any]) -> None:
            if message.get("type") == "http.response.start":
                self.started = True
                self.status = int(message.get("status") or 0)
                if 200 <= self.status < 300:
                    application = self._applied()
                    headers = list(message.get("headers") or [])
                    headers.append((APPLICATION_HEADER.encode(), application.encode()))
                    message = {**message, "headers": headers}
            elif message.get("type") == "http.response.body":
                if self.route == STEP_ROUTE:
                    self.reply.extend(message.get("body", b"") or b"")
                if not message.get("more_body", False):
                    self._ended()  # before the last byte leaves: the caller sees it done
            await send(message)

        return wrapped

    def _applied(self) -> str:
        """Link a seeded session, then audit this application (before the reply leaves)."""
        participant = self.participant
        session_id = self.session_id()
        if self.route in SEED_ROUTES and session_id is not None:
            participant.link(session_id, self.episode)
        application = participant.next_application()
        participant.audit(
            {
                "server": participant.core.server_name,
                "application": application,
                "capture_key": self.episode.capture_key,
                "rollout_id": self.episode.rollout_id,
                "attempt": self.episode.attempt,
                "session_id": session_id,
                "route": self.route,
                "request": _json_or_none(self.request),
                "state": participant.session_state(session_id),
            }
        )
        return application

    def _ended(self) -> None:
        if not 200 <= self.status < 300:
            return
        if self.route in END_ROUTES:
            self.participant.end(self.episode)
        elif self.route == STEP_ROUTE:
            reply = _json_or_none(self.reply)
            if isinstance(reply, Mapping) and (reply.get("terminated") or reply.get("truncated")):
                self.participant.end(self.episode)


def _json_or_none(raw: bytes | bytearray) -> Any:
    try:
        return json.loads(bytes(raw)) if raw else None
    except ValueError:
        return None


def install_resources_participant(server: Any, app: Any) -> SessionParticipant:
    """Add the session participant to a built resources-server app (see hosting)."""
    from starlette.middleware import Middleware
    from starlette.middleware.sessions import SessionMiddleware

    block = envckpt_block(server.server_client.global_config_dict)
    audit_dir = block.get("audit_dir")
    participant = SessionParticipant(
        server_name=server.config.name,
        sessions=session_protocol.session_checkpoint_for(server),
        audit_path=None if not audit_dir else Path(audit_dir) / f"{server.config.name}.audit.jsonl",
    )
    # user_middleware[0] is outermost; the gate goes right inside SessionMiddleware.
    stack = app.user_middleware
    index = next((i for i, m in enumerate(stack) if m.cls is SessionMiddleware), None)
    if index is None:
        raise RuntimeError(f"{type(server).__name__}'s app has no session middleware to sit inside")
    stack.insert(index + 1, Middleware(SessionGate, participant=participant))
    return participant
