"""The one records file and manifest of a multi-worker participant's commit.

Each worker exports its own episodes and hands them over as ``[capture key,
line]`` pairs (``commit_write.hand_over``); the worker that answered the
commit writes them, in episode order, as the participant's one records file
and manifest, exactly the layout one process writes (protocol.md 6). Two
workers answering the same commit (a retry that reached another worker)
write the same bytes: the manifest is create-only, so one publishes and the
other finds that very manifest and returns it::

    manifest = write_merged(checkpoint_dir, kind="model", instance="policy_model",
                            checkpoint_id="c1", shares=[pairs_of_w0, pairs_of_w1],
                            before_publish=check_still_committed)
"""

from __future__ import annotations

import hashlib
import os
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from envckpt.episodes import EnvironmentEpisode
from envckpt.errors import CorruptCheckpoint, ParticipantError
from envckpt.participant import store
from envckpt.protocol import ErrorCode

# One worker's share: [capture key, encoded record line] per exported episode.
SharePairs = Sequence[Sequence[str]]


def merged_lines(shares: Sequence[SharePairs]) -> list[bytes]:
    """Every share's lines in episode order; an episode two workers exported is refused."""
    keyed: dict[EnvironmentEpisode, bytes] = {}
    for share in shares:
        for key, line in share:
            episode = EnvironmentEpisode.from_capture_key(key)
            if episode in keyed:
                raise ParticipantError(
                    ErrorCode.CHECKPOINT_ERROR, f"two workers exported {episode.capture_key}"
                )
            keyed[episode] = line.encode("utf-8")
    return [keyed[episode] for episode in sorted(keyed)]


def records_digest(lines: Sequence[bytes]) -> str:
    """The sha256 the records file of ``lines`` has (each line ends with a newline)."""
    digest = hashlib.sha256()
    for line in lines:
        digest.update(line)
        digest.update(b"\n")
    return digest.hexdigest()


def check_writable(checkpoint_dir: Path, *, kind: str, instance: str) -> None:
    """Raise the ``ParticipantError`` writing there would end in, before any worker commits.

    The participant directory is made (as the write would make it) and a file
    created and removed in it; a directory that already has a manifest is
    refused as a published one.
    """
    directory = store.participant_dir(checkpoint_dir, kind, instance)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        probe = directory / f".probe-{os.getpid()}-{uuid.uuid4().hex}.tmp"
        with open(probe, "xb"):
            pass
        probe.unlink()
    except OSError as error:
        raise ParticipantError(ErrorCode.CHECKPOINT_ERROR, f"writing failed: {error}") from error
    if os.path.lexists(directory / store.MANIFEST_NAME):
        raise ParticipantError(
            ErrorCode.INVALID_CHECKPOINT_STATE,
            f"checkpoint directory already published: {directory}",
        )


def write_merged(
    checkpoint_dir: Path,
    *,
    kind: str,
    instance: str,
    checkpoint_id: str,
    shares: Sequence[SharePairs],
    before_publish: Callable[[], None],
) -> dict[str, Any]:
    """Write the merged records and manifest (or find the same ones published); the manifest.

    Raises ``ParticipantError``: ``invalid_checkpoint_state`` for a directory
    another checkpoint (or other records) published, ``checkpoint_error`` for
    a failed write; ``before_publish`` raises to stop an aborted commit.
    """
    lines = merged_lines(shares)
    try:
        manifest = store.write_checkpoint(
            checkpoint_dir,
            kind=kind,
            instance=instance,
            checkpoint_id=checkpoint_id,
            lines=iter(lines),
            before_publish=before_publish,
        )
    except CorruptCheckpoint as error:
        return _same_as_published(checkpoint_dir, kind, instance, checkpoint_id, lines, error)
    except (OSError, ValueError) as error:
        raise ParticipantError(ErrorCode.CHECKPOINT_ERROR, f"writing failed: {error}") from error
    return manifest.to_json()


def _same_as_published(
    checkpoint_dir: Path,
    kind: str,
    instance: str,
    checkpoint_id: str,
    lines: Sequence[bytes],
    error: CorruptCheckpoint,
) -> dict[str, Any]:
    """The published manifest, if it is exactly this commit's; else the original refusal."""
    try:
        published = store.read_manifest(
            checkpoint_dir, kind=kind, instance=instance, checkpoint_id=checkpoint_id
        )
    except (CorruptCheckpoint, OSError):
        published = None
    same = (
        published is not None
        and published.records_sha256 == records_digest(lines)
        and published.record_count == len(lines)
    )
    if not same or published is None:
        raise ParticipantError(ErrorCode.INVALID_CHECKPOINT_STATE, str(error)) from error
    return published.to_json()
