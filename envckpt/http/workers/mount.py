"""Mount a participant on an app that runs in several uvicorn workers.

The multi-worker counterpart of ``mount_participant``: the same control
routes, token, confinement and lease watchdog, but each request is run by
every worker (``group.WorkerGroup``), data requests go to the worker that
holds their rollout (``affinity.EpisodeAffinity``), and the app's lifespan
claims a slot, serves the private socket and registers the worker::

    # the launcher, once: a worker directory, handed down with the worker count
    directory = WorkerDirectory.create()
    os.environ.update(directory.environment(workers=4))
    uvicorn.run("my.module:app_factory", factory=True, workers=4, ...)

    # each worker's app factory
    group = mount_worker_participant(app, core, token=token, checkpoint_root=root)

With ``ENVCKPT_WORKERS`` at 1 (or unset, when ``expected`` is not given)
the participant is mounted as in one process.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI

from envckpt.http.bodies import DATA_MAX_BODY_BYTES
from envckpt.http.routes import DEFAULT_LEASE_CHECK_SECONDS, mount_participant
from envckpt.http.workers.affinity import EpisodeAffinity
from envckpt.http.workers.group import WorkerGroup
from envckpt.http.workers.slots import WorkerDirectory
from envckpt.participant.core import ParticipantCore


def mount_worker_participant(
    app: FastAPI,
    core: ParticipantCore,
    *,
    token: str,
    checkpoint_root: str | os.PathLike[str] | None = None,
    directory: str | os.PathLike[str] | None = None,
    expected: int | None = None,
    lease_check_seconds: float | None = DEFAULT_LEASE_CHECK_SECONDS,
    data_max_body_bytes: int = DATA_MAX_BODY_BYTES,
) -> WorkerGroup | None:
    """Install ``core``'s control routes for a server of ``expected`` workers.

    ``directory`` and ``expected`` default to the launcher's
    ``ENVCKPT_WORKER_DIR`` and ``ENVCKPT_WORKERS``. Returns the worker group,
    or None for a one-worker server (mounted exactly as ``mount_participant``).
    """
    if directory is None or expected is None:
        path, count = WorkerDirectory.from_environment()
        directory = path if directory is None else directory
        expected = count if expected is None else expected
    # One worker has no siblings: no group, the core's own edge answers.
    group = (
        None
        if expected == 1
        else WorkerGroup(core, token=token, directory=WorkerDirectory(directory), expected=expected)
    )
    mount_participant(
        app,
        core,
        token=token,
        checkpoint_root=checkpoint_root,
        lease_check_seconds=lease_check_seconds,
        dispatch=None if group is None else group.dispatch,
    )
    if group is None:
        return None
    # Outermost, so a forwarded request reaches the owner exactly as it arrived.
    app.add_middleware(EpisodeAffinity, group=group, max_body_bytes=data_max_body_bytes)
    inner = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(lifespan_app: Any) -> AsyncIterator[Any]:
        async with inner(lifespan_app) as state:
            # The app is up: now it may serve siblings' forwarded requests.
            await group.start(app)
            try:
                yield state
            finally:
                await group.stop()

    app.router.lifespan_context = lifespan
    return group
