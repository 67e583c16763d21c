"""Read one participant's saved state and install it: all or nothing, in flat memory.

Two streaming passes over the records file, so memory stays flat whatever
its size (no list of every validated state is ever built):

1. ``verify_in_thread`` (a worker thread; nothing is installed): every line
   read once and hashed, its envelope parsed, duplicates refused, every
   in-scope state validated by the kind's hooks and dropped; the count and
   digest checked at the end. Any refusal is ``invalid_checkpoint_state``
   and nothing has been installed.
2. ``install_in_batches`` (the core, under its lock, admission closed): the
   same file read again (not hashed again; a file that is no longer the one
   verified is refused), each in-scope state validated again (the value
   ``validate`` returns is what ``install`` takes, so it cannot be kept from
   the first pass without holding everything) and handed to
   ``hooks.install`` in batches of about ``BATCH_BYTES`` of records; the
   reading and validating happen in a worker thread, the installing on the
   event loop, as hooks expect.

Both passes run on one thread of the restore's own: the C allocator keeps
an arena per thread, and decoding on whichever pool thread is free would
grow several arenas to the size of a batch (about +10 MiB of resident
memory for 200 MB of records).

The second pass fails only if the file changed after the first, a read
fails, ``validate`` is not deterministic or ``install`` raises: what it had
installed is then handed to ``hooks.retire`` (state freed, as the
coordinator's cleanup of a failed restore would), and the error is raised.

    source = await verify_in_thread(checkpoint_dir, hooks=hooks, kind=kind,
                                    instance=instance, scope=scope)
    installed = await install_in_batches(source, hooks)   # next attempts, file order
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Generator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from envckpt.episodes import EnvironmentEpisode
from envckpt.errors import CorruptCheckpoint, ParticipantError
from envckpt.participant import store
from envckpt.participant.hooks import StateHooks
from envckpt.protocol import ErrorCode

# Records handed to one ``hooks.install`` call: about this many bytes of JSON
# (at least one record). Small enough that a batch's decoded states are a few
# MiB, large enough that the thread hops between batches cost nothing.
BATCH_BYTES = 1024 * 1024
# What a refused record or state raises; all of it is invalid_checkpoint_state.
_REFUSALS = (CorruptCheckpoint, ValueError, KeyError, TypeError, OSError)

RestoreBatch = list[tuple[EnvironmentEpisode, object]]
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class VerifiedCheckpoint:
    """A checkpoint the first pass accepted: where it is, what it is, which file was read."""

    checkpoint_dir: Path
    manifest: store.Manifest
    identity: store.FileIdentity
    scope: frozenset[EnvironmentEpisode]
    # The restore's own thread (see the module docstring); its worker exits
    # once this is collected, should the install never run.
    thread: ThreadPoolExecutor = field(compare=False, repr=False)
    # Read NaN and the infinities as Gym writes them (json_state.NonFinite.GYM).
    allow_nan: bool = False

    @property
    def checkpoint_id(self) -> str:
        return self.manifest.checkpoint_id


def verify(
    checkpoint_dir: Path,
    *,
    hooks: StateHooks,
    kind: str,
    instance: str,
    scope: frozenset[EnvironmentEpisode],
    thread: ThreadPoolExecutor,
    allow_nan: bool = False,
) -> VerifiedCheckpoint:
    """The first pass: everything checked, every in-scope state validated; install nothing.

    Raises ``CorruptCheckpoint``, ``OSError`` or the ``ValueError`` /
    ``KeyError`` / ``TypeError`` of a record or state the hooks refuse.
    """
    manifest = store.read_manifest(checkpoint_dir, kind=kind, instance=instance)
    seen: set[EnvironmentEpisode] = set()

    def check(record: dict[str, Any]) -> None:
        # Gym's envelope, or envckpt's earlier {capture_key, state}.
        episode, state = store.from_record(record)
        if episode in seen:
            raise ValueError(f"two records for {episode.capture_key}")
        seen.add(episode)
        if episode in scope:
            hooks.validate(episode, state)

    identity = store.verify_records(checkpoint_dir, manifest, visit=check, allow_nan=allow_nan)
    return VerifiedCheckpoint(checkpoint_dir, manifest, identity, scope, thread, allow_nan)


def _batches(source: VerifiedCheckpoint, hooks: StateHooks) -> Generator[RestoreBatch, None, None]:
    """The second pass: validated next attempts, in batches of about BATCH_BYTES."""
    batch: RestoreBatch = []
    size = 0
    records = store.reread_records(
        source.checkpoint_dir, source.manifest, source.identity, allow_nan=source.allow_nan
    )
    for record, line_bytes in records:
        episode, state = store.from_record(record)
        if episode not in source.scope:
            continue
        batch.append((episode.next_attempt(), hooks.validate(episode, state)))
        size += line_bytes
        if size >= BATCH_BYTES:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


async def verify_in_thread(
    checkpoint_dir: Path,
    *,
    hooks: StateHooks,
    kind: str,
    instance: str,
    scope: frozenset[EnvironmentEpisode],
    allow_nan: bool = False,
) -> VerifiedCheckpoint:
    """``verify`` in the restore's own thread; any refusal is ``invalid_checkpoint_state``."""
    thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="envckpt-restore")

    def work() -> VerifiedCheckpoint:
        return verify(
            checkpoint_dir,
            hooks=hooks,
            kind=kind,
            instance=instance,
            scope=scope,
            thread=thread,
            allow_nan=allow_nan,
        )

    try:
        return await _on(thread, work)
    except _REFUSALS as error:
        thread.shutdown(wait=False)
        raise ParticipantError(ErrorCode.INVALID_CHECKPOINT_STATE, str(error)) from error
    except BaseException:
        thread.shutdown(wait=False)
        raise


async def _on(thread: ThreadPoolExecutor, work: Callable[[], T]) -> T:
    return await asyncio.get_running_loop().run_in_executor(thread, work)


async def install_in_batches(
    source: VerifiedCheckpoint, hooks: StateHooks
) -> list[EnvironmentEpisode]:
    """The second pass: install every in-scope state as its next attempt; return those.

    Batches are read and validated in a worker thread and installed here, on
    the event loop. A refused record or state is ``invalid_checkpoint_state``;
    an error of ``hooks.install`` goes on as it is. Either way, what was
    installed so far is retired through the hooks first.
    """
    installed: list[EnvironmentEpisode] = []
    batches = _batches(source, hooks)
    try:
        while (batch := await _next_batch(source.thread, batches)) is not None:
            # Counted before the call: an install that raises may have kept part of it.
            installed.extend(episode for episode, _ in batch)
            hooks.install(batch)
    except BaseException:
        # Still running in its thread if we were cancelled: it closes its
        # file when it is collected.
        with contextlib.suppress(ValueError):
            batches.close()
        if installed:
            # Nothing has run on them (the core holds its lock, admission is
            # closed): freeing them undoes the install.
            with contextlib.suppress(Exception):
                await hooks.retire(tuple(installed))
        raise
    finally:
        source.thread.shutdown(wait=False)
    return installed


async def _next_batch(
    thread: ThreadPoolExecutor, batches: Generator[RestoreBatch, None, None]
) -> RestoreBatch | None:
    try:
        return await _on(thread, lambda: next(batches, None))
    except _REFUSALS as error:
        raise ParticipantError(ErrorCode.INVALID_CHECKPOINT_STATE, str(error)) from error
