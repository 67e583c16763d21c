"""A participant's lease running out in each phase a checkpoint is open in, over real HTTP.

Every test drives ``Deployment(http=True)`` (``helpers.dict_deployment``):
each control call crosses uvicorn, the FastAPI routes and the HTTP client to
participant cores these tests also read. The participant machine's
``preparing``, ``prepared`` and ``committed`` --expire--> ``idle`` rows
(``restored`` is ``test_rows_over_http.py``'s) are fired here by the first
call past the lease, so ``make verify``'s transition coverage counts them as
exercised over HTTP. After the expiry the checkpoint id has finished
everywhere: a repeat of it is refused, and the coordinator's abort is
idempotent.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from structlog.testing import capture_logs

from envckpt.episodes import EnvironmentEpisode
from envckpt.gym.adapter import GymCheckpointAdapter
from envckpt.protocol import Phase

from helpers.dict_deployment import Deployment, LoopbackHttp, discovered, far, pass_every_lease

E1 = EnvironmentEpisode("r1", 0)
E2 = EnvironmentEpisode("r2", 0)
pytestmark = pytest.mark.usefixtures("close_loopback_servers")


async def open_checkpoint(
    deployment: Deployment, target: Phase, directory: Path
) -> GymCheckpointAdapter:
    """c1 open on every participant; ``tools`` is left in ``target``, the others prepared
    (or committed, for ``committed``)."""
    await deployment.start(E1, turn=2)
    adapter = await discovered(deployment)
    if target is Phase.PREPARING:
        # E2 still running on tools: its prepare reports a blocker and stays preparing.
        async with deployment.cores["tools"].admit(E2):
            blocked = await adapter.prepare("c1", deadline_ts=far(deployment))
        assert blocked.blockers() == {"tools": ("r2",)}
        return adapter
    assert (await adapter.prepare("c1", deadline_ts=far(deployment))).prepared
    if target is Phase.COMMITTED:
        summary = await adapter.commit("c1", directory, [E1], deadline_ts=far(deployment))
        assert summary.exported_episodes == (E1,)
    return adapter


@pytest.mark.parametrize("phase", [Phase.PREPARING, Phase.PREPARED, Phase.COMMITTED])
async def test_the_first_call_past_the_lease_resumes_the_participant(
    phase: Phase, tmp_path: Path
) -> None:
    """Each participant goes from its open phase to idle, admission reopened, c1 finished."""
    deployment = Deployment(http=True)
    adapter = await open_checkpoint(deployment, phase, tmp_path)
    tools = deployment.cores["tools"]
    assert tools.phase == phase and tools.checkpoint_id == "c1"
    opened = {name: core.phase for name, core in deployment.cores.items()}
    assert all(core.lease_expires_at is not None for core in deployment.cores.values())
    assert not any(hooks.admission_open for hooks in deployment.hooks.values())

    pass_every_lease(deployment)
    with capture_logs() as logs:
        for name in deployment.cores:
            reply = await deployment.transport.request(name, "GET", "status", None, timeout=30)
            assert reply.status == 200
            assert reply.body["phase"] == "idle" and reply.body["checkpoint_id"] is None
    expired = sorted(
        (e["server"], e["source"], e["dest"])
        for e in logs
        if e.get("machine") == "participant_phases" and e["trigger"] == "expire"
    )
    assert expired == sorted((name, str(opened[name]), "idle") for name in deployment.cores)
    assert all(hooks.admission_open for hooks in deployment.hooks.values())
    # The state the episode reached is kept; nothing was lost with the lease.
    assert deployment.hooks["agent"].state[E1] == {"turn": 2}

    # c1 has finished on the participant: a late prepare of it is refused, not reopened.
    late = await deployment.transport.request(
        "tools",
        "POST",
        "prepare",
        {"checkpoint_id": "c1", "deadline_ts": far(deployment)},
        timeout=30,
    )
    assert late.status == 409 and late.body["error"]["code"] == "stale_checkpoint"
    assert tools.phase == "idle"
    # The coordinator's abort finds nothing open: idempotent, and the instance resumes.
    await adapter.resume("c1", deadline_ts=far(deployment))
    assert adapter.state == "resumed"
    assert LoopbackHttp.delivered > 0
