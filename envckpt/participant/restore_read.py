"""Read and validate one participant's saved state before a restore installs any of it.

All-or-nothing: every record of the checkpoint is read, the file's digest and
count are checked, and each in-scope state is validated by the kind's hooks;
only when all of that succeeded does the core install anything. Runs in a
worker thread (``asyncio.to_thread``): it only reads files.

    source_checkpoint_id, plans = await read_in_thread(
        checkpoint_dir, hooks=hooks, kind=kind, instance=instance, scope=scope)
    hooks.install(plans)              # plans: (next attempt, validated state)
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from envckpt.episodes import EnvironmentEpisode
from envckpt.errors import CorruptCheckpoint, ParticipantError
from envckpt.participant import store
from envckpt.participant.hooks import StateHooks
from envckpt.protocol import ErrorCode

RestorePlan = list[tuple[EnvironmentEpisode, object]]


def read_and_validate(
    checkpoint_dir: Path,
    *,
    hooks: StateHooks,
    kind: str,
    instance: str,
    scope: frozenset[EnvironmentEpisode],
) -> tuple[str, RestorePlan]:
    """The manifest's checkpoint id and the validated next attempts; install nothing.

    Raises ``CorruptCheckpoint``, ``OSError`` or the ``ValueError`` /
    ``KeyError`` / ``TypeError`` of a record or state the hooks refuse.
    """
    manifest = store.read_manifest(checkpoint_dir, kind=kind, instance=instance)
    store.verify_records(checkpoint_dir, manifest)
    plans: RestorePlan = []
    seen: set[EnvironmentEpisode] = set()
    for record in store.iter_records(checkpoint_dir, manifest):
        # Gym's envelope, or envckpt's earlier {capture_key, state}.
        episode, state = store.from_record(record)
        if episode in seen:
            raise ValueError(f"two records for {episode.capture_key}")
        seen.add(episode)
        if episode in scope:
            plans.append((episode.next_attempt(), hooks.validate(episode, state)))
    return manifest.checkpoint_id, plans


async def read_in_thread(
    checkpoint_dir: Path,
    *,
    hooks: StateHooks,
    kind: str,
    instance: str,
    scope: frozenset[EnvironmentEpisode],
) -> tuple[str, RestorePlan]:
    """``read_and_validate`` in a worker thread; any refusal is ``invalid_checkpoint_state``."""
    try:
        return await asyncio.to_thread(
            read_and_validate,
            checkpoint_dir,
            hooks=hooks,
            kind=kind,
            instance=instance,
            scope=scope,
        )
    except (CorruptCheckpoint, ValueError, KeyError, TypeError, OSError) as error:
        raise ParticipantError(ErrorCode.INVALID_CHECKPOINT_STATE, str(error)) from error
