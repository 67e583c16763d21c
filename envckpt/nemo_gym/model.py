"""The policy model server as a participant: a generation gate and its token rows.

Hosting adds a pure-ASGI gate in front of nemo-gym's capture middleware and
installs this participant as the process's token sink::

    participant = install_model_participant(server, app)    # from hosting.checkpointable
    # POST /ng-rollout/<key>[/training-token-capture]/v1/{responses,chat/completions,messages}
    #   -> admitted as that episode; refused with the envelope (409 admission_closed,
    #      409 stale_attempt, 400 rollout_id_required for an unprefixed generation)
    # POST /envckpt/v1/release {"capture_key"}  -> the episode's staging keys; the rows leave

Every row nemo-gym captures (one ``TokenEntry`` per model call) is, in this
order, shipped to the trainer (``staging.py``, optional), appended to
nemo-gym's own token store (so its lineage resolver finds it), then recorded
under the staging key ``<capture key>/<model_call_id>``. nemo-gym never fails
a model call for a capture error; the gate does, with the sink's error, so a
row the trainer refused (a superseded attempt) fails that generation.

A prepare treats generations still running by the ``model_calls`` policy
(``envckpt.model_calls`` in the config: ``wait``, ``refuse`` or
``wait_then_refuse``, the default; ``envckpt.participant.model_calls``): a
refused generation is cancelled and answered ``409 admission_closed``, and
the agent parks at its last turn and asks again after resume. A generation
is refusable until its row is recorded or its reply starts; a refused one
records no row, no failure and no call intent (the intent nemo-gym's store
keeps per call is recorded when the generation delivers, so a refused call
leaves none dangling).

Commit exports each episode's rows and reports ``staging_keys`` and
``staging_keys_by_episode``. Restore writes the rows into the store under the
next attempt's capture key (same ``model_call_id``, parent links and digests,
so the continuation's first call resolves its parent) and keeps their staging
keys: a row carried over from an earlier attempt belongs to both.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse

from envckpt.episodes import EnvironmentEpisode, retired_by
from envckpt.errors import ParticipantError
from envckpt.nemo_gym.gate import envelope_response
from envckpt.nemo_gym.settings import envckpt_block, staging_token
from envckpt.participant.core import ParticipantCore
from envckpt.participant.hooks import HookDefaults
from envckpt.participant.model_calls import (
    DEFAULT_MODEL_CALLS,
    ModelCallPolicy,
    ModelCalls,
    deliver,
    parse_model_calls,
    refused,
)

GENERATION_PATHS = frozenset({"/v1/responses", "/v1/chat/completions", "/v1/messages"})
RELEASE_PATH = "/envckpt/v1/release"
_PREFIX = re.compile(r"^/ng-rollout/(?P<key>[^/]+)(?:/training-token-capture)?(?P<rest>/.*)$")


def staging_key(capture_key: str, model_call_id: str) -> str:
    return f"{capture_key}/{model_call_id}"


@dataclass(frozen=True, slots=True)
class TokenRow:
    """One captured model call: its staging key and the ``TokenEntry`` as JSON."""

    staging_key: str
    entry: dict[str, Any]


@dataclass(slots=True)
class _Call:
    """One admitted generation; the sink reports a failed row here for the gate."""

    episode: EnvironmentEpisode
    failure: ParticipantError | None = None
    # nemo-gym's call intent, recorded when a refusable generation delivers.
    intent: tuple[str, str] | None = None


_CALL: ContextVar[_Call | None] = ContextVar("envckpt_model_call", default=None)


class ModelParticipant(HookDefaults):
    """Token-row ledger, ``TokenSink`` and ``StateHooks`` of the policy model server.

    ``store`` is nemo-gym's ``TokenCaptureStore`` (None without capture);
    ``stager`` ships rows to the trainer (None: rows stay local).
    """

    def __init__(
        self,
        *,
        server_name: str,
        store: Any = None,
        stager: Any = None,
        require_rollout_id: bool = True,
        model_calls: ModelCallPolicy = DEFAULT_MODEL_CALLS,
    ) -> None:
        self.store = store
        self.stager = stager
        self.require_rollout_id = require_rollout_id
        self.admission_closes = 0
        self._rows: dict[EnvironmentEpisode, list[TokenRow]] = {}
        self._seen: set[EnvironmentEpisode] = set()
        self.calls = ModelCalls(model_calls)
        self.core = ParticipantCore(
            server_name=server_name, kind="model", hooks=self, model_calls=self.calls
        )

    def rows(self) -> dict[str, list[TokenRow]]:
        """Capture key -> rows held (inspection)."""
        return {episode.capture_key: list(rows) for episode, rows in self._rows.items()}

    # ------------------------------------------------------------ token sink

    async def put(self, entry: Any) -> None:
        """nemo-gym's ``TokenSink.put``: stage, store, then record one row."""
        call = _CALL.get()
        try:
            await self._put(entry)
        except Exception as error:
            if call is not None and call.failure is None:
                call.failure = (
                    error
                    if isinstance(error, ParticipantError)
                    else ParticipantError("checkpoint_error", f"{type(error).__name__}: {error}")
                )
            raise

    async def _put(self, entry: Any) -> None:
        deliver()  # generated: from here on this call is never refused
        episode = EnvironmentEpisode.from_capture_key(entry.rollout_id)
        self._require_current(episode)
        call = _CALL.get()
        if call is not None and call.intent is not None and self.store is not None:
            await self.store.begin_call(*call.intent)
            call.intent = None
        key = staging_key(entry.rollout_id, entry.model_call_id)
        row = entry.model_dump(mode="json")
        if self.stager is not None:
            await self.stager.stage(entry.rollout_id, key, json.dumps(row, sort_keys=True))
        if self.store is not None:
            await asyncio.to_thread(self.store.append, entry)
        # Retired while staging: the trainer clears orphan rows; the ledger must not get it back.
        self._require_current(episode)
        self._rows.setdefault(episode, []).append(TokenRow(key, row))

    async def mark_incomplete(self, rollout_id: str, model_call_id: str = "") -> None:
        if refused():
            return  # refused for a checkpoint: its caller asks again, nothing was lost
        if self.store is not None:
            await self.store.mark_incomplete(rollout_id, model_call_id)

    async def begin_call(self, rollout_id: str, model_call_id: str) -> None:
        call = _CALL.get()
        if call is not None and self.calls.policy is not ModelCallPolicy.WAIT:
            # A prepare may still refuse this call: its intent would dangle
            # (nemo-gym masks such a rollout), so it is recorded on delivery.
            call.intent = (rollout_id, model_call_id)
            return
        if self.store is not None:
            await self.store.begin_call(rollout_id, model_call_id)

    async def close(self) -> None:
        if self.stager is not None:
            await self.stager.aclose()

    def _require_current(self, episode: EnvironmentEpisode) -> None:
        if not self.core.fence.is_current(episode):
            raise ParticipantError("stale_attempt", f"{episode.capture_key} is not current")

    async def first_sight(self, episode: EnvironmentEpisode) -> None:
        """A fresh attempt starts with an empty capture (a killed run may have left one)."""
        if episode in self._rows or episode in self._seen:
            return
        self._seen.add(episode)
        if self.store is not None:
            await asyncio.to_thread(self.store.delete, episode.capture_key)

    # --------------------------------------------------------------- release

    async def release_endpoint(self, request: Request) -> JSONResponse:
        """``POST /envckpt/v1/release``: hand the episode's staging keys over, drop its rows.

        Not admitted: the agent releases inside its own admitted step, possibly
        after this model closed admission for a checkpoint.
        """
        try:
            body = json.loads(await request.body())
            capture_key = body.get("capture_key") if isinstance(body, dict) else None
            if not isinstance(capture_key, str):
                raise ParticipantError("invalid_request", 'send {"capture_key": <str>}')
            try:
                episode = EnvironmentEpisode.from_capture_key(capture_key)
            except ValueError as error:
                raise ParticipantError("rollout_id_required", str(error)) from None
            self._require_current(episode)
        except ParticipantError as error:
            return envelope_response(error)
        except ValueError as error:
            return envelope_response(ParticipantError("invalid_request", str(error)))
        rows = self._rows.pop(episode, [])
        return JSONResponse(
            {"capture_key": capture_key, "staging_keys": [row.staging_key for row in rows]}
        )

    # ----------------------------------------------------------- state hooks

    def live_episodes(self) -> frozenset[EnvironmentEpisode]:
        return frozenset(self._rows)

    async def close_admission(self) -> None:
        # Running generations finish (admit tracks them); new ones are refused.
        self.admission_closes += 1

    def export(
        self, scope: frozenset[EnvironmentEpisode]
    ) -> Iterator[tuple[EnvironmentEpisode, dict[str, Any]]]:
        for episode in sorted(scope & self._rows.keys()):
            rows = [{"staging_key": r.staging_key, "entry": r.entry} for r in self._rows[episode]]
            yield episode, {"rows": json.loads(json.dumps(rows))}

    def commit_extras(self, exported: tuple[EnvironmentEpisode, ...]) -> dict[str, Any]:
        by_episode = {
            episode.capture_key: sorted(row.staging_key for row in self._rows.get(episode, ()))
            for episode in exported
        }
        keys = sorted({key for rows in by_episode.values() for key in rows})
        return {"staging_keys": keys, "staging_keys_by_episode": by_episode}

    def validate(
        self, episode: EnvironmentEpisode, state: Mapping[str, Any]
    ) -> tuple[TokenRow, ...]:
        return parse_rows(episode, state)

    def install(self, restored: Sequence[tuple[EnvironmentEpisode, object]]) -> None:
        from nemo_gym.token_id_capture import TokenEntry

        plans = [(episode, _as_rows(rows)) for episode, rows in restored]
        for episode, rows in plans:
            moved = [
                TokenRow(row.staging_key, {**row.entry, "rollout_id": episode.capture_key})
                for row in rows
            ]
            if self.store is not None:
                # The store is this process's; nothing ran here yet (restore needs a
                # fresh process), so whatever it holds under this key is stale.
                self.store.delete(episode.capture_key)
                for row in moved:
                    self.store.append(TokenEntry.model_validate(row.entry))
            self._rows[episode] = moved
            self._seen.add(episode)

    async def retire(self, episodes: tuple[EnvironmentEpisode, ...]) -> None:
        doomed = [e for e in self._rows if retired_by(e, episodes)]
        for held in doomed:
            del self._rows[held]
            if self.store is not None:
                await asyncio.to_thread(self.store.delete, held.capture_key)

    def forget(self, rollout_ids: Iterable[str]) -> None:
        gone = set(rollout_ids)
        self._seen = {e for e in self._seen if e.rollout_id not in gone}


def _as_rows(rows: object) -> tuple[TokenRow, ...]:
    if not isinstance(rows, tuple) or not all(isinstance(r, TokenRow) for r in rows):
        raise TypeError("expected validated token rows")
    return rows


def parse_rows(episode: EnvironmentEpisode, state: Mapping[str, Any]) -> tuple[TokenRow, ...]:
    """Validate one saved episode's rows; raise ValueError if they are not its own."""
    from nemo_gym.token_id_capture import TokenEntry

    if (
        not isinstance(state, Mapping)
        or set(state) != {"rows"}
        or not isinstance(state["rows"], list)
    ):
        raise ValueError("model state must be exactly {rows: [...]}")
    rows: list[TokenRow] = []
    seen: set[str] = set()
    for raw in state["rows"]:
        if not isinstance(raw, Mapping) or set(raw) != {"staging_key", "entry"}:
            raise ValueError("a token row has exactly staging_key and entry")
        key, entry = raw["staging_key"], raw["entry"]
        if not isinstance(key, str) or key in seen or "/" not in key:
            raise ValueError(f"malformed or repeated staging key {key!r}")
        seen.add(key)
        owner_key, _, call_id = key.rpartition("/")
        owner = EnvironmentEpisode.from_capture_key(owner_key)
        # Rows of this attempt or carried over from an earlier one; never another rollout's.
        if owner.rollout_id != episode.rollout_id or owner.attempt > episode.attempt:
            raise ValueError(f"staging key {key!r} does not belong to {episode.capture_key}")
        if not isinstance(entry, Mapping):
            raise ValueError(f"row {key!r} has no entry object")
        parsed = TokenEntry.model_validate(dict(entry))  # pydantic ValidationError is a ValueError
        if parsed.model_call_id != call_id or parsed.rollout_id != episode.capture_key:
            raise ValueError(f"row {key!r} holds another call or another attempt's entry")
        rows.append(TokenRow(key, json.loads(json.dumps(dict(entry)))))
    return tuple(rows)


class GenerationGate:
    """Pure-ASGI gate in front of the generation routes (outermost on the model app)."""

    def __init__(self, app: Any, participant: ModelParticipant) -> None:
        self.app = app
        self.participant = participant

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        path = str(scope.get("path", "")) if scope.get("type") == "http" else ""
        match = _PREFIX.match(path)
        rest = match["rest"] if match else path
        if rest.partition("?")[0] not in GENERATION_PATHS:
            await self.app(scope, receive, send)
            return
        participant = self.participant
        try:
            if match is None:
                if not participant.require_rollout_id:
                    await self.app(scope, receive, send)
                    return
                raise ParticipantError(
                    "rollout_id_required", "generation without /ng-rollout/<key>"
                )
            try:
                episode = EnvironmentEpisode.from_capture_key(match["key"])
            except ValueError as error:
                raise ParticipantError("rollout_id_required", str(error)) from None
            async with participant.core.admit(episode):
                participant._require_current(episode)
                await participant.first_sight(episode)
                # Refusable until it delivers (model_calls.py): admission_closed then.
                await participant.calls.generate(
                    episode, self._forward(episode, scope, receive, send)
                )
        except ParticipantError as error:
            await envelope_response(error)(scope, receive, send)

    async def _forward(
        self, episode: EnvironmentEpisode, scope: dict[str, Any], receive: Any, send: Any
    ) -> None:
        call = _Call(episode)
        replaced = False

        async def guarded(message: dict[str, Any]) -> None:
            nonlocal replaced
            if message.get("type") == "http.response.start" and call.failure is None:
                deliver()  # the reply starts: never refused from here on
            if message.get("type") == "http.response.start" and call.failure is not None:
                replaced = True
                response = envelope_response(call.failure)
                await send(
                    {
                        "type": "http.response.start",
                        "status": response.status_code,
                        "headers": response.raw_headers,
                    }
                )
                await send({"type": "http.response.body", "body": response.body})
                return
            if not replaced:
                await send(message)

        token = _CALL.set(call)
        try:
            await self.app(scope, receive, guarded)
        finally:
            _CALL.reset(token)


def install_model_participant(server: Any, app: Any) -> ModelParticipant:
    """Add the gate, the release route and the token sink to a built model-server app."""
    from nemo_gym.token_id_capture import TokenCaptureStore, install_token_sink
    from nemo_gym.token_id_capture.config import token_id_capture_config

    global_config = server.server_client.global_config_dict
    capture = token_id_capture_config(global_config)
    if capture.enabled and capture.token_id_capture.sink is not None:
        raise ValueError(
            "token_id_capture.sink replaces the file store the model participant exports from; "
            "use token_id_capture.dir with envckpt"
        )
    directory = capture.resolved_dir() if capture.enabled else None
    block = envckpt_block(global_config)
    stager = None
    if block.get("staging_url"):
        from envckpt.nemo_gym.staging import HttpRowStager

        stager = HttpRowStager(str(block["staging_url"]), token=staging_token())
    participant = ModelParticipant(
        server_name=server.config.name,
        store=None if directory is None else TokenCaptureStore(Path(directory)),
        stager=stager,
        require_rollout_id=bool(block.get("require_rollout_id", True)),
        model_calls=parse_model_calls(block.get("model_calls")),
    )
    if capture.enabled:
        # Consulted per request, ahead of the file store: every row passes through here.
        install_token_sink(participant)
    app.add_middleware(GenerationGate, participant=participant)
    app.post(RELEASE_PATH, include_in_schema=False)(participant.release_endpoint)
    return participant
