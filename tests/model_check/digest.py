"""The hashed state of a world: everything that decides what can happen next.

Two paths that reach the same digest are explored once. The digest reads the
live generation's cores (phase, open checkpoint, lease, fence, finished ids,
held state, admission), adapters and facade, what waits at the gates, the
clock's timers (relative to now, so time itself never splits states), the
trainer's model, and the files on disk. Leaving something out would merge
states that differ and hide their futures; putting too much in only costs
time.

    key = digest(world)        # bytes
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from envckpt.participant.core import ParticipantCore

from model_check.world import Generation, World

_TEMP_PART = re.compile(r"-?\d*-?[0-9a-f]{32}")


def digest(world: World) -> bytes:
    return hashed(world, describe(world))


def hashed(world: World, value: object) -> bytes:
    # Each replay has its own directory: the state never depends on which.
    text = repr(value).replace(str(world.root), "<root>")
    return hashlib.blake2b(text.encode(), digest_size=16).digest()


def describe(world: World) -> tuple[Any, ...]:
    gen = world.gen
    now = gen.clock.now()
    return (
        ("generation", gen.number, world.crashes, world.faults_used, gen.done),
        ("cores", tuple(_core(core, now) for _, _, core in gen.all_cores())),
        (
            "adapters",
            tuple((iid, a.state, a._participants is not None) for iid, a in gen.adapters.items()),
        ),
        ("facade", gen.facade._active, tuple(sorted(gen.facade._resumer.unresumed.items()))),
        ("gates", _gates(gen, now)),
        ("timers", tuple(round(t - now, 6) for t in gen.clock.timers())),
        ("running", tuple(sorted(gen.running)), tuple(sorted(gen.in_flight))),
        ("model", world.model.digest()),
        ("disk", disk(world)),
        ("violations", tuple(world.violations)),
    )


def _rel(value: float | None, now: float) -> float | None:
    return None if value is None else round(value - now, 6)


def _core(core: ParticipantCore, now: float) -> tuple[Any, ...]:
    open_ = core._open
    opened: tuple[Any, ...] | None = None
    if open_ is not None:
        write = open_.commit
        commit = None
        if write is not None:
            task = write.task
            failed = task.done() and not task.cancelled() and task.exception() is not None
            commit = (write.checkpoint_id, write.args, write.aborted, task.done(), failed)
        opened = (
            open_.checkpoint_id,
            _rel(open_.lease_expires_at, now),
            open_.prepare_reply is not None,
            tuple(sorted(open_.prepared_restarts)),
            commit,
            None if open_.restore is None else open_.restore[0],
        )
    fence = core.fence
    hooks = core.hooks
    return (
        core.server_name,
        core.phase,
        opened,
        tuple(core.finished),
        fence.state(),
        tuple(sorted((e, repr(s)) for e, s in hooks.states.items())),  # type: ignore[attr-defined]
        hooks.admission_open,  # type: ignore[attr-defined]
        core.served_traffic,
    )


def _gates(gen: Generation, now: float) -> tuple[Any, ...]:
    return tuple(sorted((item.key, _rel(item.deadline, now)) for item in gen.gates.items))


def disk(world: World) -> tuple[Any, ...]:
    files = []
    if world.root.exists():
        for path in sorted(world.root.rglob("*")):
            if path.is_file():
                data = path.read_bytes()
                # Temporary names carry a pid and a uuid: the same file in every replay.
                name = _TEMP_PART.sub("*", str(path.relative_to(world.root)))
                files.append((name, hashlib.blake2b(data, digest_size=8).hexdigest()))
    return tuple(files)
