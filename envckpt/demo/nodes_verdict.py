"""The verdict of ``envckpt demo --ray --nodes N``: the demo's checks, plus the cluster's.

Every check of the process demo (``verdict.judge``: each rollout finished
once, transcripts, the audit, continuations, restarts that restored, a clean
end) and, from the events the run left (``placed``, ``node_kill``,
``node_killed``, ``instances_lost``, ``restored``):

* the instances were spread over every node of the cluster;
* each planned node kill struck a non-head node hosting instances, after a
  published snapshot held rollouts, and the demo killed it;
* the instances it hosted were lost (their rollouts were running there);
* replacement actors ran on the remaining nodes only;
* the job restored a snapshot after each node loss.

``verdict.json`` adds ``nodes``, ``nodes_killed``, ``instances_lost`` and the
placement of each run to the demo's usual numbers::

    record, verdict = judge_nodes_directory(settings, nodes=3)
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from envckpt.demo.events import EVENTS_NAME, read_events
from envckpt.demo.report import Verdict, table
from envckpt.demo.scenario import DemoSettings
from envckpt.demo.verdict import RunRecord, judge, read_run
from envckpt.fsutil import atomic_write_bytes

Event = Mapping[str, Any]


def _of(events: Sequence[Event], name: str) -> list[Event]:
    return [event for event in events if event.get("event") == name]


def check_nodes(verdict: Verdict, events: Sequence[Event], *, nodes: int) -> dict[str, Any]:
    """The cluster's checks on ``verdict``; the numbers ``verdict.json`` adds."""
    placed, requests = _of(events, "placed"), _of(events, "node_kill")
    killed, lost = _of(events, "node_killed"), _of(events, "instances_lost")
    first = placed[0] if placed else {}
    everywhere = set(first.get("nodes", ()))
    used = set((first.get("placement") or {}).values())
    verdict.check(
        "the instances were spread over every node",
        len(everywhere) == nodes and used == everywhere,
        f"{len(used)} of {len(everywhere)} nodes host instances (asked for {nodes})",
    )
    verdict.check(*_kills_check(requests, killed, first))
    verdict.check(*_losses_check(requests, lost))
    verdict.check(*_replacements_check(placed, lost))
    verdict.check(*_restores_check(events, lost))
    return {
        "nodes": len(everywhere),
        "nodes_killed": len(killed),
        "instances_lost": sum(len(event.get("instances", ())) for event in lost),
        "placement": [dict(event.get("placement") or {}) for event in placed],
    }


def _outcome(name: str, *, seen: bool, problems: Sequence[str], fine: str) -> tuple[str, bool, str]:
    """A check holds when what it judges happened (``seen``) without a problem; its detail
    is the first three problems, or ``fine``."""
    return name, seen and not problems, "; ".join(problems[:3]) if problems else fine


def _kills_check(
    requests: Sequence[Event], killed: Sequence[Event], first: Event
) -> tuple[str, bool, str]:
    head = first.get("head")
    problems = []
    for request in requests:
        node = request.get("node")
        if not node or node == head:
            problems.append(f"run {request.get('incarnation')}: asked to kill {node!r}")
        elif int(request.get("snapshots", 0)) < 1:
            problems.append(f"run {request.get('incarnation')}: struck before a snapshot")
        elif not request.get("instances"):
            problems.append(f"run {request.get('incarnation')}: its node hosted no instance")
    done = [event.get("node") for event in killed]
    if [r.get("node") for r in requests] != done:
        problems.append(f"asked for {[r.get('node') for r in requests]}, killed {done}")
    return _outcome(
        "a node was killed during the rollouts, after a snapshot held rollouts",
        seen=bool(requests),
        problems=problems,
        fine=f"{len(done)} node(s) killed, never the head",
    )


def _losses_check(requests: Sequence[Event], lost: Sequence[Event]) -> tuple[str, bool, str]:
    problems = []
    if len(lost) != len(requests):
        problems.append(f"{len(requests)} nodes killed, {len(lost)} losses seen")
    for request, loss in zip(requests, lost, strict=False):
        hosted, gone = set(request.get("instances", ())), set(loss.get("instances", ()))
        if not gone or gone != hosted:
            problems.append(f"node hosted {sorted(hosted)}, lost {sorted(gone)}")
        if request.get("node") not in loss.get("nodes", ()):
            problems.append(f"the cluster never marked {request.get('node')} dead")
    return _outcome(
        "the instances on the killed node were lost with it",
        seen=bool(lost),
        problems=problems,
        fine=f"{sum(len(e.get('instances', ())) for e in lost)} instance(s) lost",
    )


def _replacements_check(placed: Sequence[Event], lost: Sequence[Event]) -> tuple[str, bool, str]:
    problems = []
    for loss in lost:
        run = int(loss.get("incarnation", 0)) + 1
        later = [p for p in placed if int(p.get("incarnation", 0)) == run]
        if not later:
            problems.append(f"run {run}: no replacement actors")
            continue
        placement = later[0].get("placement") or {}
        dead = set(loss.get("nodes", ()))
        wanted = set((placed[0].get("placement") or {}).keys())
        if set(placement) != wanted or dead & set(placement.values()):
            problems.append(f"run {run}: placed {placement} with {sorted(dead)} dead")
    return _outcome(
        "replacement actors ran on the remaining nodes only",
        seen=bool(lost),
        problems=problems,
        fine=f"{len(lost)} replacement(s), none on a dead node",
    )


def _restores_check(events: Sequence[Event], lost: Sequence[Event]) -> tuple[str, bool, str]:
    restores = _of(events, "restored")
    missing = []
    for loss in lost:
        run = int(loss.get("incarnation", 0)) + 1
        if not any(int(r.get("incarnation", 0)) == run and r.get("snapshot") for r in restores):
            missing.append(run)
    return (
        "the job restored a snapshot after each node loss",
        bool(lost) and not missing,
        f"runs {missing} did not restore" if missing else f"{len(lost)} restore(s) after a loss",
    )


def judge_nodes(
    settings: DemoSettings, record: RunRecord, events: Sequence[Event], *, nodes: int
) -> tuple[Verdict, dict[str, Any]]:
    """Every check of the demo and of the cluster; the numbers the cluster adds."""
    verdict = judge(settings, record)
    numbers = check_nodes(verdict, events, nodes=nodes)
    return verdict, numbers


def write_nodes_verdict(verdict: Verdict, numbers: Mapping[str, Any], path: Path) -> None:
    """``verdict.json``: the demo's document with the cluster's numbers."""
    document = {**verdict.to_json(), **numbers}
    atomic_write_bytes(path, json.dumps(document, indent=1, sort_keys=True).encode())


def judge_nodes_directory(settings: DemoSettings, *, nodes: int) -> tuple[RunRecord, Verdict]:
    """Read the run in ``settings.directory``, judge it, write its ``verdict.json``."""
    record = read_run(settings.directory)
    events = read_events(settings.directory / EVENTS_NAME)
    verdict, numbers = judge_nodes(settings, record, events, nodes=nodes)
    write_nodes_verdict(verdict, numbers, settings.directory / "verdict.json")
    return record, verdict


def render_nodes(directory: Path) -> str:
    """Where the instances ran in each run of the job, and which nodes were killed."""
    events = read_events(directory / EVENTS_NAME)
    killed = {str(e.get("node")) for e in _of(events, "node_killed")}
    rows = []
    for event in _of(events, "placed"):
        placement = event.get("placement") or {}
        for node in event.get("nodes", ()):
            hosted = sorted(i for i, n in placement.items() if n == node)
            role = "head" if node == event.get("head") else "worker"
            fate = "killed" if node in killed else ""
            rows.append(
                (event.get("incarnation"), f"{node[:12]} ({role})", ", ".join(hosted), fate)
            )
    return table("nodes", ("run", "node", "instances", "later"), rows)
