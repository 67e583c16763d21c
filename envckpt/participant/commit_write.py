"""One participant commit's write: export once, write records and manifest, or nothing.

The participant core starts each commit's write as its own task
(``CommitWrite``), so a commit whose caller's deadline passes keeps writing
and a retry collects the same result; resume sets ``aborted`` and a write
that has not linked its manifest yet never does. ``export_and_write`` is the
work of that task, up to the published manifest; the core does the phase
bookkeeping afterwards.

    write = CommitWrite(checkpoint_id, args)
    write.task = asyncio.create_task(counted(counters, export_and_write(write, hooks=..., ...)))
    reply = await write.task          # or ParticipantError (stale, invalid, error)

Where the encoded records go is the ``Publisher``'s business: ``write_here``
(the default) writes the records file and links the manifest; ``hand_over``
writes nothing and returns the encoded records instead, for a worker of a
multi-worker server whose records the answering worker merges into the
participant's one records file (``envckpt.http.workers``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envckpt.episodes import EnvironmentEpisode, capture_keys, sorted_episodes
from envckpt.errors import CorruptCheckpoint, ParticipantError
from envckpt.participant import store
from envckpt.participant.counters import ParticipantCounters
from envckpt.participant.hooks import StateHooks
from envckpt.participant.json_state import NonFinite, unencodable_error
from envckpt.protocol import ErrorCode, Kind, Phase

# (checkpoint_dir, the scope in episode order or None for everything, stop):
# what a replayed commit must repeat exactly.
CommitArgs = tuple[str, tuple[EnvironmentEpisode, ...] | None, bool]


class _WriteAborted(Exception):
    """Raised inside a commit write that resume stopped before publishing."""


@dataclass(slots=True)
class CommitWrite:
    """One commit's write task and the flag resume sets to stop it."""

    checkpoint_id: str
    args: CommitArgs
    aborted: bool = False
    # Set by ``start`` right after construction: the work checks this
    # write's own ``aborted`` flag, so it needs the write first.
    task: asyncio.Task[dict[str, Any]] = field(init=False)

    def start(self, work: Coroutine[Any, Any, dict[str, Any]]) -> None:
        """Run ``work`` as this write's task."""
        self.task = asyncio.create_task(work)
        # Nobody may collect a write that resume stopped: retrieve its
        # outcome so asyncio does not warn about an unretrieved error.
        self.task.add_done_callback(_retrieve_outcome)

    def failed(self) -> bool:
        """The write ended with an error (so nothing was published)."""
        task = self.task
        return task.done() and not task.cancelled() and task.exception() is not None


@dataclass(frozen=True, slots=True)
class EncodedRecords:
    """The encoded records of one commit, for a ``Publisher``.

    ``keys[i]`` is the capture key of ``lines[i]``. ``before_publish`` must run
    right before anything becomes visible: it raises if the commit was aborted.
    """

    checkpoint_dir: Path
    kind: Kind
    instance: str
    checkpoint_id: str
    keys: list[str]
    lines: Iterable[bytes]
    before_publish: Callable[[], None]


# Makes a commit's records durable (or hands them on); returns reply fields.
# Runs in a worker thread.
Publisher = Callable[[EncodedRecords], dict[str, Any]]


def write_here(records: EncodedRecords) -> dict[str, Any]:
    """The one-process participant's way: records file, then the manifest, here.

    The keys are not needed: the records carry their own episode ids.
    """
    manifest = store.write_checkpoint(
        records.checkpoint_dir,
        kind=records.kind,
        instance=records.instance,
        checkpoint_id=records.checkpoint_id,
        lines=records.lines,
        before_publish=records.before_publish,
    )
    return {"manifest": manifest.to_json()}


def hand_over(records: EncodedRecords) -> dict[str, Any]:
    """A worker's share of a multi-worker commit: ``records`` as [capture key, line] pairs.

    Nothing is written here: the worker that answers the commit merges every
    worker's share into the participant's one records file and manifest. The
    share is still checked against an abort, like a write before its manifest.
    """
    pairs = zip(records.keys, records.lines, strict=True)
    share = [[key, line.decode("utf-8")] for key, line in pairs]
    records.before_publish()
    return {"records": share}


def _retrieve_outcome(task: asyncio.Task[Any]) -> None:
    if not task.cancelled():
        task.exception()


def _stale(checkpoint_id: str) -> ParticipantError:
    return ParticipantError(
        ErrorCode.STALE_CHECKPOINT, f"commit {checkpoint_id} was aborted before publishing"
    )


async def counted(
    counters: ParticipantCounters | None, write: Awaitable[dict[str, Any]]
) -> dict[str, Any]:
    """The reply of ``write`` (an ``export_and_write``), its outcome told to ``counters``:
    a failure, or the records written and the seconds it took."""
    started = time.perf_counter()
    try:
        reply = await write
    except BaseException:
        if counters is not None:
            counters.commit_failures += 1
        raise
    if counters is not None:
        # A worker's share of a multi-worker commit carries its records, not a manifest.
        manifest = reply.get("manifest")
        records = len(reply["records"]) if manifest is None else manifest["record_count"]
        counters.committed(records=records, seconds=time.perf_counter() - started)
    return reply


async def export_and_write(
    write: CommitWrite,
    *,
    hooks: StateHooks,
    kind: Kind,
    instance: str,
    checkpoint_dir: Path,
    scope: tuple[EnvironmentEpisode, ...] | None,
    current: Callable[[Iterable[EnvironmentEpisode]], frozenset[EnvironmentEpisode]],
    before_publish: Sequence[Callable[[], None]],
    server: str = "",
    non_finite: NonFinite = NonFinite.REFUSE,
    publish: Publisher = write_here,
) -> dict[str, Any]:
    """Export the scope once, write records and manifest; return the commit reply.

    No scope means everything held. Only attempts that may still act
    (``current``) are exported: a retired or superseded attempt's state
    never leaves the process. State JSON cannot carry fails the commit with
    ``checkpoint_error`` naming ``server``, the episode, the session and the
    key (``json_state.UnencodableState``, its cause); with ``non_finite``
    ``gym`` NaN and the infinities are written as Gym writes them. ``publish``
    makes the records durable (``write_here``) or hands them to the worker
    that answers a multi-worker commit (``hand_over``). ``counted`` around it
    lets the participant's counters hear the outcome.
    """
    checkpoint_id = write.checkpoint_id
    if write.aborted:
        # Resumed before this task first ran: leave no files behind at all.
        raise _stale(checkpoint_id)
    held_or_named = hooks.live_episodes() if scope is None else scope
    wanted = current(held_or_named)
    # Admission stays closed until this write ends or is aborted (and an
    # aborted write never publishes), so the exported state stays quiet
    # while the worker thread serialises it.
    exported_states = list(hooks.export(wanted))
    exported = sorted_episodes([episode for episode, _ in exported_states])
    extras = hooks.commit_extras(exported)
    keys = capture_keys(exported)
    try:
        # Gym's record envelope; the manifest keeps to Gym's fields. Checked
        # here, before any file exists; encoded in the writer's thread.
        store.check_envelopes(exported_states)
    except ValueError as error:
        raise ParticipantError(ErrorCode.CHECKPOINT_ERROR, f"export failed: {error}") from error
    allow_nan = non_finite is NonFinite.GYM
    lines = store.envelope_lines(exported_states, allow_nan=allow_nan)

    def last_step_before_publish() -> None:
        # Read now, not when the write started: a test may add a crash meanwhile.
        for hook in list(before_publish):
            hook()
        # Checked last, right before the manifest link: a resume during a
        # slow pre-publish step must still stop the write. The flag is this
        # write's own, so a newer checkpoint's write cannot vouch for it.
        if write.aborted:
            raise _WriteAborted(checkpoint_id)

    try:
        records = EncodedRecords(
            checkpoint_dir,
            kind=kind,
            instance=instance,
            checkpoint_id=checkpoint_id,
            keys=[episode.capture_key for episode, _ in exported_states],
            lines=lines,
            before_publish=last_step_before_publish,
        )
        published = await asyncio.to_thread(publish, records)
    except _WriteAborted:
        raise _stale(checkpoint_id) from None
    except CorruptCheckpoint as error:
        raise ParticipantError(ErrorCode.INVALID_CHECKPOINT_STATE, str(error)) from error
    except OSError as error:
        raise ParticipantError(ErrorCode.CHECKPOINT_ERROR, f"writing failed: {error}") from error
    except (ValueError, TypeError) as error:
        # The encoder refused a state (nothing was published): say whose, and where.
        named = unencodable_error(server=server, pairs=exported_states, allow_nan=allow_nan)
        cause: Exception = named if named is not None else error
        detail = str(named) if named is not None else f"export failed: {error}"
        raise ParticipantError(ErrorCode.CHECKPOINT_ERROR, detail) from cause
    return {
        "phase": Phase.COMMITTED,
        "checkpoint_id": checkpoint_id,
        **published,
        "episode_ids": keys,
        **extras,
    }
