"""One reply from every worker's: how a multi-worker participant answers as one.

Every control request a multi-worker server receives is run by each of its
workers (``group``); what each one answered is a ``Share``, and these pure
functions turn the shares into the one reply the protocol expects. A worker
that did not answer, or that started while a checkpoint was open (it lost
the episodes it held), is named in a blocker::

    worker-2:lost:pid-4242        its socket refused or dropped the call (dead)
    worker-3:unregistered         no worker holds slot 3 (absent, or not started yet)
    worker-1:silent:pid-77        no reply before the request's deadline (hung)
    worker-0:restarted:pid-91     started while this checkpoint was open

    status, body = merged_reply("prepare", shares, expected=4, checkpoint_id="c1")

Phases: the workers' common phase; while they differ (one is still preparing,
one restarted) the least settled one, ``preparing``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from envckpt.errors import ParticipantError
from envckpt.participant.model_calls import STATUS_KEY as MODEL_CALLS_KEY
from envckpt.participant.readiness import MAX_BLOCKERS_REPORTED
from envckpt.protocol import (
    STATUS_EXPECTED_WORKERS,
    STATUS_WORKERS,
    ErrorCode,
    Phase,
)

# What each worker counts for itself; the server reports their sum.
COUNTERS_KEY = "counters"
LOST = "lost"
UNREGISTERED = "unregistered"
SILENT = "silent"
RESTARTED = "restarted"
# No answer because the worker is gone: a resume, retire or forget skips it
# (it holds nothing any more); a silent worker may still act, so it is an error.
GONE = frozenset({LOST, UNREGISTERED})


@dataclass(frozen=True, slots=True)
class Share:
    """One worker's answer to one request: its reply, or why there is none."""

    slot: int
    status: int | None = None
    body: Mapping[str, Any] | None = None
    problem: str | None = None
    pid: int | None = None
    # Checkpoints that were open when this worker started (it lost its episodes).
    joined_open: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if (self.problem is None) == (self.status is None):
            raise ValueError("a share has a reply or a problem, exactly one")

    @property
    def ok(self) -> bool:
        return self.status == 200 and self.body is not None


def worker_blocker(slot: int, reason: str, pid: int | None = None) -> str:
    """The blocker naming worker ``slot`` (and its pid, when known)."""
    return f"worker-{slot}:{reason}" + ("" if pid is None else f":pid-{pid}")


def worker_blockers(shares: Iterable[Share], checkpoint_id: str | None) -> list[str]:
    """Blockers of the workers that did not answer or lost their episodes to a restart."""
    blockers = []
    for share in sorted(shares, key=lambda s: s.slot):
        if share.problem is not None:
            blockers.append(worker_blocker(share.slot, share.problem, share.pid))
        elif checkpoint_id is not None and checkpoint_id in share.joined_open:
            blockers.append(worker_blocker(share.slot, RESTARTED, share.pid))
    return blockers


def merged_report(reports: Sequence[Mapping[str, Any]], workers: Sequence[str]) -> dict[str, Any]:
    """One readiness report from the workers' (protocol.md 3), worker blockers first."""
    keys = sorted({key for report in reports for key in report.get("blockers", ())})
    restarts = sorted({key for report in reports for key in report.get("restarts", ())})
    counts: dict[str, int] = {}
    for report in reports:
        for name, value in (report.get("counts") or {}).items():
            counts[name] = counts.get(name, 0) + int(value)
    # Blockers a worker counted but did not list (over its cap) still count.
    held_back = sum(
        max(0, int(report.get("blocker_count", 0)) - len(report.get("blockers", ())))
        for report in reports
    )
    blockers = list(workers) + keys
    return {
        "ready": not blockers and all(bool(report.get("ready")) for report in reports),
        "blockers": blockers[:MAX_BLOCKERS_REPORTED],
        "blocker_count": len(blockers) + held_back,
        "counts": counts,
        "restarts": restarts,
    }


def merged_phase(phases: Iterable[str]) -> str:
    """The workers' common phase, or ``preparing`` while they differ."""
    distinct = set(phases)
    if len(distinct) == 1:
        return distinct.pop()
    return Phase.PREPARING


def first_refusal(shares: Sequence[Share], own_slot: int) -> tuple[int, dict[str, Any]] | None:
    """The error a worker answered, if any: this worker's own first, then by slot."""
    refused = [share for share in shares if share.status is not None and share.status != 200]
    if not refused:
        return None
    refused.sort(key=lambda share: (share.slot != own_slot, share.slot))
    share = refused[0]
    assert share.status is not None
    return share.status, dict(share.body or {})


def unanswered(shares: Iterable[Share], *, tolerate_gone: bool) -> list[Share]:
    """Workers without an answer that the request cannot do without."""
    return [
        share
        for share in shares
        if share.problem is not None and not (tolerate_gone and share.problem in GONE)
    ]


def refusal(code: str, detail: str) -> tuple[int, dict[str, Any]]:
    error = ParticipantError(code, detail)
    return error.status, error.to_wire()


def missing_workers(shares: Iterable[Share]) -> tuple[int, dict[str, Any]]:
    """The refusal of a request every worker must take part in, naming those that did not."""
    names = ", ".join(
        worker_blocker(share.slot, share.problem or "", share.pid) for share in shares
    )
    return refusal(ErrorCode.INVALID_PHASE, f"not every worker answered: {names}")


def merged_status(shares: Sequence[Share], *, expected: int, own_slot: int) -> dict[str, Any]:
    """``GET status`` of the whole server: the workers' phases, reports and counts merged."""
    answered = [share for share in shares if share.ok]
    own = next(share for share in answered if share.slot == own_slot)
    bodies = [dict(share.body or {}) for share in answered]
    open_ids = sorted({b["checkpoint_id"] for b in bodies if b.get("checkpoint_id")})
    checkpoint_id = open_ids[0] if open_ids else None
    leases = [b["lease_expires_at"] for b in bodies if b.get("lease_expires_at") is not None]
    blockers = worker_blockers(shares, checkpoint_id)
    status = dict(own.body or {})
    status.update(
        phase=merged_phase(b["phase"] for b in bodies) if not blockers else _open_phase(bodies),
        checkpoint_id=checkpoint_id,
        # The earliest: when the first worker would abort on its own.
        lease_expires_at=min(leases) if leases else None,
        retired_rollouts=max(int(b.get("retired_rollouts", 0)) for b in bodies),
        served_traffic=any(bool(b.get("served_traffic")) for b in bodies),
        report=merged_report([b.get("report") or {} for b in bodies], blockers),
    )
    for key, merge in ((COUNTERS_KEY, merged_counters), (MODEL_CALLS_KEY, merged_counters)):
        parts = [b[key] for b in bodies if isinstance(b.get(key), Mapping)]
        if parts:
            status[key] = merge(parts)
    status[STATUS_WORKERS] = len(answered)
    status[STATUS_EXPECTED_WORKERS] = expected
    return status


def merged_counters(parts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The whole server's counters (``counters``, ``model_calls``) from its workers':
    counts and ``*_total`` figures summed, per-code dicts summed per code, a
    ``last_*`` figure the largest; settings (a policy, a share) the first worker's."""
    merged: dict[str, Any] = {}
    for part in parts:
        for name, value in part.items():
            if isinstance(value, Mapping):
                sums = merged.setdefault(name, {})
                for code, count in value.items():
                    sums[code] = sums.get(code, 0) + count
            elif name.startswith("last_") and isinstance(value, int | float):
                merged[name] = max(merged.get(name, value), value)
            elif (isinstance(value, int) and not isinstance(value, bool)) or (
                isinstance(value, float) and name.endswith("_total")
            ):
                merged[name] = merged.get(name, 0) + value
            else:
                merged.setdefault(name, value)
    return merged


def _open_phase(bodies: Sequence[Mapping[str, Any]]) -> str:
    phases = {body["phase"] for body in bodies}
    if phases == {Phase.IDLE}:
        return Phase.IDLE
    return merged_phase(phases)


def merged_prepare(shares: Sequence[Share], checkpoint_id: str) -> dict[str, Any]:
    """``{phase, report}`` of a prepare every worker answered (some may be blockers)."""
    bodies = [dict(share.body or {}) for share in shares if share.ok]
    blockers = worker_blockers(shares, checkpoint_id)
    report = merged_report([body.get("report") or {} for body in bodies], blockers)
    phase = merged_phase(body["phase"] for body in bodies)
    if not report["ready"] and phase == Phase.PREPARED:
        phase = Phase.PREPARING  # prepared everywhere it answered, but not everywhere
    return {"phase": phase, "report": report}


def merged_renew(shares: Sequence[Share]) -> dict[str, Any]:
    leases = [share.body["lease_expires_at"] for share in shares if share.ok and share.body]
    return {"lease_expires_at": min(leases)}


def merged_resume(shares: Sequence[Share]) -> dict[str, Any]:
    bodies = [share.body for share in shares if share.ok and share.body]
    return {"phase": Phase.IDLE, "idempotent": all(bool(b.get("idempotent")) for b in bodies)}


def merged_restore(shares: Sequence[Share]) -> dict[str, Any]:
    """One restore reply: every worker read the same manifest, so one source id."""
    bodies = [dict(share.body or {}) for share in shares if share.ok]
    sources = {body.get("source_checkpoint_id") for body in bodies}
    if len(sources) != 1:
        raise ParticipantError(
            ErrorCode.INVALID_CHECKPOINT_STATE, f"workers read different checkpoints: {sources}"
        )
    restored = sorted({key for body in bodies for key in body.get("restored", ())})
    return {**bodies[0], "restored": restored}


def merged_commit_fields(bodies: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The commit reply's episode lists and kind extras, merged (records and manifest aside).

    Lists become their sorted union, mappings their union (an episode is held
    by one worker only, so no key repeats), anything else must agree.
    """
    merged: dict[str, Any] = {}
    for body in bodies:
        for name, value in body.items():
            if name in ("records", "manifest"):
                continue
            if name not in merged:
                merged[name] = _copy(value)
            elif isinstance(value, list):
                merged[name] = sorted(set(merged[name]) | set(value))
            elif isinstance(value, Mapping):
                clash = set(merged[name]) & set(value)
                if clash:
                    raise ParticipantError(
                        ErrorCode.CHECKPOINT_ERROR,
                        f"two workers exported {name} of {sorted(clash)[:3]}",
                    )
                merged[name] = {**merged[name], **value}
            elif merged[name] != value:
                raise ParticipantError(
                    ErrorCode.CHECKPOINT_ERROR, f"workers disagree on {name}: {merged[name]!r}"
                )
    return merged


def _copy(value: Any) -> Any:
    if isinstance(value, list):
        return sorted(set(value))
    if isinstance(value, Mapping):
        return dict(value)
    return value
