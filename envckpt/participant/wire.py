"""Request bodies of the control routes, validated at the edge.

Unknown fields are rejected, sizes are bounded, ids follow ``envckpt.ids``
and deadlines must be finite absolute Unix seconds. Both transports parse
with these models, so the in-process deployment refuses exactly what the HTTP
routes refuse.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    field_validator,
)

from envckpt.clock import validate_deadline
from envckpt.episodes import EnvironmentEpisode
from envckpt.ids import validate_checkpoint_id, validate_rollout_id

MAX_EPISODES_PER_REQUEST = 1_000_000
MAX_PATH_LENGTH = 4096


class WireEpisode(BaseModel):
    """``{"rollout_id": str, "attempt": int}``, both keys required."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rollout_id: StrictStr
    attempt: StrictInt

    @field_validator("rollout_id")
    @classmethod
    def _rollout_id(cls, value: str) -> str:
        return validate_rollout_id(value)

    @field_validator("attempt")
    @classmethod
    def _attempt(cls, value: int) -> int:
        if value < 0:
            raise ValueError("attempt must be non-negative")
        return value

    def episode(self) -> EnvironmentEpisode:
        return EnvironmentEpisode(self.rollout_id, self.attempt)


Episodes = Annotated[list[WireEpisode], Field(max_length=MAX_EPISODES_PER_REQUEST)]
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
    episode_ids: Episodes | None = None
    # Strict: "yes" or 1 are not a decision to free exported state.
    stop: StrictBool = False


class RestoreRequest(ControlRequest):
    checkpoint_dir: CheckpointDir
    episode_ids: Episodes


class RetireRequest(ControlRequest):
    episode_ids: Annotated[
        list[WireEpisode], Field(min_length=1, max_length=MAX_EPISODES_PER_REQUEST)
    ]


class ForgetRequest(ControlRequest):
    rollout_ids: Annotated[
        list[StrictStr], Field(min_length=1, max_length=MAX_EPISODES_PER_REQUEST)
    ]

    @field_validator("rollout_ids")
    @classmethod
    def _rollout_ids(cls, value: list[str]) -> list[str]:
        return [validate_rollout_id(rollout_id) for rollout_id in value]


REQUEST_MODELS: dict[str, type[ControlRequest]] = {
    "prepare": PrepareRequest,
    "renew": RenewRequest,
    "resume": ResumeRequest,
    "commit": CommitRequest,
    "restore": RestoreRequest,
    "retire": RetireRequest,
    "forget": ForgetRequest,
}
