"""The saved state of one agent ``/run``: everything a fresh process needs to continue it.

All of it is JSON. The recipe (``simple_agent.py``, ``gymnasium_agent.py``)
owns ``loop``; the runtime owns the rest::

    run = RunState.start(body, loop={"input": [...], "outputs": [], "step": 0})
    run.phase                  # "seed" -> "loop" -> ("verify") -> "return"
    saved = run.to_json()      # at commit
    RunState.from_json(saved)  # at restore; ValueError if it is not one

``continued`` records each restore: the attempt that continued, and the phase
and step it continued from (a rollout "continued from a saved turn" has a
step above 0 there). ``refused_model_calls`` counts the model calls a
checkpoint refused, each issued again from the same turn (absent in states
saved before it existed: 0).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

PHASES = ("seed", "loop", "verify", "return")
ROLLOUT_ID_KEY = "_ng_rollout_id"
ATTEMPT_KEY = "_ng_attempt_index"
_KEYS = {
    "flavor",
    "body",
    "phase",
    "loop",
    "resources_cookies",
    "model_cookies",
    "applications",
    "continued",
}
_OPTIONAL_KEYS = {"refused_model_calls"}


def plain_json(value: Any) -> Any:
    """A deep copy through JSON: no reference into live objects survives."""
    return json.loads(json.dumps(value, allow_nan=False))


def task_of(body: Mapping[str, Any]) -> dict[str, Any]:
    """The run body without its attempt index (what every attempt of a rollout shares)."""
    return {key: value for key, value in body.items() if key != ATTEMPT_KEY}


def _cookies(value: object, what: str) -> dict[str, str]:
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise ValueError(f"{what} must map cookie names to values")
    return dict(value)


@dataclass(slots=True)
class RunState:
    """One rollout attempt's place in its ``/run``, at a turn boundary."""

    flavor: str
    body: dict[str, Any]
    phase: str = "seed"
    loop: dict[str, Any] = field(default_factory=dict)
    resources_cookies: dict[str, str] = field(default_factory=dict)
    model_cookies: dict[str, str] = field(default_factory=dict)
    applications: list[str] = field(default_factory=list)
    continued: list[dict[str, Any]] = field(default_factory=list)
    refused_model_calls: int = 0

    def copy(self) -> RunState:
        return RunState.from_json(self.to_json())

    def to_json(self) -> dict[str, Any]:
        document: dict[str, Any] = plain_json(
            {
                "flavor": self.flavor,
                "body": self.body,
                "phase": self.phase,
                "loop": self.loop,
                "resources_cookies": self.resources_cookies,
                "model_cookies": self.model_cookies,
                "applications": self.applications,
                "continued": self.continued,
                "refused_model_calls": self.refused_model_calls,
            }
        )
        return document

    @classmethod
    def from_json(cls, value: object) -> RunState:
        if not isinstance(value, Mapping) or not _KEYS <= set(value) <= _KEYS | _OPTIONAL_KEYS:
            got = sorted(value) if isinstance(value, Mapping) else type(value).__name__
            raise ValueError(
                f"a run state has {sorted(_KEYS)} (and maybe {sorted(_OPTIONAL_KEYS)}), got {got}"
            )
        if not isinstance(value["flavor"], str):
            raise ValueError("flavor must be a string")
        if value["phase"] not in PHASES:
            raise ValueError(f"phase must be one of {PHASES}, got {value['phase']!r}")
        body, loop = value["body"], value["loop"]
        if not isinstance(body, Mapping) or not isinstance(body.get(ROLLOUT_ID_KEY), str):
            raise ValueError(f"body must be the /run body with its {ROLLOUT_ID_KEY}")
        if not isinstance(loop, Mapping):
            raise ValueError("loop must be a JSON object")
        applications, continued = value["applications"], value["continued"]
        if not isinstance(applications, list) or not all(isinstance(a, str) for a in applications):
            raise ValueError("applications must be a list of strings")
        if not isinstance(continued, list) or not all(isinstance(c, Mapping) for c in continued):
            raise ValueError("continued must be a list of objects")
        refused = value.get("refused_model_calls", 0)
        if not isinstance(refused, int) or isinstance(refused, bool) or refused < 0:
            raise ValueError("refused_model_calls must be an integer >= 0")
        return cls(
            refused_model_calls=refused,
            flavor=value["flavor"],
            body=plain_json(body),
            phase=value["phase"],
            loop=plain_json(loop),
            resources_cookies=_cookies(value["resources_cookies"], "resources_cookies"),
            model_cookies=_cookies(value["model_cookies"], "model_cookies"),
            applications=list(applications),
            continued=plain_json(continued),
        )
