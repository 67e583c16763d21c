"""100k Gym instances in one trainer: building the facade, then discovering every instance.

* register: the trainer-side objects for N instances, timed together: a
  ``GymCheckpointInstance``, a ``Coordinator``, a ``GymCheckpointAdapter`` and
  a ``LocalInstance`` per instance, then one ``GymEnvironmentCheckpoint`` over
  all of them. Each coordinator's transport (the stand-in for the wire, an
  ``InProcessTransport``) is built beforehand, untimed.
* discover: ``GymEnvironmentCheckpoint.check_startup()``: every instance
  discovers its three participants (``GET status`` through the participant
  edge, in process) and fires its lifecycle machine.

The participants live in this process only because the wire is in-process;
in a deployment they are other processes, so instances share a pool of
``POOL`` participant trios here (a status call does the same work whichever
trio answers it) and the trainer's heap stays what a trainer's would be.
Transition logging is filtered (off) while this runs; ``logging_overhead``
measures it on.

``freeze`` follows the guidance for a trainer of that size (docs/integration.md,
"Very many instances"):
``gc.freeze()`` what startup built before building the facade, and the
facade once built, so the collector stops walking millions of objects that
live as long as the process (at 100k instances a full collection walks 1.6
million). Without it, both figures include those collections.

Beside them, ``machines(n)`` times what the binding exists for: n models of
the instance lifecycle made with ``bind(table).new`` and fired once, against
``transitions.Machine.add_model`` (whose membership check makes n models
cost O(n^2)).

    figures = run(count=100_000)     # {"register_seconds", "discover_seconds", "..._cpu_seconds"}
    figures = run(count=100_000, freeze=False)
    bound, added = machines(10_000)  # seconds
"""

from __future__ import annotations

import asyncio
import gc
import time

from transitions import Machine

from bench.envckpt_app import envckpt_core
from envckpt.coordination.coordinator import Coordinator
from envckpt.coordination.inprocess import InProcessTransport
from envckpt.facade.checkpoint import GymEnvironmentCheckpoint
from envckpt.facade.instances import LocalInstance
from envckpt.gym.adapter import GymCheckpointAdapter
from envckpt.gym.instance import GymCheckpointInstance
from envckpt.machines.binding import bind
from envckpt.machines.table import STAYS
from envckpt.machines.tables import INSTANCE_LIFECYCLE

TOKEN = "bench-token-0123456789"
POOL = 100
PARTICIPANTS = (("policy", "model"), ("agent", "agent"), ("resources", "resources"))


def _transports(count: int) -> list[InProcessTransport]:
    trios = [
        {name: envckpt_core(server_name=name, kind=kind, states={}) for name, kind in PARTICIPANTS}
        for _ in range(min(POOL, count))
    ]
    return [InProcessTransport(trios[index % len(trios)], token=TOKEN) for index in range(count)]


def register(transports: list[InProcessTransport]) -> GymEnvironmentCheckpoint:
    """The facade over one adapter per transport, as a trainer builds it."""
    instances = [
        LocalInstance(
            GymCheckpointAdapter(
                instance=GymCheckpointInstance("bench", index),
                coordination=Coordinator(transport),
            )
        )
        for index, transport in enumerate(transports)
    ]
    return GymEnvironmentCheckpoint(instances)


async def _measure(count: int, *, freeze: bool) -> dict[str, float]:
    transports = _transports(count)
    gc.collect()
    if freeze:
        gc.freeze()
    try:
        start, cpu_start = time.perf_counter(), time.process_time()
        facade = register(transports)
        registered, cpu_registered = time.perf_counter(), time.process_time()
        if freeze:
            gc.freeze()
        discovering, cpu_discovering = time.perf_counter(), time.process_time()
        await facade.check_startup()
        discovered, cpu_discovered = time.perf_counter(), time.process_time()
    finally:
        gc.unfreeze()
    # CPU beside wall: on a shared machine the wall figures include the time
    # this process waited for a core.
    return {
        "register_seconds": registered - start,
        "discover_seconds": discovered - discovering,
        "register_cpu_seconds": cpu_registered - cpu_start,
        "discover_cpu_seconds": cpu_discovered - cpu_discovering,
    }


def run(count: int, *, freeze: bool = True) -> dict[str, float]:
    """Register then discover ``count`` instances on a fresh event loop."""
    return asyncio.run(_measure(count, freeze=freeze))


class _Model:
    """A plain model, as a ``transitions`` user registers it."""


def machines(count: int) -> tuple[float, float]:
    """Seconds to make and fire ``count`` lifecycle models: the binding, then add_model."""
    lifecycle = bind(INSTANCE_LIFECYCLE)
    start = time.perf_counter()
    for index in range(count):
        lifecycle.fire(lifecycle.new(f"bench/replica-{index}"), "discover")
    bound = time.perf_counter() - start
    table = INSTANCE_LIFECYCLE
    machine = Machine(
        model=None,
        states=[str(state) for state in table.states],
        initial=str(table.initial),
        auto_transitions=False,
    )
    for row in table.rows:
        # "=" is transitions' own spelling of a row that stays in its source.
        dest = "=" if row.dest is STAYS else str(row.dest)
        machine.add_transition(row.trigger, [str(source) for source in row.sources], dest)
    start = time.perf_counter()
    for _ in range(count):
        model = _Model()
        machine.add_model(model)
        model.discover()  # type: ignore[attr-defined]
    return bound, time.perf_counter() - start
