"""The recovery ledger: the trainer's record of every rollout it has not let go of.

One entry per rollout: its current attempt, owning Gym instance, status and
the staging keys of the data rows it wrote. Metadata only; the rows live in
the data plane. Every mutator takes a cut from the data-plane barrier and
checks it first, so the ledger saved under a checkpoint cut matches the data
plane copied under the same cut.

Normal running (each call inside ``async with barrier.mutation() as cut``)::

    ledger.reserve(cut, rollout_id, instance_id)     # attempt 0, reserved
    ledger.dispatch(cut, rollout_id)                 # about to send it
    ledger.add_staging_keys(cut, rollout_id, keys)
    ledger.seal(cut, rollout_id)                     # finished, result committed
    # or: ledger.fail(cut, rollout_id)               # attempt dropped on its instance
    #     ledger.mint_next_attempt(cut, rollout_id)  # re-dispatch as attempt + 1
    #     ledger.abandon(cut, rollout_id)            # give the rollout up

During a rollout snapshot the facade reads it as a ``RolloutInventory``::

    ledger.dropped_attempts(instance)                # retired before prepare
    ledger.retired(instance, episodes)
    ledger.inventory(instance)                       # commit scope
    async with barrier.checkpoint() as cut:
        await ledger.verify_against_cut(cut, contents)
        ledger.save(tmp / "ledger.json")

Once dropped attempts are retired, finished rollouts can be forgotten::

    ids = ledger.forgettable()
    await environment.forget(ids)                    # outside any section
    async with barrier.mutation() as cut:
        ledger.forgotten(cut, ids)

At restore (after the data plane, inside ``env_checkpoint.restored``)::

    ledger = RecoveryLedger.load(snapshot / "ledger.json", data_plane=plane)
    async with barrier.mutation() as cut:
        plan = ledger.prepare_for_restart(cut, restored)
        plane.clear_orphans(cut, keep=plan.keep_staging_keys)
        for entry in plan.abandoned:                 # restart these from their task
            ledger.restart_from_task(cut, entry.rollout_id)
    for entry in ledger.redispatch_order():          # restored ones first,
        ...                                          # each to entry.instance_id

Rollouts ``prepare_for_restart`` abandons are not restarted by the ledger
itself: the plan lists them, and the trainer either calls
``restart_from_task`` (a fresh attempt, higher than any used before, so a
stale one can never be mistaken for it) or leaves them abandoned.

``retired`` is the one mutator without a cut: the ``RolloutInventory``
protocol fixes its signature, and it only updates retire bookkeeping.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

from envckpt import checksummed
from envckpt.episodes import EnvironmentEpisode, sorted_episodes
from envckpt.fsutil import atomic_write_bytes
from envckpt.interfaces import MutationCut, RestoredEnvironmentRollouts
from envckpt.inventory import SnapshotContents, verify_contents
from envckpt.machines.binding import bind
from envckpt.machines.tables import KEEPS_ROWS, ROLLOUT_LEDGER, UNFINISHED, LedgerStatus
from envckpt.trainer.ledger_entry import (
    LedgerCorrupt,
    LedgerEntry,
    LedgerError,
    RestartPlan,
    RestoreMismatch,
    StagingRowSource,
    dropped_to_json,
    parse_dropped_attempt,
    restore_mismatches,
)

KIND = "envckpt.ledger"
SCHEMA_VERSION = 1

# Every status change of an entry is a fired row of this table.
_STATUS = bind(ROLLOUT_LEDGER)


class RecoveryLedger:
    """Every rollout the trainer holds, by rollout id; a ``RolloutInventory``.

    Use it from one event loop: methods do not await between checking the cut
    and changing state, so the barrier's sections are the only locking needed.
    """

    def __init__(self, *, data_plane: StagingRowSource | None = None) -> None:
        self._entries: dict[str, LedgerEntry] = {}
        self._by_instance: dict[str, set[str]] = {}
        self._dropped: dict[str, set[EnvironmentEpisode]] = {}
        self._data_plane = data_plane

    def attach_data_plane(self, data_plane: StagingRowSource) -> None:
        """The data plane snapshots check staging keys against (a loaded ledger has none)."""
        self._data_plane = data_plane

    # ---- reading -------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, rollout_id: object) -> bool:
        return rollout_id in self._entries

    def entry(self, rollout_id: str) -> LedgerEntry:
        """The rollout's entry; ``LedgerError`` if the ledger does not hold it."""
        entry = self._entries.get(rollout_id)
        if entry is None:
            raise LedgerError(f"unknown rollout {rollout_id!r}", rollout_id=rollout_id)
        return entry

    def entries(self) -> tuple[LedgerEntry, ...]:
        """Every entry, in reservation order."""
        return tuple(self._entries.values())

    def instances(self) -> tuple[str, ...]:
        """Instances that own an entry or still have attempts to retire."""
        return tuple(sorted(set(self._by_instance) | set(self._dropped)))

    def redispatch_order(self) -> tuple[LedgerEntry, ...]:
        """Reserved entries to send: restored ones first, then the rest, in reservation order."""
        reserved = [
            entry for entry in self._entries.values() if entry.status is LedgerStatus.RESERVED
        ]
        return tuple(
            [entry for entry in reserved if entry.restored]
            + [entry for entry in reserved if not entry.restored]
        )

    def forgettable(self) -> tuple[str, ...]:
        """Sealed or abandoned rollouts with no attempt left to retire (sorted ids)."""
        pending = {
            episode.rollout_id for episodes in self._dropped.values() for episode in episodes
        }
        return tuple(
            sorted(
                rollout_id
                for rollout_id, entry in self._entries.items()
                if entry.status not in UNFINISHED and rollout_id not in pending
            )
        )

    # ---- RolloutInventory ------------------------------------------------------

    def inventory(self, instance_id: str) -> tuple[EnvironmentEpisode, ...]:
        """Dispatched current attempts, and restored attempts not yet re-sent, on the instance."""
        return sorted_episodes(
            self._entries[rollout_id].episode
            for rollout_id in self._by_instance.get(instance_id, ())
            if self._entries[rollout_id].on_instance
        )

    def dropped_attempts(self, instance_id: str) -> tuple[EnvironmentEpisode, ...]:
        """Attempts the trainer gave up on that the instance must retire."""
        return sorted_episodes(self._dropped.get(instance_id, ()))

    def retired(self, instance_id: str, episodes: tuple[EnvironmentEpisode, ...]) -> None:
        """The instance retired ``episodes``; stop reporting them as dropped."""
        dropped = self._dropped.get(instance_id)
        if dropped is None:
            return
        dropped.difference_update(episodes)
        if not dropped:
            del self._dropped[instance_id]

    async def verify_against_cut(
        self,
        cut: MutationCut,
        contents: SnapshotContents,
        *,
        data_plane: StagingRowSource | None = None,
    ) -> None:
        """Under the cut, raise unless ``contents`` agrees with the ledger and the data plane.

        ``ProtocolViolation``: an exported episode is no longer the live current
        attempt (sealed, failed, re-minted) or the ledger places it on another
        instance; a kept staging key has no row. ``GymCheckpointUnavailable``
        (retryable): a live episode was neither exported nor restarted.
        ``data_plane`` overrides the one given to the ledger; with neither,
        staging keys are not checked.
        """
        cut.require_live()
        live = {instance: self.inventory(instance) for instance in self._by_instance}
        source = data_plane if data_plane is not None else self._data_plane
        staging_rows: frozenset[str] | None = None
        if source is not None:
            wanted = contents.all_staging_keys()
            staging_rows = wanted - source.missing_keys(wanted)
        verify_contents(contents, live=live, staging_rows=staging_rows)

    # ---- mutators (each takes a cut) -------------------------------------------

    def reserve(self, cut: MutationCut, rollout_id: str, instance_id: str) -> LedgerEntry:
        """Record a new rollout as attempt 0 on ``instance_id``, not yet sent."""
        cut.require_live()
        if rollout_id in self._entries:
            existing = self._entries[rollout_id]
            raise LedgerError(
                f"rollout {rollout_id!r} is already in the ledger ({existing.status})",
                rollout_id=rollout_id,
                action="reserve",
                status=existing.status.value,
            )
        entry = LedgerEntry(rollout_id, 0, instance_id, ROLLOUT_LEDGER.initial)
        self._put(entry)
        return entry

    def dispatch(self, cut: MutationCut, rollout_id: str) -> LedgerEntry:
        """The current attempt is being sent to its instance."""
        entry = self._check(cut, rollout_id, "dispatch")
        return self._put(replace(entry, status=self._advance(entry, "dispatch"), restored=False))

    def add_staging_keys(
        self, cut: MutationCut, rollout_id: str, keys: Iterable[str]
    ) -> LedgerEntry:
        """The current attempt wrote data rows under ``keys``."""
        entry = self._check(cut, rollout_id, "add_staging_keys")
        merged = tuple(sorted(set(entry.staging_keys).union(keys)))
        status = self._advance(entry, "add_staging_keys")
        return self._put(replace(entry, status=status, staging_keys=merged))

    def seal(self, cut: MutationCut, rollout_id: str) -> LedgerEntry:
        """The rollout finished and its result is committed."""
        entry = self._check(cut, rollout_id, "seal")
        return self._put(replace(entry, status=self._advance(entry, "seal")))

    def fail(self, cut: MutationCut, rollout_id: str) -> LedgerEntry:
        """Give up on the current attempt; if its instance holds it, it must be retired."""
        entry = self._check(cut, rollout_id, "fail")
        self._drop(entry)
        return self._put(replace(entry, status=self._advance(entry, "fail"), restored=False))

    def abandon(self, cut: MutationCut, rollout_id: str) -> LedgerEntry:
        """Give the rollout up; its staging keys stay listed for the caller to delete."""
        entry = self._check(cut, rollout_id, "abandon")
        return self._abandon(entry)

    def mint_next_attempt(
        self, cut: MutationCut, rollout_id: str, *, instance_id: str | None = None
    ) -> LedgerEntry:
        """Replace a failed (or dispatched) attempt by attempt + 1, reserved and empty.

        The old attempt is dropped on its instance. ``instance_id`` moves the new
        attempt elsewhere (default: the same instance). The old attempt's
        staging keys are no longer referenced; the caller deletes those rows.
        """
        entry = self._check(cut, rollout_id, "mint_next_attempt")
        return self._next_attempt(entry, "mint_next_attempt", instance_id)

    def restart_from_task(
        self, cut: MutationCut, rollout_id: str, *, instance_id: str | None = None
    ) -> LedgerEntry:
        """Start an abandoned rollout over as attempt + 1, reserved, with no rows."""
        entry = self._check(cut, rollout_id, "restart_from_task")
        return self._next_attempt(entry, "restart_from_task", instance_id)

    def forgotten(self, cut: MutationCut, rollout_ids: Iterable[str]) -> None:
        """The environment forgot these rollouts; drop their entries."""
        cut.require_live()
        ids = set(rollout_ids)
        allowed = set(self.forgettable())
        for rollout_id in sorted(ids):
            if rollout_id not in allowed:
                status = self._entries[rollout_id].status.value if rollout_id in self else ""
                raise LedgerError(
                    f"rollout {rollout_id!r} is not forgettable (unfinished, unknown, "
                    "or an attempt still to retire)",
                    rollout_id=rollout_id,
                    action="forgotten",
                    status=status,
                )
        for rollout_id in ids:
            entry = self._entries.pop(rollout_id)
            self._unindex(entry)

    def prepare_for_restart(
        self, cut: MutationCut, restored: RestoredEnvironmentRollouts
    ) -> RestartPlan:
        """Continue exactly the restored triples; abandon every other unfinished rollout.

        Each ``(instance_id, rollout_id, attempt)`` must name the rollout's
        current attempt, on that instance, held by it (dispatched, or restored
        and not yet re-sent). It continues as attempt + 1 on the same instance,
        reserved and marked restored. Any mismatch raises ``RestoreMismatch``
        before anything changes.
        """
        cut.require_live()
        problems = restore_mismatches(self._entries, restored.continued_attempts)
        seen = {rollout_id for _, rollout_id, _ in restored.continued_attempts}
        if problems:
            raise RestoreMismatch(
                f"restored rollouts do not match the ledger: {problems[:10]}",
                mismatches=tuple(problems),
            )
        continued: list[LedgerEntry] = []
        abandoned: list[LedgerEntry] = []
        for rollout_id, entry in list(self._entries.items()):
            if rollout_id in seen:
                status = self._advance(entry, "continue_restored")
                new = replace(entry, attempt=entry.attempt + 1, status=status, restored=True)
                continued.append(self._put(new))
            elif entry.status is LedgerStatus.RESERVED and not entry.restored:
                # Never sent, so no environment holds it: it simply waits to be
                # sent, with no attempt to retire and no reason to re-mint.
                continue
            elif entry.status in UNFINISHED:
                abandoned.append(self._abandon(entry))
        keep = set(restored.staging_keys)
        for entry in self._entries.values():
            if entry.status in KEEPS_ROWS:
                keep.update(entry.staging_keys)
        known = {key for entry in self._entries.values() for key in entry.staging_keys}
        return RestartPlan(
            continued=tuple(continued),
            abandoned=tuple(abandoned),
            keep_staging_keys=frozenset(keep),
            clear_staging_keys=frozenset(known - keep),
        )

    # ---- save and load ---------------------------------------------------------

    def to_bytes(self) -> bytes:
        """The ledger as a checksummed JSON document."""
        body: dict[str, Any] = {
            "entries": [entry.to_json() for entry in self._entries.values()],
            "dropped": dropped_to_json(self._dropped),
        }
        return checksummed.encode(kind=KIND, schema_version=SCHEMA_VERSION, body=body)

    @classmethod
    def from_bytes(
        cls, data: bytes, *, data_plane: StagingRowSource | None = None, path: str = ""
    ) -> RecoveryLedger:
        """Parse ``to_bytes`` output; ``LedgerCorrupt`` for anything else."""
        body = checksummed.decode(
            data,
            kind=KIND,
            schema_version=SCHEMA_VERSION,
            fields=("entries", "dropped"),
            path=path,
            error=LedgerCorrupt,
        )
        ledger = cls(data_plane=data_plane)
        try:
            for raw in _as_list(body["entries"], "entries"):
                entry = LedgerEntry.from_json(raw)
                if entry.rollout_id in ledger._entries:
                    raise ValueError(f"rollout {entry.rollout_id!r} appears twice")
                ledger._put(entry)
            for raw in _as_list(body["dropped"], "dropped"):
                instance, episode = parse_dropped_attempt(raw)
                ledger._dropped.setdefault(instance, set()).add(episode)
        except (ValueError, TypeError) as exc:
            raise LedgerCorrupt(f"invalid ledger content: {exc}", path=path) from exc
        return ledger

    def save(self, path: str | os.PathLike[str]) -> int:
        """Write the ledger to ``path`` atomically (temp, fsync, rename, fsync dir); return size."""
        data = self.to_bytes()
        atomic_write_bytes(Path(path), data)
        return len(data)

    @classmethod
    def load(
        cls, path: str | os.PathLike[str], *, data_plane: StagingRowSource | None = None
    ) -> RecoveryLedger:
        """Read a ledger saved by ``save``; ``LedgerCorrupt`` if missing or invalid."""
        try:
            data = Path(path).read_bytes()
        except FileNotFoundError as exc:
            raise LedgerCorrupt("ledger file is missing", path=str(path)) from exc
        return cls.from_bytes(data, data_plane=data_plane, path=str(path))

    # ---- internals -------------------------------------------------------------

    def _check(self, cut: MutationCut, rollout_id: str, action: str) -> LedgerEntry:
        cut.require_live()
        entry = self._entries.get(rollout_id)
        if entry is None:
            raise LedgerError(
                f"{action}: unknown rollout {rollout_id!r}", rollout_id=rollout_id, action=action
            )
        if ROLLOUT_LEDGER.destination(entry.status, action) is None:
            raise LedgerError(
                f"{action} is not allowed for rollout {rollout_id!r} in status {entry.status}",
                rollout_id=rollout_id,
                action=action,
                status=entry.status.value,
            )
        return entry

    @staticmethod
    def _advance(entry: LedgerEntry, action: str) -> LedgerStatus:
        """The entry's status after ``action`` (checked legal by ``_check``)."""
        return _STATUS.step(entry.rollout_id, entry.status, action)

    def _abandon(self, entry: LedgerEntry) -> LedgerEntry:
        self._drop(entry)
        return self._put(replace(entry, status=self._advance(entry, "abandon"), restored=False))

    def _next_attempt(
        self, entry: LedgerEntry, action: str, instance_id: str | None
    ) -> LedgerEntry:
        self._drop(entry)
        new = LedgerEntry(
            entry.rollout_id,
            entry.attempt + 1,
            instance_id if instance_id is not None else entry.instance_id,
            self._advance(entry, action),
        )
        return self._put(new)

    def _drop(self, entry: LedgerEntry) -> None:
        # Only an attempt the instance holds needs retiring; a failed one was
        # dropped when it failed, and adding it again changes nothing.
        if entry.on_instance:
            self._dropped.setdefault(entry.instance_id, set()).add(entry.episode)

    def _put(self, entry: LedgerEntry) -> LedgerEntry:
        old = self._entries.get(entry.rollout_id)
        if old is not None and old.instance_id != entry.instance_id:
            self._unindex(old)
        self._entries[entry.rollout_id] = entry
        self._by_instance.setdefault(entry.instance_id, set()).add(entry.rollout_id)
        return entry

    def _unindex(self, entry: LedgerEntry) -> None:
        owned = self._by_instance.get(entry.instance_id)
        if owned is not None:
            owned.discard(entry.rollout_id)
            if not owned:
                del self._by_instance[entry.instance_id]


def _as_list(value: object, name: str) -> list[object]:
    if not isinstance(value, list):
        raise ValueError(f"{name} must be a list")
    return value
