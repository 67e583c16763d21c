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

Per episode, neither pass keeps an object: the scope is a ``ScopeTable``
(sorted ids and attempts), what was seen or installed is a byte per scope
position, and an installed attempt names the table's rollout id string, not
the one decoded from its record (which goes with the record). Only records
outside the scope are remembered one by one (to refuse their duplicates).

Both passes run on one thread of the restore's own: the C allocator keeps
an arena per thread, and decoding on whichever pool thread is free would
grow several arenas to the size of a batch (about +10 MiB of resident
memory for 200 MB of records).

The second pass fails only if the file changed after the first, a read
fails, ``validate`` is not deterministic or ``install`` raises: what it had
installed is then handed to ``hooks.retire`` (state freed, as the
coordinator's cleanup of a failed restore would), and the error is raised.

    source = await verify_in_thread(checkpoint_dir, hooks=hooks, kind=kind,
                                    instance=instance, scope=ScopeTable.of(episodes))
    installed = await install_in_batches(source, hooks)   # installed[i]: 1 if scope[i]'s
                                                          # next attempt was installed
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
from envckpt.participant.scope_table import ScopeTable
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
    scope: ScopeTable
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
    scope: ScopeTable,
    thread: ThreadPoolExecutor,
    allow_nan: bool = False,
) -> VerifiedCheckpoint:
    """The first pass: everything checked, every in-scope state validated; install nothing.

    Raises ``CorruptCheckpoint``, ``OSError`` or the ``ValueError`` /
    ``KeyError`` / ``TypeError`` of a record or state the hooks refuse.
    """
    manifest = store.read_manifest(checkpoint_dir, kind=kind, instance=instance)
    seen = bytearray(len(scope))  # in scope: a byte per position
    seen_outside: set[EnvironmentEpisode] = set()
    at = -1

    def check(record: dict[str, Any]) -> None:
        nonlocal at
        # Gym's envelope, or envckpt's earlier {capture_key, state}.
        episode, state = store.from_record(record)
        found = scope.index(episode.rollout_id, episode.attempt, hint=at + 1)
        if found < 0:
            if episode in seen_outside:
                raise ValueError(f"two records for {episode.capture_key}")
            seen_outside.add(episode)
            return
        if seen[found]:
            raise ValueError(f"two records for {episode.capture_key}")
        seen[found] = 1
        at = found
        hooks.validate(episode, state)

    identity = store.verify_records(checkpoint_dir, manifest, visit=check, allow_nan=allow_nan)
    return VerifiedCheckpoint(checkpoint_dir, manifest, identity, scope, thread, allow_nan)


def _batches(
    source: VerifiedCheckpoint, hooks: StateHooks
) -> Generator[tuple[RestoreBatch, list[int]], None, None]:
    """The second pass: validated next attempts, in batches of about BATCH_BYTES,
    each with the scope positions of its episodes."""
    batch: RestoreBatch = []
    positions: list[int] = []
    size = 0
    scope, at = source.scope, -1
    records = store.reread_records(
        source.checkpoint_dir, source.manifest, source.identity, allow_nan=source.allow_nan
    )
    for record, line_bytes in records:
        episode, state = store.from_record(record)
        found = scope.index(episode.rollout_id, episode.attempt, hint=at + 1)
        if found < 0:
            continue
        at = found
        # The table's id string: the record's own goes with the record.
        next_attempt = EnvironmentEpisode(scope.rollout_ids[at], episode.attempt + 1)
        batch.append((next_attempt, hooks.validate(episode, state)))
        positions.append(at)
        size += line_bytes
        if size >= BATCH_BYTES:
            yield batch, positions
            batch, positions, size = [], [], 0
    if batch:
        yield batch, positions


async def verify_in_thread(
    checkpoint_dir: Path,
    *,
    hooks: StateHooks,
    kind: str,
    instance: str,
    scope: ScopeTable,
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


async def install_in_batches(source: VerifiedCheckpoint, hooks: StateHooks) -> bytearray:
    """The second pass: install every in-scope state as its next attempt.

    Returns a byte per position of ``source.scope``: 1 where that episode's
    next attempt was installed (its record is in the file), else 0.
    Batches are read and validated in a worker thread and installed here, on
    the event loop. A refused record or state is ``invalid_checkpoint_state``;
    an error of ``hooks.install`` goes on as it is. Either way, what was
    installed so far is retired through the hooks first.
    """
    installed = bytearray(len(source.scope))
    batches = _batches(source, hooks)
    try:
        while (next_batch := await _next_batch(source.thread, batches)) is not None:
            batch, positions = next_batch
            # Marked before the call: an install that raises may have kept part of it.
            for at in positions:
                installed[at] = 1
            hooks.install(batch)
            # Its states are the hooks' now: not held while the next is read.
            del batch, next_batch
    except BaseException:
        # Still running in its thread if we were cancelled: it closes its
        # file when it is collected.
        with contextlib.suppress(ValueError):
            batches.close()
        if any(installed):
            # Nothing has run on them (the core holds its lock, admission is
            # closed): freeing them undoes the install.
            with contextlib.suppress(Exception):
                await hooks.retire(tuple(source.scope.next_attempts(installed)))
        raise
    finally:
        source.thread.shutdown(wait=False)
    return installed


async def _next_batch(
    thread: ThreadPoolExecutor, batches: Generator[tuple[RestoreBatch, list[int]], None, None]
) -> tuple[RestoreBatch, list[int]] | None:
    try:
        return await _on(thread, lambda: next(batches, None))
    except _REFUSALS as error:
        raise ParticipantError(ErrorCode.INVALID_CHECKPOINT_STATE, str(error)) from error
