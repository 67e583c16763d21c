"""Facts about a finished job, read from the files it left; each function lists what is wrong.

No verdict here: a caller (a test, a demo) decides what to require::

    reward_mismatches(results, control)            # vs an uninterrupted run of the same tasks
    audit_problems(results, audit, tasks)          # each kept application logged once; increments
    token_row_problems(results, rows)              # staging keys vs data-plane rows, and lineage
    continued_from_turn(results)                   # rollouts a restore continued mid-loop
    continuation_problems(results, restored)       # each continuation matches a restore
    turns_saved(results)                           # loop steps restores carried over
    lost_tool_calls(results, audit)                # tool calls redone (their process died)

``results`` and ``control`` map rollout id to the backend's summary
(``backend.summarize``); ``audit`` is the resources servers' audit lines;
``rows`` maps staging key to ``(capture_key, payload)`` as the data plane holds them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from envckpt.episodes import EnvironmentEpisode
from envckpt.nemo_gym.examples import planned_increments
from envckpt.nemo_gym.job import CONTROL_SUFFIX
from envckpt.nemo_gym.resources import END_ROUTES, SEED_ROUTES

INCREMENT_ROUTE = "/increment_counter"


def read_jsonl(paths: Iterable[Path]) -> list[dict[str, Any]]:
    lines: list[dict[str, Any]] = []
    for path in paths:
        if path.exists():
            for line in path.read_text(encoding="utf-8").splitlines():
                if line.strip():
                    lines.append(json.loads(line))
    return lines


def reward_mismatches(
    results: Mapping[str, Mapping[str, Any]], control: Mapping[str, Mapping[str, Any]]
) -> list[str]:
    """Rollouts whose reward or final answer differs from the uninterrupted run's."""
    problems = [f"{rid}: no result" for rid in sorted(set(control) - set(results))]
    problems += [f"{rid}: no uninterrupted run" for rid in sorted(set(results) - set(control))]
    for rid in sorted(set(results) & set(control)):
        ours, theirs = results[rid], control[rid]
        if ours.get("reward") != theirs.get("reward"):
            problems.append(f"{rid}: reward {ours.get('reward')} != {theirs.get('reward')}")
        elif ours.get("final_text") != theirs.get("final_text"):
            problems.append(f"{rid}: final answer {ours.get('final_text')!r} differs")
    return problems


def continued_from_turn(results: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Rollouts a restore continued from a saved turn of their loop (step above 0)."""
    return sorted(
        rid
        for rid, result in results.items()
        if any(
            marker.get("phase") in ("loop", "verify", "return") and marker.get("step", 0) > 0
            for marker in (result.get("envckpt") or {}).get("continued", ())
        )
    )


def _markers(result: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return list((result.get("envckpt") or {}).get("continued", ()))


def continuation_problems(
    results: Mapping[str, Mapping[str, Any]], restored: Iterable[tuple[str, int]]
) -> list[str]:
    """Every continuation a result records was made by a restore (``restored``: the
    (rollout id, attempt) pairs restores continued), at an attempt below the final one or
    the final one itself; and a result whose final attempt a restore continued says so."""
    pairs = set(restored)
    problems: list[str] = []
    for rid, result in sorted(results.items()):
        attempt = int((result.get("envckpt") or {}).get("attempt", 0))
        markers = [int(m.get("attempt", -1)) for m in _markers(result)]
        strays = [a for a in markers if (rid, a) not in pairs or a > attempt]
        if strays:
            problems.append(f"{rid}: continued as attempt {strays[0]}, but no restore did that")
        elif markers != sorted(set(markers)):
            problems.append(f"{rid}: continuations out of order {markers}")
        elif (rid, attempt) in pairs and attempt not in markers:
            problems.append(f"{rid}: a restore continued attempt {attempt}, the result says not")
    return problems


def turns_saved(results: Mapping[str, Mapping[str, Any]]) -> int:
    """Loop steps restores carried over: each continuation kept the steps done before it."""
    return sum(
        int(marker.get("step", 0)) for result in results.values() for marker in _markers(result)
    )


def audit_problems(
    results: Mapping[str, Mapping[str, Any]],
    audit: Sequence[Mapping[str, Any]],
    tasks: Mapping[str, Mapping[str, Any]],
) -> list[str]:
    """Each application a result kept is logged exactly once, for its rollout; counter
    rollouts kept exactly their planned increments, each moving the counter once."""
    by_id: dict[str, list[Mapping[str, Any]]] = {}
    for entry in audit:
        by_id.setdefault(str(entry.get("application")), []).append(entry)
    problems: list[str] = []
    for rid, result in sorted(results.items()):
        kept = [str(a) for a in (result.get("envckpt") or {}).get("applications", ())]
        entries = []
        for application in kept:
            logged = by_id.get(application, [])
            if len(logged) != 1:
                problems.append(f"{rid}: application {application} logged {len(logged)} times")
                continue
            if logged[0].get("rollout_id") != rid:
                problems.append(f"{rid}: application {application} belongs to another rollout")
                continue
            entries.append(logged[0])
        task = tasks.get(rid)
        if task is not None and "initial_count" in task:
            problems += _counter_problems(rid, task, entries)
    return problems


def _counter_problems(
    rid: str, task: Mapping[str, Any], entries: Sequence[Mapping[str, Any]]
) -> list[str]:
    plan = planned_increments(dict(task))
    increments = [e for e in entries if e.get("route") == INCREMENT_ROUTE]
    applied = [(e.get("request") or {}).get("count") for e in increments]
    if applied != plan:
        return [f"{rid}: increments kept {applied}, planned {plan}"]
    counter = int(task["initial_count"])
    for entry, count in zip(increments, plan, strict=True):
        counter += count
        state = entry.get("state") or {}
        if state.get("counter") != counter:
            return [f"{rid}: after +{count} the counter was {state.get('counter')}, not {counter}"]
    return []


def lost_applications(
    results: Mapping[str, Mapping[str, Any]], audit: Sequence[Mapping[str, Any]]
) -> list[Mapping[str, Any]]:
    """Logged applications no result kept (applied by a process killed before a snapshot)."""
    kept = {
        str(a)
        for result in results.values()
        for a in (result.get("envckpt") or {}).get("applications", ())
    }
    return [entry for entry in audit if str(entry.get("application")) not in kept]


def lost_tool_calls(
    results: Mapping[str, Mapping[str, Any]], audit: Sequence[Mapping[str, Any]]
) -> list[Mapping[str, Any]]:
    """Tool calls of the job (no session seed or end, no control run) that no result
    kept: a process applied them, then died before a snapshot saved them, so they ran again."""
    return [
        entry
        for entry in lost_applications(results, audit)
        if entry.get("route") not in SEED_ROUTES | END_ROUTES
        and not str(entry.get("rollout_id", "")).endswith(CONTROL_SUFFIX)
    ]


def token_row_problems(
    results: Mapping[str, Mapping[str, Any]], rows: Mapping[str, tuple[str, str]]
) -> list[str]:
    """Every staging key of a result has its row, under its own attempt, and nothing else
    of that rollout is left; the rows form one lineage chain (root, then resolved parents
    whose tokens each next prompt starts with), across attempts."""
    from nemo_gym.token_id_capture import TokenEntry, compute_digest

    problems: list[str] = []
    by_rollout: dict[str, set[str]] = {}
    for key, (capture_key, _) in rows.items():
        by_rollout.setdefault(
            EnvironmentEpisode.from_capture_key(capture_key).rollout_id, set()
        ).add(key)
    for rid, result in sorted(results.items()):
        keys = list(result.get("staging_keys") or ())
        missing = [k for k in keys if k not in rows]
        if missing:
            problems.append(f"{rid}: staging keys without a row: {missing[:3]}")
            continue
        extra = sorted(by_rollout.get(rid, set()) - set(keys))
        if extra:
            problems.append(f"{rid}: rows no result names: {extra[:3]}")
        entries = []
        for key in keys:
            capture_key, payload = rows[key]
            if not key.startswith(f"{capture_key}/"):
                problems.append(f"{rid}: row {key} is filed under {capture_key}")
            entry = TokenEntry.model_validate(json.loads(payload))
            if EnvironmentEpisode.from_capture_key(entry.rollout_id).rollout_id != rid:
                problems.append(f"{rid}: row {key} holds {entry.rollout_id}'s tokens")
            entries.append(entry)
        problems += [f"{rid}: {p}" for p in _lineage_problems(entries, compute_digest)]
    return problems


def _lineage_problems(entries: Sequence[Any], compute_digest: Any) -> list[str]:
    if not entries:
        return ["no token rows"]
    by_call = {entry.model_call_id: entry for entry in entries}
    roots = [e for e in entries if e.parent_resolution == "root"]
    if len(roots) != 1:
        return [f"{len(roots)} root calls"]
    problems = []
    children: dict[str, int] = {}
    for entry in entries:
        if entry is roots[0]:
            continue
        parent = by_call.get(entry.parent_call_id or "")
        if entry.parent_resolution != "resolved" or parent is None:
            problems.append(f"call {entry.model_call_id} has no resolved parent among the rows")
            continue
        children[parent.model_call_id] = children.get(parent.model_call_id, 0) + 1
        prefix = entry.prompt_token_ids[: parent.cum_len]
        if compute_digest(prefix) != parent.digest:
            problems.append(f"call {entry.model_call_id} does not continue its parent's tokens")
    if any(count > 1 for count in children.values()):
        problems.append("a call has two continuations (a turn ran twice)")
    return problems
