"""Watch the real engine call by call and hold it against the reference model (``oracle``).

Every control request reaches a participant through ``Observer.deliver``
(``InProcessTransport``'s ``deliver`` hook, so faults still apply before it):
the oracle judges the call from its own state before it runs, and after it
ran the engine's answer and phase must be what the protocol says. A
divergence is recorded, not raised, so the explorer reports it with its
shortest trace.

    observer = Observer(label="i0", clock=clock, lease_grace=30.0, problems=world.oracle_problems)
    transport = InProcessTransport(cores, token=TOKEN, deliver=observer.deliver)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from envckpt.coordination.inprocess import through_json
from envckpt.participant import edge
from envckpt.participant.core import ParticipantCore

from model_check.clock import ExplorerClock
from model_check.oracle import ParticipantOracle

TOKEN = "model-check-token"


class Observer:
    """The reference state of one instance's participants, checked at every delivered call."""

    def __init__(
        self,
        *,
        label: str,
        clock: ExplorerClock,
        lease_grace: float,
        problems: list[str],
        missing: tuple[str, ...] = (),
    ) -> None:
        self.label = label
        # Servers that saved state but are not deployed in this run: the
        # protocol refuses any restore here before a request is sent.
        self.missing = missing
        self.clock = clock
        self.lease_grace = lease_grace
        self.problems = problems
        self.models: dict[str, ParticipantOracle] = {}
        # Calls still running (a prepare waiting for a boundary): their
        # phase is compared when they answer.
        self.running: dict[str, int] = {}

    def model(self, server: str) -> ParticipantOracle:
        if server not in self.models:
            self.models[server] = ParticipantOracle(lease_grace=self.lease_grace)
        return self.models[server]

    async def deliver(
        self, core: ParticipantCore, method: str, route: str, body: Mapping[str, Any] | None
    ) -> tuple[int, dict[str, Any]]:
        sent = None if body is None else through_json(body)
        if method != "POST" or not isinstance(sent, dict):
            return await edge.handle(
                core, method, route, sent, authorization=f"Bearer {TOKEN}", token=TOKEN
            )
        model = self.model(core.server_name)
        if route == "restore" and self.missing:
            self.problems.append(
                f"oracle: {self.label}/{core.server_name}: a restore was sent though "
                f"{list(self.missing)} saved state and are not deployed"
            )
        checkpoint_id = str(sent.get("checkpoint_id"))
        deadline = float(sent.get("deadline_ts", 0.0))
        args = _args(route, sent)
        verdict = model.judge(
            route, checkpoint_id, now=self.clock.now(), deadline=deadline, args=args
        )
        self.running[core.server_name] = self.running.get(core.server_name, 0) + 1
        try:
            status, reply = await edge.handle(
                core, method, route, sent, authorization=f"Bearer {TOKEN}", token=TOKEN
            )
        finally:
            self.running[core.server_name] -= 1
        error = reply.get("error") if status != 200 else None
        code = str(error.get("code")) if isinstance(error, Mapping) else None
        if status != 200 and code is None:
            code = f"HTTP {status}"
        phase_after = str(core.phase)
        problem = model.compare(verdict, code=code, phase_after=phase_after)
        if problem is not None:
            self.problems.append(
                f"oracle: {self.label}/{core.server_name} {checkpoint_id}: {problem}"
            )
            # Follow the engine from here, so one divergence is reported once.
            model.phase = phase_after
        else:
            model.apply(
                verdict,
                checkpoint_id,
                code=code,
                phase_after=phase_after,
                deadline=deadline,
                args=args,
            )
        return status, reply

    def tick(self) -> None:
        """Time passed: leases the protocol says have lapsed end (the watchdogs ran)."""
        for model in self.models.values():
            model.expire(self.clock.now())

    def compare_phases(self, cores: Mapping[str, ParticipantCore]) -> list[str]:
        """Every participant's phase is the one the reference model holds."""
        found = []
        for server, core in sorted(cores.items()):
            if self.running.get(server):
                continue
            model = self.model(server)
            if str(core.phase) != model.phase:
                found.append(
                    f"oracle: {self.label}/{server} is {core.phase}, the protocol has {model.phase}"
                )
                model.phase = str(core.phase)
        return found


def _args(route: str, body: Mapping[str, Any]) -> Any:
    """What a replay must repeat: directory and scope (commit: also ``stop``)."""
    episodes = body.get("episode_ids")
    scope = (
        None
        if episodes is None
        else sorted((str(e.get("rollout_id")), int(e.get("attempt", 0))) for e in episodes)
    )
    if route == "commit":
        return (
            body.get("checkpoint_dir"),
            None if scope is None else tuple(scope),
            bool(body.get("stop")),
        )
    if route == "restore":
        return (body.get("checkpoint_dir"), tuple(sorted(set(scope or ()))))
    return None
