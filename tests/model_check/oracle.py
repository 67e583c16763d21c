"""A reference model of the control protocol, written from docs/protocol.md alone.

Nothing here imports ``envckpt.machines``: the legality of every call is
restated from the protocol's text (the "Participant phases" rules and the
"Compatibility" table) and from the coordinator's lifecycle as docs/engine.md
words it, so a wrong row in the engine's tables disagrees with this model
instead of being read back from itself.

    oracle = ParticipantOracle(lease_grace=30.0)
    verdict = oracle.judge(route, checkpoint_id, now=..., deadline=..., args=...)
    problem = oracle.compare(verdict, status=200, code=None, phase_after="prepared")
    LIFECYCLE_LEGAL["preparing"]       # triggers an instance may fire in "preparing"
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

IDLE, PREPARING, PREPARED, COMMITTED, RESTORED = (
    "idle",
    "preparing",
    "prepared",
    "committed",
    "restored",
)
OPEN = frozenset({PREPARING, PREPARED, COMMITTED})
# "the last 64 finished ids answer stale_checkpoint"
FINISHED_KEPT = 64

# The coordinator's view of one instance (docs/engine.md): which trigger each
# state allows. Written out state by state, not derived from any table.
LIFECYCLE_LEGAL: dict[str, frozenset[str]] = {
    "undiscovered": frozenset({"discover"}),
    "discovered": frozenset(
        {"prepare", "prepare_blocked", "retire", "forget", "restore", "fail", "fail_restore"}
    ),
    # A blocked prepare may be repeated; nothing is committed before every
    # participant reported ready.
    "preparing": frozenset({"prepare", "prepare_blocked", "renew", "resume", "fail"}),
    "prepared": frozenset({"commit", "renew", "resume", "fail"}),
    "committed": frozenset({"renew", "resume", "fail"}),
    "resumed": frozenset({"prepare", "prepare_blocked", "retire", "forget", "fail"}),
    "restored": frozenset({"renew", "resume", "retire", "forget", "abandon_restore"}),
    "failed": frozenset({"resume"}),
    "restore_failed": frozenset({"resume", "retire"}),
}
# The adapter operations a caller can request, and the trigger that decides them.
OPERATIONS = ("prepare", "commit", "renew", "resume", "retire", "forget", "restore")


def operation_legal(state: str, operation: str) -> bool:
    """Whether the adapter may send ``operation`` in lifecycle ``state``."""
    return operation in LIFECYCLE_LEGAL.get(state, frozenset())


@dataclass(frozen=True)
class Verdict:
    """What the protocol says a call must do: refuse with ``code``, or move to ``phases``.

    ``may_fail`` are codes the oracle cannot decide from phases alone (an
    unusable checkpoint, an injected write failure, live attempts): the
    engine may answer one of them, and then nothing may change.
    """

    route: str
    code: str | None
    phases: frozenset[str] = frozenset()
    may_fail: frozenset[str] = frozenset()


@dataclass
class ParticipantOracle:
    """One participant's phase, open id, finished ids and lease, as the protocol defines them."""

    lease_grace: float
    phase: str = IDLE
    open_id: str | None = None
    finished: list[str] = field(default_factory=list)
    lease: float | None = None
    prepare_replied: bool = False
    commit_args: Any = None
    committed_args: Any = None
    restore_args: Any = None

    # ------------------------------------------------------------ the rules

    def judge(
        self, route: str, checkpoint_id: str, *, now: float, deadline: float, args: Any = None
    ) -> Verdict:
        """The protocol's answer to ``route`` now (docs/protocol.md, "Participant phases")."""
        self.expire(now)
        refuse = lambda code: Verdict(route, code)  # noqa: E731
        fenced = route in ("prepare", "renew", "commit", "restore") and self._done(checkpoint_id)
        if fenced:
            return refuse("stale_checkpoint")  # checked first
        if route in ("prepare", "renew", "commit") and now > deadline:
            return refuse("deadline_exceeded")
        if route == "prepare":
            if self.open_id is None:
                return Verdict(route, None, frozenset({PREPARING, PREPARED}))
            if self.open_id != checkpoint_id:
                return refuse("checkpoint_conflict")
            if self.prepare_replied:
                return Verdict(route, None, frozenset({self.phase}))  # replay
            if self.phase == PREPARING:
                return Verdict(route, None, frozenset({PREPARING, PREPARED}))
            return refuse("invalid_phase")
        if route == "renew":
            if self.open_id is None:
                return refuse("invalid_phase")
            if self.open_id != checkpoint_id:
                return refuse("checkpoint_conflict")
            return Verdict(route, None, frozenset({self.phase}))
        if route == "commit":
            if self.open_id is None:
                return refuse("invalid_phase")
            if self.open_id != checkpoint_id:
                return refuse("checkpoint_conflict")
            if self.commit_args is not None:
                if args != self.commit_args:
                    return refuse("checkpoint_conflict")
                if self.phase == COMMITTED:
                    return Verdict(route, None, frozenset({COMMITTED}))  # replay
            if self.phase != PREPARED:
                return refuse("invalid_phase")
            # restart_in_scope, "no longer ready" and a failed write leave it prepared.
            return Verdict(
                route,
                None,
                frozenset({COMMITTED}),
                frozenset({"checkpoint_error", "restart_in_scope", "invalid_phase"}),
            )
        if route == "restore":
            if self.open_id is not None:
                if self.open_id != checkpoint_id:
                    return refuse("checkpoint_conflict")
                if self.restore_args is None:
                    return refuse("invalid_phase")
                if args != self.restore_args:
                    return refuse("checkpoint_conflict")
                return Verdict(route, None, frozenset({RESTORED}))  # replay
            if now > deadline:
                return refuse("deadline_exceeded")
            return Verdict(
                route,
                None,
                frozenset({RESTORED}),
                frozenset({"invalid_checkpoint_state", "stale_attempt", "checkpoint_error"}),
            )
        if route == "resume":
            if self._done(checkpoint_id) or self.open_id is None:
                return Verdict(route, None, frozenset({self.phase}))  # idempotent
            if self.open_id != checkpoint_id:
                return refuse("checkpoint_conflict")
            return Verdict(route, None, frozenset({IDLE}))
        if route in ("retire", "forget"):
            if self.phase in OPEN:
                return refuse("invalid_phase")
            if self.phase == RESTORED and self.open_id != checkpoint_id:
                return refuse("checkpoint_conflict")
            if now > deadline:
                return refuse("deadline_exceeded")
            return Verdict(route, None, frozenset({self.phase}), frozenset({"checkpoint_error"}))
        return Verdict(route, None, frozenset({self.phase}))  # status

    def compare(self, verdict: Verdict, *, code: str | None, phase_after: str) -> str | None:
        """A divergence between the engine's answer and the verdict, or None."""
        if verdict.code is not None:
            if code != verdict.code:
                accepted = "accepted" if code is None else f"answered {code}"
                return f"{verdict.route} {accepted}; the protocol refuses it with {verdict.code}"
            if phase_after != self.phase:
                return f"refused {verdict.route} moved {self.phase} to {phase_after}"
            return None
        if code is not None:
            if code in verdict.may_fail:
                return None if phase_after == self.phase else f"failed {verdict.route} moved"
            return f"{verdict.route} refused with {code}; the protocol accepts it"
        if phase_after not in verdict.phases:
            return (
                f"{verdict.route} in {self.phase} led to {phase_after}, "
                f"the protocol says {sorted(verdict.phases)}"
            )
        return None

    # ------------------------------------------------------------- effects

    def apply(
        self,
        verdict: Verdict,
        checkpoint_id: str,
        *,
        code: str | None,
        phase_after: str,
        deadline: float,
        args: Any,
    ) -> None:
        """Move the reference state as the accepted call did."""
        route = verdict.route
        if route == "resume" and code is None:
            if self.open_id is None and not self._done(checkpoint_id):
                self._finish(checkpoint_id)  # a never-seen id is fenced too
            elif self.open_id == checkpoint_id:
                self._end()
            return
        arms = route in ("prepare", "renew", "commit") or (
            route in ("retire", "forget", "restore") and phase_after == RESTORED
        )
        if route == "commit" and verdict.code is None and self.commit_args is None:
            self.commit_args = args
        if code is not None:
            if route == "commit" and code in verdict.may_fail:
                self._arm(deadline)
            return
        if route == "prepare" and self.open_id is None:
            self.open_id = checkpoint_id
        if route == "prepare" and phase_after == PREPARED:
            self.prepare_replied = True
        if route == "restore" and self.open_id is None:
            self.open_id, self.restore_args = checkpoint_id, args
        if arms and not (route == "restore" and self.lease is not None):
            self._arm(deadline)
        self.phase = phase_after

    def expire(self, now: float) -> None:
        """A participant past its lease resumes itself."""
        if self.lease is not None and now > self.lease:
            self._end()

    def _arm(self, deadline: float) -> None:
        lease = deadline + self.lease_grace
        self.lease = lease if self.lease is None else max(self.lease, lease)

    def _end(self) -> None:
        if self.open_id is not None:
            self._finish(self.open_id)
        self.phase, self.open_id, self.lease = IDLE, None, None
        self.prepare_replied = False
        self.commit_args = self.restore_args = None

    def _finish(self, checkpoint_id: str) -> None:
        self.finished = [*self.finished, checkpoint_id][-FINISHED_KEPT:]

    def _done(self, checkpoint_id: str) -> bool:
        return checkpoint_id in self.finished
