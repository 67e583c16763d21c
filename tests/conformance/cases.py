"""The conformance table: one row per control request the protocol defines an answer to.

A row is: the route, the starting point (``starts.STARTS``: a phase, maybe
with state held or a turn in flight), the body (the route's default body
with these fields changed; ``$...`` placeholders are filled per row, see
``runner.resolve``), the expected status, error code and reply keys, the
phase after (None: unchanged, ``ANY``: not checked) and named follow-up
checks (``checks.CHECKS``). A new case is one line::

    no("renew", "idle", "invalid_phase"),
    ok("commit", "prepared", {"episode_ids": OMIT}, after="committed", note="no scope field"),

``profile="envckpt"`` marks envckpt's own stricter (or different) behaviour,
checked on envckpt's servers and skipped with ``--conformance-profile
protocol``; docs/protocol.md lists each with its reason. Route ``data`` is
one call on the simulated Gym's data routes (``target.SimDriver``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from envckpt.protocol import ERROR_STATUS

ANY = "*"  # phase after: not checked (implementations may differ)
OMIT = object()  # a body field left out
ENVCKPT = "envckpt"
EXPORT = frozenset({"export_restore"})
RESTART = frozenset({"restart_only"})
NEW = {"checkpoint_id": "$new"}
FINISHED = {"checkpoint_id": "$finished"}
LATER = {"deadline_ts": "$later"}
PAST = {"deadline_ts": "$past"}

KEYS: Mapping[str, tuple[str, ...]] = {
    "status": (
        "kind",
        "instance",
        "phase",
        "checkpoint_id",
        "lease_expires_at",
        "retired_rollouts",
        "report",
    ),
    "prepare": ("phase", "report"),
    "renew": ("lease_expires_at",),
    "commit": ("phase", "manifest", "episode_ids"),
    "restore": ("phase", "source_checkpoint_id", "restored"),
    "resume": ("phase", "idempotent"),
    "retire": ("retired",),
    "forget": ("forgotten",),
    "data": (),
}


@dataclass(frozen=True, slots=True)
class Case:
    """One row of the table."""

    route: str
    start: str
    body: Mapping[str, Any]
    status: int | tuple[int, ...]
    code: str | None = None
    keys: tuple[str, ...] = ()
    after: str | None = None
    checks: tuple[str, ...] = ()
    profile: str = "protocol"
    modes: frozenset[str] | None = None  # participant modes the row applies to; None: all
    kinds: frozenset[str] | None = None  # participant kinds the row applies to; None: all
    capability: str | None = None  # only participants declaring it in status
    # "ok", "wrong" (another token), "none" (no header) or "duplicate" (the right token,
    # then a second Authorization header with another)
    auth: str = "ok"
    method: str | None = None  # None: the route's own
    raw: str | None = None  # this exact body text instead of JSON
    note: str = ""

    @property
    def id(self) -> str:
        outcome = self.code or str(self.status)
        words = [self.route, self.start, outcome, self.note]
        return "-".join(word.replace(" ", "_") for word in words if word)


def ok(route: str, start: str, body: Mapping[str, Any] | None = None, **fields: Any) -> Case:
    """A row answered 200 with the route's reply keys."""
    fields.setdefault("keys", KEYS[route])
    return Case(route, start, body or {}, 200, **fields)


def no(
    route: str, start: str, code: str, body: Mapping[str, Any] | None = None, **fields: Any
) -> Case:
    """A row refused with ``code`` (and its status), changing nothing."""
    return Case(route, start, body or {}, ERROR_STATUS[code], code, **fields)


OPEN = ("preparing", "prepared", "committed")
PHASES = ("idle", *OPEN, "restored")
ROUTES = ("prepare", "renew", "commit", "restore", "resume", "retire", "forget")

MODEL_OR_TOOL = frozenset({"model", "resources"})  # the agent parks a refused /run
RESUMED = ("not_idempotent", "fenced", "lease_null")

# fmt: off
CASES: tuple[Case, ...] = (
    # ------------------------------------------------------------ status, auth
    *(ok("status", start) for start in PHASES),
    *(no(route, "idle", "unauthorized", auth="wrong") for route in ("status", *ROUTES)),
    no("status", "idle", "unauthorized", auth="none", note="no header"),
    no("prepare", "idle", "unauthorized", auth="none", note="no header"),
    *(Case(route, "idle", {}, 400, "invalid_request", auth="duplicate", profile=ENVCKPT,
           note="two Authorization headers, the right one first")
      for route in ("status", "prepare")),
    # ----------------------------------------------------------------- prepare
    ok("prepare", "idle", after="prepared", checks=("ready", "lease_armed")),
    ok("prepare", "idle+held", after="prepared", checks=("ready",), note="held state"),
    ok("prepare", "preparing", {"deadline_ts": "$short"}, checks=("blocked",), note="waits again"),
    ok("prepare", "prepared", checks=("replay:prepare",), note="replayed"),
    ok("prepare", "committed", checks=("replay:prepare",), note="replayed after commit"),
    no("prepare", "idle", "stale_checkpoint", FINISHED),
    no("prepare", "prepared", "stale_checkpoint", FINISHED),
    *(no("prepare", start, "checkpoint_conflict", NEW) for start in (*OPEN, "restored")),
    no("prepare", "restored", "invalid_phase"),
    ok("prepare", "idle+65_finished", {"checkpoint_id": "$oldest"}, after="prepared",
       note="only the last 64 finished ids are kept"),
    no("prepare", "idle+65_finished", "stale_checkpoint", FINISHED, note="the newest"),
    Case("prepare", "idle", {"deadline_ts": "$ancient"}, (200, 409), after=ANY,
         checks=("lapsed_or_refused",), note="lease lapsed"),
    no("prepare", "idle", "deadline_exceeded", PAST, profile=ENVCKPT, note="past deadline"),
    no("prepare", "idle", "deadline_exceeded", {"deadline_ts": "$ancient"}, profile=ENVCKPT,
       note="ancient deadline"),
    no("prepare", "prepared", "deadline_exceeded", PAST, profile=ENVCKPT, note="past, replay"),
    no("prepare", "idle", "invalid_request", {"deadline_ts": "$beyond_lease"}, profile=ENVCKPT,
       note="deadline beyond the longest lease"),
    # ------------------------------------------------------------------- renew
    no("renew", "idle", "invalid_phase"),
    no("renew", "idle", "stale_checkpoint", FINISHED),
    *(ok("renew", start, LATER, checks=("lease_extended",)) for start in (*OPEN, "restored")),
    Case("renew", "prepared", PAST, (200, 409), checks=("lease_kept",), note="never earlier"),
    no("renew", "prepared", "deadline_exceeded", PAST, checks=("lease_kept",), profile=ENVCKPT,
       note="past deadline"),
    *(no("renew", start, "checkpoint_conflict", NEW) for start in (*OPEN, "restored")),
    no("renew", "prepared", "stale_checkpoint", FINISHED),
    # ------------------------------------------------------------------ commit
    no("commit", "idle", "invalid_phase"),
    no("commit", "idle", "stale_checkpoint", FINISHED),
    no("commit", "preparing", "invalid_phase"),
    no("commit", "preparing", "checkpoint_conflict", NEW),
    ok("commit", "prepared", after="committed", checks=("manifest", "kind_extras", "records")),
    ok("commit", "prepared", {"episode_ids": OMIT}, after="committed", note="no scope field"),
    ok("commit", "prepared+held", {"episode_ids": "$ep"}, after="committed", modes=EXPORT,
       checks=("exported_ep", "records"), note="scope"),
    ok("commit", "prepared+held", after="committed", modes=EXPORT, checks=("exported_ep",),
       note="null scope exports what is held"),
    ok("commit", "prepared+held", {"episode_ids": []}, after="committed",
       checks=("exported_none",), note="empty scope"),
    no("commit", "prepared+held", "restart_in_scope", {"episode_ids": "$ep"}, modes=RESTART),
    no("commit", "prepared", "deadline_exceeded", PAST, after=ANY, checks=("retry_commits",)),
    no("commit", "prepared", "checkpoint_conflict", NEW),
    no("commit", "prepared", "stale_checkpoint", FINISHED),
    ok("commit", "committed", {"checkpoint_dir": "$committed_dir"}, checks=("replay:commit",),
       note="replayed"),
    no("commit", "committed", "checkpoint_conflict", note="another directory"),
    no("commit", "committed", "checkpoint_conflict", NEW),
    ok("commit", "prepared+restored_pending", {"episode_ids": []}, after="committed",
       modes=EXPORT, checks=("left_out_restarts_as_same_attempt",),
       note="restored attempt left out"),
    no("commit", "restored", "invalid_phase"),
    no("commit", "restored", "checkpoint_conflict", NEW),
    ok("commit", "prepared", {"stop": True}, after="committed", capability="commit_stop",
       note="stop"),
    no("commit", "prepared", "checkpoint_error", {"checkpoint_dir": "$file"}, profile=ENVCKPT,
       note="unwritable directory"),
    no("commit", "prepared", "invalid_request", {"checkpoint_dir": "/"}, profile=ENVCKPT,
       note="outside the checkpoint root"),
    no("commit", "prepared", "invalid_request", {"checkpoint_dir": "relative/dir"},
       profile=ENVCKPT, note="relative directory"),
    no("restore", "idle+published", "invalid_request", {"checkpoint_dir": "/etc"},
       profile=ENVCKPT, note="outside the checkpoint root"),
    # ----------------------------------------------------------------- restore
    ok("restore", "idle+published", after="restored", checks=("source", "restored_none")),
    ok("restore", "idle+published+held", {"episode_ids": "$ep"}, after="restored", modes=EXPORT,
       checks=("source", "restored_next", "older_attempt_fenced"), note="served the rollout"),
    ok("restore", "idle+restored_before", {"episode_ids": "$ep2"}, after="restored",
       modes=EXPORT, checks=("restored_next2",), note="restored before"),
    ok("restore", "idle+restored_before", {"episode_ids": "$ep"}, after="restored",
       modes=EXPORT, checks=("restored_next", "next_attempt_fenced"), note="attempt retired here"),
    no("restore", "idle+restored_live", "stale_attempt", {"episode_ids": "$ep"}, modes=EXPORT,
       profile=ENVCKPT, note="over a live attempt"),
    no("restore", "idle", "invalid_checkpoint_state", {"checkpoint_dir": "$missing"}),
    no("restore", "idle+published", "invalid_checkpoint_state", {"checkpoint_dir": "$corrupt"}),
    no("restore", "idle+published", "stale_checkpoint", FINISHED),
    no("restore", "idle+published", "deadline_exceeded", PAST),
    *(no("restore", start, "invalid_phase") for start in OPEN),
    *(no("restore", start, "checkpoint_conflict", NEW) for start in (*OPEN, "restored")),
    ok("restore", "restored", checks=("replay:restore",), note="replayed"),
    no("restore", "restored", "checkpoint_conflict", {"episode_ids": "$ep"}, note="another scope"),
    # ------------------------------------------------------------------ resume
    ok("resume", "idle", NEW, checks=("idempotent", "fenced"), note="never seen"),
    ok("resume", "idle", FINISHED, checks=("idempotent",), note="finished"),
    *(ok("resume", start, after="idle", checks=RESUMED) for start in (*OPEN, "restored")),
    *(no("resume", start, "checkpoint_conflict", NEW) for start in (*OPEN, "restored")),
    ok("resume", "prepared+held", after="idle", checks=("admission_open",), kinds=MODEL_OR_TOOL,
       note="reopens"),
    # ------------------------------------------------------------------ retire
    ok("retire", "idle", NEW, checks=("retired",)),
    ok("retire", "idle", FINISHED, checks=("retired",), note="finished id"),
    ok("retire", "idle+held", FINISHED, checks=("retired", "attempt_fenced"), note="held"),
    no("retire", "idle", "deadline_exceeded", PAST),
    *(no("retire", start, "invalid_phase") for start in OPEN),
    no("retire", "prepared", "invalid_phase", NEW, note="any id"),
    ok("retire", "restored", {"episode_ids": "$next", **LATER},
       checks=("retired", "lease_extended")),
    no("retire", "restored", "checkpoint_conflict", NEW),
    no("retire", "restored", "checkpoint_conflict", FINISHED, note="finished id"),
    no("retire", "idle", "invalid_request", {"episode_ids": []}, note="empty"),
    no("retire", "idle", "invalid_request", {"episode_ids": [{"rollout_id": "r"}]},
       profile=ENVCKPT, note="attempt required"),
    # ------------------------------------------------------------------ forget
    ok("forget", "idle", NEW, checks=("forgotten",)),
    ok("forget", "idle", {"rollout_ids": ["b", "a", "b"]}, checks=("forgotten",), note="sorted"),
    ok("forget", "idle", FINISHED, checks=("forgotten",), note="finished id"),
    ok("forget", "idle+held", checks=("forgotten", "state_kept"), note="held"),
    no("forget", "idle", "deadline_exceeded", PAST),
    *(no("forget", start, "invalid_phase") for start in OPEN),
    ok("forget", "restored", LATER, checks=("forgotten", "lease_extended")),
    no("forget", "restored", "checkpoint_conflict", NEW),
    no("forget", "idle", "invalid_request", {"rollout_ids": []}, note="empty"),
    no("forget", "idle", "invalid_request", {"rollout_ids": ["../x"]}, profile=ENVCKPT,
       note="rollout id grammar"),
    # -------------------------------------------------------------- data plane
    no("data", "prepared", "admission_closed", {"episode": "$ep2"}, kinds=MODEL_OR_TOOL),
    no("data", "restored", "admission_closed", {"episode": "$ep2"}, kinds=MODEL_OR_TOOL),
    no("data", "idle", "rollout_id_required", {"episode": None}),
    no("data", "idle+retired", "stale_attempt", {"episode": "$ep"}),
    # ---------------------------------------------------------- request bodies
    no("prepare", "idle", "invalid_request", {"surprise": 1}, note="unknown field"),
    no("prepare", "idle", "invalid_request", {"deadline_ts": OMIT}, note="no deadline"),
    no("prepare", "idle", "invalid_request", {"checkpoint_id": "../up"}, note="id grammar"),
    no("prepare", "idle", "invalid_request", {"checkpoint_id": "c" * 129}, note="id length"),
    no("prepare", "idle", "invalid_request", {"deadline_ts": "$soon_text"}, profile=ENVCKPT,
       note="deadline as text"),
    no("prepare", "idle", "invalid_request", raw='{"checkpoint_id": "c-nan", "deadline_ts": NaN}',
       profile=ENVCKPT, note="NaN deadline"),
    no("prepare", "idle", "invalid_request", raw="not json", note="not JSON"),
    no("prepare", "idle", "invalid_request", raw="[1, 2]", note="not an object"),
    no("commit", "prepared", "invalid_request", {"checkpoint_dir": ""}, note="empty directory"),
    no("commit", "prepared", "invalid_request", {"stop": "yes"}, profile=ENVCKPT,
       note="stop as text"),
    Case("status", "idle", {}, 405, "invalid_request", method="POST", profile=ENVCKPT,
         note="POST"),
)
# fmt: on

_ids = [case.id for case in CASES]
assert len(set(_ids)) == len(_ids), sorted({i for i in _ids if _ids.count(i) > 1})


def default_body(route: str) -> dict[str, Any]:
    """The body a row's fields change: a valid request from the row's start."""
    base: dict[str, Any] = {"checkpoint_id": "$id", "deadline_ts": "$soon"}
    extra: dict[str, dict[str, Any]] = {
        "commit": {"checkpoint_dir": "$fresh_dir", "episode_ids": None},
        "restore": {"checkpoint_dir": "$published", "episode_ids": []},
        "retire": {"episode_ids": "$ep"},
        "forget": {"rollout_ids": "$rollout"},
    }
    if route == "data":
        return {"episode": "$ep"}
    if route == "status":
        return {}
    return {**base, **extra.get(route, {})}


@dataclass(frozen=True, slots=True)
class Resolved:
    """A row's request with every placeholder filled."""

    body: dict[str, Any] | None
    raw: bytes | None
    values: dict[str, Any] = field(default_factory=dict)
