"""The verdict on one conformance row: the reply, the phase after, and named follow-up checks.

``judge`` compares a reply and the participant's status before and after
with the row (status, code, reply keys, phase and open id, a refusal that
changed nothing). ``CHECKS`` are the named follow-ups a row lists: each takes
the ``Run`` and returns a problem, or None. Both are pure over what they are
given (the follow-ups may make their own calls through the run's client), so
a tampered reply or directory is shown to fail them (test_verdicts.py)::

    problems = judge(run) + [p for name in case.checks if (p := CHECKS[name](run))]
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envckpt.episodes import EnvironmentEpisode

from conformance.cases import ANY, Case
from conformance.starts import STARTS, Ctx
from conformance.target import Participant, Reply

STANDARD_MANIFEST = {
    "schema_version",
    "kind",
    "instance",
    "checkpoint_id",
    "records_file",
    "records_sha256",
    "record_count",
}
REPORT_KEYS = {"ready", "blockers", "blocker_count", "counts", "restarts"}
KIND_EXTRAS = {"agent": ("run_episode_ids",), "model": ("staging_keys", "staging_keys_by_episode")}


@dataclass
class Run:
    """One executed row: what was sent, what came back, the status around it."""

    case: Case
    ctx: Ctx
    participant: Participant
    body: dict[str, Any] | None
    reply: Reply
    before: dict[str, Any]
    after: dict[str, Any]

    @property
    def profile(self) -> str:
        return self.participant.profile

    @property
    def sent_id(self) -> Any:
        return (self.body or {}).get("checkpoint_id")


def expected_open_id(run: Run, phase: str) -> str | None:
    if phase == "idle":
        return None
    if run.reply.status != 200 or run.ctx.open_id is not None:
        return run.ctx.open_id
    return run.sent_id  # type: ignore[no-any-return]


def judge(run: Run) -> list[str]:
    """Status, code, reply keys, phase and open id after, and no effect of a refusal."""
    case, reply = run.case, run.reply
    problems: list[str] = []
    statuses = case.status if isinstance(case.status, tuple) else (case.status,)
    if reply.status not in statuses:
        problems.append(f"status {reply.status}, expected {statuses}: {reply.describe()}")
    if case.code is not None and reply.status != 200:
        bare_422 = reply.code is None and case.code == "invalid_request" and reply.status == 422
        # Gym answers a malformed body with FastAPI's default 422, no envelope.
        if reply.code != case.code and not (bare_422 and run.profile == "protocol"):
            problems.append(f"code {reply.code!r}, expected {case.code!r}: {reply.describe()}")
    if reply.status == 200:
        body = reply.body if isinstance(reply.body, dict) else {}
        missing = [key for key in case.keys if key not in body]
        if missing:
            problems.append(f"reply lacks {missing}: {reply.describe()}")
    if case.after != ANY:
        phase = case.after or STARTS[case.start].phase
        seen = (run.after.get("phase"), run.after.get("checkpoint_id"))
        wanted = (phase, expected_open_id(run, phase))
        if seen != wanted:
            problems.append(f"(phase, checkpoint_id) after is {seen}, expected {wanted}")
    if reply.status != 200 and case.after is None:
        fields = ["phase", "checkpoint_id"]
        if run.profile == "envckpt":
            fields.append("retired_rollouts")
            # A call that failed after it was accepted may have re-armed the lease.
            if case.code not in ("checkpoint_error", "deadline_exceeded"):
                fields.append("lease_expires_at")
        changed = [f for f in fields if run.before.get(f) != run.after.get(f)]
        if changed:
            problems.append(f"a refused call changed {changed}: {run.before} -> {run.after}")
    return problems


# ------------------------------------------------------------------- checks


def _body(run: Run) -> dict[str, Any]:
    return run.reply.body if isinstance(run.reply.body, dict) else {}


def replay(name: str) -> Callable[[Run], str | None]:
    def check(run: Run) -> str | None:
        recorded = run.ctx.recorded.get(name)
        if _body(run) != recorded:
            return f"not the recorded {name} reply: {_body(run)} != {recorded}"
        return None

    return check


def ready(run: Run) -> str | None:
    body = _body(run)
    report = body.get("report") or {}
    if body.get("phase") != "prepared" or report.get("ready") is not True:
        return f"not a ready prepare reply: {body}"
    missing = REPORT_KEYS - set(report)
    return f"report lacks {sorted(missing)}" if missing else None


def blocked(run: Run) -> str | None:
    body = _body(run)
    report = body.get("report") or {}
    if body.get("phase") != "preparing" or report.get("ready") is not False:
        return f"not a blocked prepare reply: {body}"
    if (
        run.ctx.ep.capture_key not in report.get("blockers", [])
        or report.get("blocker_count", 0) < 1
    ):
        return f"the turn in flight is not a blocker: {report}"
    return None


def lease_armed(run: Run) -> str | None:
    lease, deadline = run.after.get("lease_expires_at"), (run.body or {}).get("deadline_ts")
    ok = isinstance(lease, int | float) and isinstance(deadline, float) and lease >= deadline
    return None if ok else f"lease {lease} is not armed past the deadline {deadline}"


def lease_extended(run: Run) -> str | None:
    before, after = run.before.get("lease_expires_at"), run.after.get("lease_expires_at")
    # The row's deadline is 300 s away, the start's at most 30 s: the lease moves by ~270 s.
    if not (isinstance(before, int | float) and isinstance(after, int | float)):
        return f"no lease to compare: {before} -> {after}"
    return None if after >= before + 200 else f"lease not extended: {before} -> {after}"


def lease_kept(run: Run) -> str | None:
    before, after = run.before.get("lease_expires_at"), run.after.get("lease_expires_at")
    return None if before == after and before is not None else f"lease moved: {before} -> {after}"


def lease_null(run: Run) -> str | None:
    lease = run.after.get("lease_expires_at")
    return None if lease is None else f"lease still {lease} after resume"


def lease_expired(run: Run) -> str | None:
    """A participant whose lease lapsed resumes by itself, and fences the id."""
    deadline = time.monotonic() + 5
    while run.participant.client.status().get("phase") != "idle":
        if time.monotonic() > deadline:
            return "still open 5 s after its lease lapsed"
        time.sleep(0.05)
    return fenced(run)


def lapsed_or_refused(run: Run) -> str | None:
    """A prepare whose deadline is long past: refused (``deadline_exceeded``) or lapsed."""
    if (run.reply.status, run.reply.code) == (409, "deadline_exceeded"):
        return None
    if run.reply.status == 409:
        return f"refused with {run.reply.code!r}, not deadline_exceeded"
    return lease_expired(run)


def fenced(run: Run) -> str | None:
    again = run.participant.client.post("prepare", checkpoint_id=run.sent_id)
    if (again.status, again.code) != (409, "stale_checkpoint"):
        return f"the id is not fenced: prepare -> {again.describe()}"
    return None


def idempotent(flag: bool) -> Callable[[Run], str | None]:
    def check(run: Run) -> str | None:
        body = _body(run)
        wanted = {"phase": "idle", "idempotent": flag}
        return None if body == wanted else f"resume replied {body}, expected {wanted}"

    return check


def manifest(run: Run) -> str | None:
    body = _body(run).get("manifest") or {}
    missing = STANDARD_MANIFEST - set(body)
    if missing:
        return f"manifest lacks {sorted(missing)}"
    if (body.get("kind"), body.get("instance")) != (run.before["kind"], run.before["instance"]):
        return f"manifest names {body.get('kind')}/{body.get('instance')}"
    if run.profile == "envckpt" and set(body) != STANDARD_MANIFEST:
        return f"manifest has fields beyond Gym's: {sorted(set(body) - STANDARD_MANIFEST)}"
    return None


def kind_extras(run: Run) -> str | None:
    missing = [key for key in KIND_EXTRAS.get(run.before["kind"], ()) if key not in _body(run)]
    return f"commit reply lacks {missing}" if missing else None


def records(run: Run) -> str | None:
    """On disk: Gym's layout, record envelope, digest and count over the whole file."""
    checkpoint_dir = Path((run.body or {})["checkpoint_dir"])
    return records_problem(checkpoint_dir, run.before["kind"], run.before["instance"])


def records_problem(checkpoint_dir: Path, kind: str, instance: str) -> str | None:
    directory = checkpoint_dir / "gym" / kind / instance
    try:
        body = json.loads((directory / "manifest.json").read_text())
        raw = (directory / body["records_file"]).read_bytes()
    except (OSError, ValueError, KeyError) as error:
        return f"no readable manifest and records under {directory}: {error}"
    if hashlib.sha256(raw).hexdigest() != body.get("records_sha256"):
        return "records digest does not match the manifest"
    lines = raw.splitlines()
    if len(lines) != body.get("record_count"):
        return f"{len(lines)} records, manifest says {body.get('record_count')}"
    for line in lines:
        episode = json.loads(line).get("episode_id")
        if not isinstance(episode, dict) or set(episode) != {"rollout_id", "attempt"}:
            return f"a record without Gym's episode_id envelope: {line[:200]!r}"
    return None


def exported(keys: Callable[[Ctx], list[str]]) -> Callable[[Run], str | None]:
    def check(run: Run) -> str | None:
        got, wanted = _body(run).get("episode_ids"), keys(run.ctx)
        if wanted and not (isinstance(got, list) and set(wanted) <= set(got)):
            return f"episode_ids {got} lack {wanted}"
        return None if wanted or got == [] else f"episode_ids {got}, expected []"

    return check


def retry_commits(run: Run) -> str | None:
    retry = run.participant.client.call(
        "commit", {**(run.body or {}), "deadline_ts": time.time() + 30}
    )
    if retry.status != 200 or _body_of(retry).get("phase") != "committed":
        return f"the retry did not commit: {retry.describe()}"
    return None


def _body_of(reply: Reply) -> dict[str, Any]:
    return reply.body if isinstance(reply.body, dict) else {}


def source(run: Run) -> str | None:
    got = _body(run).get("source_checkpoint_id")
    return None if got == run.ctx.published_id else f"source {got}, expected {run.ctx.published_id}"


def restored(keys: Callable[[Ctx], list[str]]) -> Callable[[Run], str | None]:
    def check(run: Run) -> str | None:
        got, wanted = _body(run).get("restored"), keys(run.ctx)
        return None if got == wanted else f"restored {got}, expected {wanted}"

    return check


def data_refused(
    episode: Callable[[Ctx], EnvironmentEpisode], code: str
) -> Callable[[Run], str | None]:
    def check(run: Run) -> str | None:
        driver = run.participant.driver
        if driver is None:
            return None  # no data routes to look through
        reply = driver.data_call(run.participant.kind, episode(run.ctx))
        return None if reply.code == code else f"data call not refused {code}: {reply.describe()}"

    return check


def admission_open(run: Run) -> str | None:
    driver = run.participant.driver
    if driver is None:
        return None
    run.ctx.rollouts.add(run.ctx.ep2.rollout_id)
    reply = driver.data_call(run.participant.kind, run.ctx.ep2)
    return None if reply.status == 200 else f"admission still closed: {reply.describe()}"


def left_out_restarts_as_same_attempt(run: Run) -> str | None:
    """Gym's rule: a restored attempt a commit leaves out is deleted, not fenced.

    After the resume, the controller may start that rollout over as the very
    attempt the restore installed; its first data call must be admitted.
    """
    resumed = run.participant.client.post("resume", checkpoint_id=run.ctx.open_id)
    if resumed.status != 200:
        return f"resume after the commit failed: {resumed.describe()}"
    driver = run.participant.driver
    if driver is None:
        return None  # no data routes to look through
    episode = run.ctx.ep.next_attempt()
    if run.participant.kind == "agent":
        try:
            driver.start(run.participant.kind, episode)  # a refused /run ends at once
        except AssertionError as error:
            return f"the left-out attempt cannot restart as itself: {error}"
        return None
    reply = driver.data_call(run.participant.kind, episode)
    if reply.status != 200:
        return f"the left-out attempt cannot restart as itself: {reply.describe()}"
    return None


def retired(run: Run) -> str | None:
    sent = [EnvironmentEpisode.from_wire(e).capture_key for e in (run.body or {})["episode_ids"]]
    return None if _body(run) == {"retired": sent} else f"retire replied {_body(run)}, sent {sent}"


def forgotten(run: Run) -> str | None:
    wanted = sorted(set((run.body or {})["rollout_ids"]))
    return None if _body(run) == {"forgotten": wanted} else f"forget replied {_body(run)}"


def state_kept(run: Run) -> str | None:
    """envckpt's status counts: the held state is still there (Gym's counts differ)."""
    if run.profile != "envckpt":
        return None
    live = (run.after.get("report") or {}).get("counts", {}).get("live", 0)
    return None if live >= 1 else f"forget dropped the held state: {run.after.get('report')}"


CHECKS: dict[str, Callable[[Run], str | None]] = {
    "replay:prepare": replay("prepare"),
    "replay:commit": replay("commit"),
    "replay:restore": replay("restore"),
    "ready": ready,
    "blocked": blocked,
    "lease_armed": lease_armed,
    "lease_extended": lease_extended,
    "lease_kept": lease_kept,
    "lease_null": lease_null,
    "lease_expired": lease_expired,
    "lapsed_or_refused": lapsed_or_refused,
    "fenced": fenced,
    "idempotent": idempotent(True),
    "not_idempotent": idempotent(False),
    "manifest": manifest,
    "kind_extras": kind_extras,
    "records": records,
    "exported_ep": exported(lambda ctx: [ctx.ep.capture_key]),
    "exported_none": exported(lambda ctx: []),
    "retry_commits": retry_commits,
    "source": source,
    "restored_none": restored(lambda ctx: []),
    "restored_next": restored(lambda ctx: [ctx.ep.next_attempt().capture_key]),
    "restored_next2": restored(lambda ctx: [ctx.ep2.next_attempt().capture_key]),
    "older_attempt_fenced": data_refused(lambda ctx: ctx.ep, "stale_attempt"),
    "next_attempt_fenced": data_refused(lambda ctx: ctx.ep.next_attempt(), "stale_attempt"),
    "attempt_fenced": data_refused(lambda ctx: ctx.ep, "stale_attempt"),
    "admission_open": admission_open,
    "left_out_restarts_as_same_attempt": left_out_restarts_as_same_attempt,
    "retired": retired,
    "forgotten": forgotten,
    "state_kept": state_kept,
}
