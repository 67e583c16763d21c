"""What the participant kinds share: request parsing, state checks, key schemes.

Every kind's handler takes a JSON object and refuses a malformed one with the
protocol's codes before touching any state: ``rollout_id_required`` when the
episode identity is missing, ``invalid_request`` for anything else.

    body = check_fields(request, required=("episode", "turn", "observation"))
    episode, turn = episode_of(body), turn_of(body)     # ParticipantError if malformed
    state = require_keys(saved, ("staging_keys",), "model state")   # ValueError if not
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from envckpt.episodes import EnvironmentEpisode
from envckpt.errors import ParticipantError

MAX_TURNS = 10_000
# Staging row keys: ``<capture key>/t<turn>``. The capture key makes a turn
# re-run by a later attempt a distinct row; the same attempt re-running a
# discarded turn overwrites its own row.
STAGING_KEY = re.compile(r"^(?P<capture_key>[^/]+)/t(?P<turn>0|[1-9][0-9]*)$")


def invalid(detail: str) -> ParticipantError:
    return ParticipantError("invalid_request", detail)


def check_fields(request: object, *, required: Iterable[str]) -> Mapping[str, Any]:
    """``request`` as a mapping with exactly the ``required`` keys."""
    if not isinstance(request, Mapping):
        raise invalid("the body must be a JSON object")
    expected = set(required)
    if "episode" in expected and request.get("episode") is None:
        raise ParticipantError("rollout_id_required", "episode work needs a rollout identity")
    unknown, missing = set(request) - expected, expected - set(request)
    if unknown or missing:
        raise invalid(f"unknown fields {sorted(unknown)}, missing fields {sorted(missing)}")
    return request


def episode_of(request: Mapping[str, Any]) -> EnvironmentEpisode:
    try:
        return EnvironmentEpisode.from_wire(request["episode"])
    except ValueError as error:
        raise invalid(f"episode: {error}") from error


def turn_of(request: Mapping[str, Any]) -> int:
    try:
        return checked_turn(request["turn"])
    except ValueError as error:
        raise invalid(str(error)) from None


def checked_turn(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < MAX_TURNS:
        raise ValueError(f"turn must be an integer in [0, {MAX_TURNS}), got {value!r}")
    return value


def text_of(request: Mapping[str, Any], name: str) -> str:
    value = request[name]
    if not isinstance(value, str):
        raise invalid(f"{name} must be a string")
    return value


def parse_task(task: object) -> dict[str, Any]:
    """A copy of ``task``; raise ValueError unless it has a prompt and a turn budget.

    Extra keys are kept (task metadata rides along with the session).
    """
    if not isinstance(task, Mapping):
        raise ValueError(f"task must be a JSON object, got {type(task).__name__}")
    prompt, turns = task.get("prompt"), task.get("turns")
    if not isinstance(prompt, str):
        raise ValueError("task.prompt must be a string")
    if not isinstance(turns, int) or isinstance(turns, bool) or not 1 <= turns <= MAX_TURNS:
        raise ValueError(f"task.turns must be an integer in [1, {MAX_TURNS}], got {turns!r}")
    try:
        copied: dict[str, Any] = json.loads(json.dumps(dict(task), allow_nan=False))
    except (TypeError, ValueError) as error:
        raise ValueError(f"task is not plain JSON: {error}") from error
    return copied


def staging_key(episode: EnvironmentEpisode, turn: int) -> str:
    return f"{episode.capture_key}/t{turn}"


def require_int(value: object, what: str, *, minimum: int = 0) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"{what} must be an integer >= {minimum}, got {value!r}")
    return value


def require_keys(value: object, keys: Iterable[str], what: str) -> Mapping[str, Any]:
    """``value`` as a mapping with exactly ``keys``; raise ValueError otherwise."""
    expected = set(keys)
    if not isinstance(value, Mapping) or set(value) != expected:
        got = sorted(value) if isinstance(value, Mapping) else type(value).__name__
        raise ValueError(f"{what} must have exactly the keys {sorted(expected)}, got {got}")
    return value
