"""Running one conformance row: reach its start, fill its placeholders, send it, judge it.

    problems = run_case(participant, case, tmp_path)    # [] when the row holds

Placeholders (a ``$name`` string anywhere in a row's body):

    $id        the open checkpoint id, or a new one    $new      a new id
    $finished  an id finished here                     $oldest   the oldest of 65 finished
    $soon      now + 30 s      $later  now + 300 s     $short    now + 0.05 s
    $past      now - 5 s       $ancient  a million seconds ago   $soon_text  "$soon" as text
    $beyond_lease  now + 10 h (past the default longest lease, 1 h)
    $fresh_dir an unused directory    $published  the start's published checkpoint
    $committed_dir  the start's commit directory       $missing  a directory that is not there
    $corrupt   a copy of $published whose manifest miscounts     $file  a regular file
    $ep $ep2 $next  [episode] lists   $rollout  [its rollout id]
"""

from __future__ import annotations

import contextlib
import json
import shutil
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from envckpt.episodes import EnvironmentEpisode

from conformance.cases import OMIT, Case, default_body
from conformance.checks import CHECKS, Run, judge
from conformance.starts import STARTS, Ctx
from conformance.target import Participant, Reply


def skip_reason(participant: Participant, case: Case) -> str | None:
    """Why ``case`` does not apply to ``participant``, or None."""
    start = STARTS[case.start]
    if case.profile == "envckpt" and participant.profile != "envckpt":
        return "envckpt's own behaviour (--conformance-profile protocol)"
    if case.modes is not None and participant.mode not in case.modes:
        return f"applies to modes {sorted(case.modes)}"
    if case.kinds is not None and participant.kind.value not in case.kinds:
        return f"applies to kinds {sorted(case.kinds)}"
    if case.capability is not None and case.capability not in participant.status.get(
        "capabilities", []
    ):
        return f"the participant does not declare {case.capability}"
    needs_traffic = start.state or case.route == "data"
    if needs_traffic and participant.driver is None:
        return "needs the simulated Gym's data routes (--data-routes sim)"
    if start.inflight and participant.mode == "restart_only":
        return "a restart_only participant never waits, so never stays preparing"
    return None


def run_case(participant: Participant, case: Case, tmp: Path) -> list[str]:
    """Reach the row's start, send it, and return every way the reply broke the row."""
    start = STARTS[case.start]
    target = participant.for_inflight() if start.inflight else participant
    with contextlib.closing(Ctx(target, tmp, case.start, settle=not start.inflight)) as ctx:
        start.reach(ctx)
        before = target.client.status()
        body, raw = resolve(case, ctx)
        reply = send(target, case, body, raw)
        after = target.client.status()
        run = Run(case, ctx, target, body, reply, before, after)
        problems = judge(run)
        for name in case.checks:
            problem = CHECKS[name](run)
            if problem is not None:
                problems.append(f"{name}: {problem}")
    return problems


def send(participant: Participant, case: Case, body: Any, raw: bytes | None) -> Reply:
    if case.route == "data":
        assert participant.driver is not None
        episode = body["episode"]
        return participant.driver.data_call(
            participant.kind, None if episode is None else EnvironmentEpisode.from_wire(episode)
        )
    wrong = f"wrong-{uuid.uuid4().hex}"
    token = {"ok": None, "wrong": wrong, "none": "", "duplicate": None}[case.auth]
    second = wrong if case.auth == "duplicate" else None
    return participant.client.call(
        case.route, body, method=case.method, token=token, raw=raw, second_token=second
    )


def resolve(case: Case, ctx: Ctx) -> tuple[Any, bytes | None]:
    """The row's body with its placeholders filled (or its raw text)."""
    if case.raw is not None:
        return None, case.raw.encode()
    if case.route == "status":
        return None, None
    body = {**default_body(case.route), **case.body}
    filled = {key: _fill(value, ctx) for key, value in body.items() if value is not OMIT}
    if case.route == "data" and isinstance(filled.get("episode"), list):
        filled["episode"] = filled["episode"][0]
    return filled, None


def _fill(value: Any, ctx: Ctx) -> Any:
    if isinstance(value, list):
        return [_fill(item, ctx) for item in value]
    if isinstance(value, dict):
        return {key: _fill(item, ctx) for key, item in value.items()}
    if not (isinstance(value, str) and value.startswith("$")):
        return value
    now = time.time()
    if value == "$id":
        return ctx.open_id or ctx.new_id("new")
    if value == "$new":
        return ctx.new_id("new")
    simple: dict[str, Any] = {
        "$finished": ctx.finished_id,
        "$oldest": ctx.oldest_finished,
        "$soon": now + 30,
        "$later": now + 300,
        "$short": now + 0.05,
        "$past": now - 5,
        "$ancient": now - 1_000_000,
        "$beyond_lease": now + 10 * 3600,
        "$soon_text": str(now + 30),
        "$published": str(ctx.published_dir),
        "$committed_dir": str(ctx.commit_dir),
        "$missing": str(ctx.tmp / f"missing-{ctx.tag}"),
        "$ep": [ctx.ep.to_wire()],
        "$ep2": [ctx.ep2.to_wire()],
        "$next": [ctx.ep.next_attempt().to_wire()],
        "$rollout": [ctx.ep.rollout_id],
    }
    if value in simple:
        if value in ("$ep2", "$next"):
            ctx.rollouts.add(ctx.ep2.rollout_id if value == "$ep2" else ctx.ep.rollout_id)
        return simple[value]
    if value == "$fresh_dir":
        return str(ctx.tmp / f"fresh-{ctx.tag}-{ctx.new_id('d')}")
    if value == "$corrupt":
        return str(_corrupt_copy(ctx))
    if value == "$file":
        path = ctx.tmp / f"file-{ctx.tag}"
        path.write_text("not a directory")
        return str(path)
    raise ValueError(f"unknown placeholder {value!r}")


def _corrupt_copy(ctx: Ctx) -> Path:
    """The published checkpoint copied, its manifest claiming one record more."""
    copy = ctx.tmp / f"corrupt-{ctx.tag}"
    shutil.copytree(ctx.published_dir, copy)
    kind = ctx.participant.kind.value
    instance = ctx.participant.status["instance"]
    manifest = copy / "gym" / kind / instance / "manifest.json"
    body = json.loads(manifest.read_text())
    body["record_count"] += 1
    manifest.unlink()  # published manifests are read-only links; replace the copy's
    manifest.write_text(json.dumps(body, sort_keys=True))
    return copy


def require_applicable(participant: Participant, case: Case) -> None:
    reason = skip_reason(participant, case)
    if reason is not None:
        pytest.skip(reason)
