"""The vocabulary of the Gym checkpoint control protocol, in one place.

Both sides of the protocol (the participant in ``envckpt.participant`` and the
coordinator in ``envckpt.coordination``) and everything above them read the
protocol's words from here: routes and their prefix, participant kinds in
stage order, modes, the retire order, error codes with their HTTP statuses,
and the request bodies of the control routes. Nothing here does I/O, and this
module imports nothing from envckpt but the identifier grammar, so it sits
below every other layer (docs/engine.md, "Layers").

    Route.PREPARE.path                    # "/ng-control/v1/checkpoint/prepare"
    STAGES                                # environment, model, agent, resources
    Capability.COMMIT_STOP in parse_capabilities(status["capabilities"])
    Phase.PREPARED                        # a participant's phase, as on the wire
    ERROR_STATUS[ErrorCode.STALE_ATTEMPT] # 409
    REQUEST_MODELS["commit"].model_validate(body)
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from enum import StrEnum
from types import MappingProxyType
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    StrictBool,
    StrictInt,
    StrictStr,
    field_validator,
)

from envckpt.clock import validate_deadline
from envckpt.episodes import EnvironmentEpisode
from envckpt.ids import validate_checkpoint_id, validate_rollout_id

CHECKPOINT_ROUTE_PREFIX = "/ng-control/v1/checkpoint"


class Route(StrEnum):
    """The control routes; ``status`` is a GET, every other one a POST."""

    STATUS = "status"
    PREPARE = "prepare"
    RENEW = "renew"
    COMMIT = "commit"
    RESTORE = "restore"
    RESUME = "resume"
    RETIRE = "retire"
    FORGET = "forget"

    @property
    def method(self) -> str:
        return "GET" if self is Route.STATUS else "POST"

    @property
    def path(self) -> str:
        return f"{CHECKPOINT_ROUTE_PREFIX}/{self.value}"


ROUTES: tuple[Route, ...] = tuple(Route)


class Kind(StrEnum):
    """What a participant is. Judge models are not participants."""

    ENVIRONMENT = "environment"
    MODEL = "model"
    AGENT = "agent"
    RESOURCES = "resources"


# Prepare order. Environment servers park first, the policy model then cuts
# generations so waiting agents reach a boundary, resources go last because
# agents call them until they park. Resume runs it backwards.
STAGES: tuple[Kind, ...] = (Kind.ENVIRONMENT, Kind.MODEL, Kind.AGENT, Kind.RESOURCES)

# Retire and forget: callers before the servers they call.
RETIRE_ORDER: tuple[tuple[Kind, ...], ...] = (
    (Kind.ENVIRONMENT,),
    (Kind.AGENT,),
    (Kind.MODEL, Kind.RESOURCES),
)


class Mode(StrEnum):
    """How a participant takes part in a checkpoint (protocol.md 2)."""

    EXPORT_RESTORE = "export_restore"
    RESTART_ONLY = "restart_only"
    STATELESS = "stateless"


MODES: tuple[Mode, ...] = tuple(Mode)


class Capability(StrEnum):
    """Optional protocol features a participant declares in ``status`` (``capabilities``).

    Gym's participants declare none; a coordinator uses a feature only with a
    participant that declares it.
    """

    # Accepts the commit body's ``stop`` field (older Gym builds answer 422).
    COMMIT_STOP = "commit_stop"


# What envckpt's own participants declare.
CAPABILITIES: tuple[Capability, ...] = tuple(Capability)


def parse_capabilities(value: object) -> frozenset[Capability]:
    """The known capabilities a ``status`` reply declares; anything else is ignored."""
    if not isinstance(value, list):
        return frozenset()
    return frozenset(
        _CAPABILITIES[item] for item in value if isinstance(item, str) and item in _CAPABILITIES
    )


def parse_kind(value: object) -> Kind:
    """``value`` as a ``Kind``; ValueError for anything else."""
    kind = _KINDS.get(value) if isinstance(value, str) else None
    if kind is None:
        raise ValueError(f"unknown participant kind {value!r}")
    return kind


def parse_mode(value: object) -> Mode:
    """``value`` as a ``Mode``; ValueError for anything else."""
    mode = _MODES.get(value) if isinstance(value, str) else None
    if mode is None:
        raise ValueError(f"unknown participant mode {value!r}")
    return mode


# Each member by its value: a dict lookup, where calling the enum class costs
# several Python calls (every discovered participant parses its kind and mode twice).
_CAPABILITIES = {capability.value: capability for capability in Capability}
_KINDS = {kind.value: kind for kind in Kind}
_MODES = {mode.value: mode for mode in Mode}


class Phase(StrEnum):
    """A participant's checkpoint phase: the ``phase`` field of status and replies.

    The participant's phase machine (``envckpt.machines.tables``) runs on
    these states; they live here because they are on the wire.
    """

    IDLE = "idle"
    PREPARING = "preparing"
    PREPARED = "prepared"
    COMMITTED = "committed"
    RESTORED = "restored"


# Status fields of a server run with several workers (as Gym's coordinated
# participants report them): the workers answering, and how many it runs.
STATUS_WORKERS = "workers"
STATUS_EXPECTED_WORKERS = "expected_workers"


class ErrorCode(StrEnum):
    """The protocol's error codes (protocol.md 7)."""

    STALE_CHECKPOINT = "stale_checkpoint"
    CHECKPOINT_CONFLICT = "checkpoint_conflict"
    INVALID_PHASE = "invalid_phase"
    DEADLINE_EXCEEDED = "deadline_exceeded"
    STALE_ATTEMPT = "stale_attempt"
    ADMISSION_CLOSED = "admission_closed"
    RESTART_IN_SCOPE = "restart_in_scope"
    UNAUTHORIZED = "unauthorized"
    ROLLOUT_ID_REQUIRED = "rollout_id_required"
    INVALID_REQUEST = "invalid_request"
    INVALID_CHECKPOINT_STATE = "invalid_checkpoint_state"
    CHECKPOINT_ERROR = "checkpoint_error"


# The HTTP status each code is answered with.
ERROR_STATUS: Mapping[str, int] = MappingProxyType(
    {
        ErrorCode.STALE_CHECKPOINT: 409,
        ErrorCode.CHECKPOINT_CONFLICT: 409,
        ErrorCode.INVALID_PHASE: 409,
        ErrorCode.DEADLINE_EXCEEDED: 409,
        ErrorCode.STALE_ATTEMPT: 409,
        ErrorCode.ADMISSION_CLOSED: 409,
        ErrorCode.RESTART_IN_SCOPE: 409,
        ErrorCode.UNAUTHORIZED: 401,
        ErrorCode.ROLLOUT_ID_REQUIRED: 400,
        ErrorCode.INVALID_REQUEST: 422,
        ErrorCode.INVALID_CHECKPOINT_STATE: 422,
        ErrorCode.CHECKPOINT_ERROR: 500,
    }
)


def error_envelope(code: str, detail: str) -> dict[str, Any]:
    """The protocol's error body: ``{"error": {"code", "detail"}}``."""
    return {"error": {"code": str(code), "detail": detail}}


# ----------------------------------------------------------------- request bodies
#
# Unknown fields are rejected, sizes are bounded, ids follow ``envckpt.ids`` and
# deadlines must be finite absolute Unix seconds. Both transports parse with
# these models, so the in-process deployment refuses exactly what HTTP refuses.

MAX_EPISODES_PER_REQUEST = 1_000_000
MAX_PATH_LENGTH = 4096
# A rollout id's longest form on the wire: with its capture-key suffix
# (``-a<attempt>``) it stays one file-name component (255 bytes).
MAX_ROLLOUT_ID_LENGTH = 200
# The largest attempt number accepted: a JSON number every client reads exactly.
MAX_ATTEMPT = 2**31 - 1
# How far ahead of a participant's clock a deadline may lie (its lease follows
# the deadline, so an unbounded one would keep it closed forever).
DEFAULT_MAX_LEASE_SECONDS = 3600.0


def _bounded_rollout_id(value: str) -> str:
    if len(value) > MAX_ROLLOUT_ID_LENGTH:
        raise ValueError(f"rollout_id longer than {MAX_ROLLOUT_ID_LENGTH} characters")
    return validate_rollout_id(value)


class WireEpisode(BaseModel):
    """``{"rollout_id": str, "attempt": int}``, both keys required."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rollout_id: StrictStr
    attempt: StrictInt

    @field_validator("rollout_id")
    @classmethod
    def _rollout_id(cls, value: str) -> str:
        return _bounded_rollout_id(value)

    @field_validator("attempt")
    @classmethod
    def _attempt(cls, value: int) -> int:
        if not 0 <= value <= MAX_ATTEMPT:
            raise ValueError(f"attempt must be between 0 and {MAX_ATTEMPT}")
        return value

    def episode(self) -> EnvironmentEpisode:
        return EnvironmentEpisode(self.rollout_id, self.attempt)


def wire_episodes(value: object, *, min_length: int = 0) -> list[EnvironmentEpisode]:
    """A JSON list of ``{"rollout_id": str, "attempt": int}`` as episodes, in one pass.

    Accepts exactly what a list of ``WireEpisode`` accepts (both keys and no
    other, a valid rollout id, an int attempt that is not negative and not a
    bool), at most ``MAX_EPISODES_PER_REQUEST``, checking each once and
    building no model per episode: a commit names every episode it saves.
    Raises ValueError naming the first bad episode.
    """
    if not isinstance(value, list | tuple):
        raise ValueError(f"expected a list of episodes, got {type(value).__name__}")
    if not min_length <= len(value) <= MAX_EPISODES_PER_REQUEST:
        raise ValueError(
            f"expected {min_length} to {MAX_EPISODES_PER_REQUEST} episodes, got {len(value)}"
        )
    episodes: list[EnvironmentEpisode] = []
    for index, item in enumerate(value):
        if type(item) is dict and len(item) == 2:
            # The usual item, a parsed JSON object that passes: accepted on
            # the checks below, in one test each; anything else falls through
            # to them, which say what is wrong.
            rollout_id, attempt = item.get("rollout_id"), item.get("attempt")
            if (
                type(rollout_id) is str
                and type(attempt) is int
                and 0 <= attempt <= MAX_ATTEMPT
                and len(rollout_id) <= MAX_ROLLOUT_ID_LENGTH
            ):
                try:
                    episodes.append(_episode(rollout_id, attempt))  # validates the id
                except ValueError as error:
                    raise ValueError(f"episode {index}: {error}") from None
                continue
        if isinstance(item, EnvironmentEpisode):
            episodes.append(item)
            continue
        if isinstance(item, WireEpisode):
            episodes.append(item.episode())
            continue
        if not isinstance(item, Mapping) or len(item) != 2:
            raise ValueError(f"episode {index}: expected {{rollout_id, attempt}}, got {item!r}")
        rollout_id, attempt = item.get("rollout_id"), item.get("attempt")
        if type(rollout_id) is not str or type(attempt) is not int or attempt < 0:
            raise ValueError(
                f"episode {index}: expected a string rollout_id and a non-negative int "
                f"attempt, got {item!r}"
            )
        # The bounds WireEpisode keeps, so both paths refuse the same bodies.
        if attempt > MAX_ATTEMPT:
            raise ValueError(f"episode {index}: attempt must be between 0 and {MAX_ATTEMPT}")
        if len(rollout_id) > MAX_ROLLOUT_ID_LENGTH:
            raise ValueError(
                f"episode {index}: rollout_id longer than {MAX_ROLLOUT_ID_LENGTH} characters"
            )
        try:
            episodes.append(_episode(rollout_id, attempt))  # validates the id
        except ValueError as error:
            raise ValueError(f"episode {index}: {error}") from None
    return episodes


# The same episodes come back in every snapshot: a valid one is made (and its
# id checked) once and handed out again (episodes are immutable). Invalid
# ids raise, and lru_cache keeps no failures.
_episode = functools.lru_cache(maxsize=1 << 16)(EnvironmentEpisode)


def _wire_episodes_at_least_one(value: object) -> list[EnvironmentEpisode]:
    return wire_episodes(value, min_length=1)


# Episodes on the wire, validated into ``EnvironmentEpisode`` in one pass.
Episodes = Annotated[list[EnvironmentEpisode], PlainValidator(wire_episodes)]
CheckpointDir = Annotated[StrictStr, Field(min_length=1, max_length=MAX_PATH_LENGTH)]


class ControlRequest(BaseModel):
    """Fields every POST route carries."""

    model_config = ConfigDict(extra="forbid")

    checkpoint_id: StrictStr
    deadline_ts: float

    @field_validator("checkpoint_id")
    @classmethod
    def _checkpoint_id(cls, value: str) -> str:
        return validate_checkpoint_id(value)

    @field_validator("deadline_ts", mode="before")
    @classmethod
    def _deadline(cls, value: Any) -> float:
        return validate_deadline(value)


class PrepareRequest(ControlRequest):
    pass


class RenewRequest(ControlRequest):
    pass


class ResumeRequest(ControlRequest):
    pass


class CommitRequest(ControlRequest):
    checkpoint_dir: CheckpointDir
    # Absent or null: everything the participant holds (Gym's meaning).
    episode_ids: Episodes | None = None
    # Strict: "yes" or 1 are not a decision to free exported state.
    stop: StrictBool = False


class RestoreRequest(ControlRequest):
    checkpoint_dir: CheckpointDir
    episode_ids: Episodes


class RetireRequest(ControlRequest):
    episode_ids: Annotated[list[EnvironmentEpisode], PlainValidator(_wire_episodes_at_least_one)]


class ForgetRequest(ControlRequest):
    rollout_ids: Annotated[
        list[StrictStr], Field(min_length=1, max_length=MAX_EPISODES_PER_REQUEST)
    ]

    @field_validator("rollout_ids")
    @classmethod
    def _rollout_ids(cls, value: list[str]) -> list[str]:
        return [_bounded_rollout_id(rollout_id) for rollout_id in value]


REQUEST_MODELS: Mapping[str, type[ControlRequest]] = MappingProxyType(
    {
        Route.PREPARE: PrepareRequest,
        Route.RENEW: RenewRequest,
        Route.RESUME: ResumeRequest,
        Route.COMMIT: CommitRequest,
        Route.RESTORE: RestoreRequest,
        Route.RETIRE: RetireRequest,
        Route.FORGET: ForgetRequest,
    }
)
