"""The on-disk checkpoint of one participant: a records file and its manifest.

Layout (protocol.md section 6)::

    <checkpoint_dir>/gym/<kind>/<instance>/records-<sha256>.jsonl
    <checkpoint_dir>/gym/<kind>/<instance>/manifest.json

The records file holds one compact JSON object per line (one per episode
attempt, keys in the order they were exported), in NeMo Gym's record envelope
(``envelope``: ``{"episode_id": {"rollout_id", "attempt"}, ...state}``). The
manifest names the records file, its digest and its record count, exactly
Gym's fields; it is written last and is create-only, so a directory without a
manifest is unpublished and never restorable, and a directory with one never
changes.

Call order (every function is synchronous; the participant core runs them via
``asyncio.to_thread``)::

    # commit: mappings, or lines already encoded (the participant core's way)
    records = (to_record(episode, state) for episode, state in exported)
    manifest = write_checkpoint(checkpoint_dir, kind=..., instance=...,
                                checkpoint_id=..., records=records)
    lines = envelope_lines(exported)          # envelope_line of each, lazily
    manifest = write_checkpoint(..., lines=lines)
    # restore: validate everything before installing anything
    manifest = read_manifest(checkpoint_dir, kind=..., instance=...,
                             checkpoint_id=expected_id)
    identity = verify_records(checkpoint_dir, manifest, visit=check)  # whole file, hashed
    for record, size in reread_records(checkpoint_dir, manifest, identity):
        episode, state = from_record(record)     # either envelope shape
        install(episode, state)                  # in batches (restore_read.py)

The package: ``layout`` (paths and names), ``lines`` (one record's line:
orjson out, the standard library for the edge cases and in), ``envelope``
(one record's envelope), ``records`` (the records file), ``manifest`` (the
manifest), and here the write that ties them together. ``extras`` (fields beside the
standard ones) are still written and read for callers that want them; the
participant core writes none, so its manifests carry exactly Gym's fields.

Every problem found while reading raises ``CorruptCheckpoint``. Writing into a
directory that already has a manifest raises ``CorruptCheckpoint("checkpoint
directory already published")`` and leaves the existing files alone. Bad
arguments from the caller (ids, extras, records that are not JSON objects)
raise ``ValueError`` or ``TypeError``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from envckpt.fsutil import fsync_dir
from envckpt.ids import validate_checkpoint_id
from envckpt.participant.store.envelope import (
    check_envelope,
    check_envelopes,
    envelope_line,
    envelope_lines,
    from_record,
    to_record,
)
from envckpt.participant.store.layout import (
    DEFAULT_MAX_LINE_BYTES,
    DEFAULT_MAX_MANIFEST_BYTES,
    DEFAULT_MAX_MANIFEST_VALUES,
    GYM_DIR,
    MANIFEST_NAME,
    SCHEMA_VERSION,
    STANDARD_FIELDS,
    StrPath,
    participant_dir,
    records_file_name,
    refuse_published,
)
from envckpt.participant.store.lines import encode_record, encode_records
from envckpt.participant.store.manifest import (
    Manifest,
    canonical_extras,
    publish_manifest,
    read_manifest,
    records_path,
)
from envckpt.participant.store.records import (
    FileIdentity,
    iter_records,
    reread_records,
    verify_records,
    write_records,
)

__all__ = [
    "DEFAULT_MAX_LINE_BYTES",
    "DEFAULT_MAX_MANIFEST_BYTES",
    "DEFAULT_MAX_MANIFEST_VALUES",
    "GYM_DIR",
    "MANIFEST_NAME",
    "SCHEMA_VERSION",
    "STANDARD_FIELDS",
    "FileIdentity",
    "Manifest",
    "check_envelope",
    "check_envelopes",
    "encode_record",
    "encode_records",
    "envelope_line",
    "envelope_lines",
    "from_record",
    "iter_records",
    "participant_dir",
    "read_manifest",
    "records_file_name",
    "records_path",
    "reread_records",
    "to_record",
    "verify_records",
    "write_checkpoint",
]


def write_checkpoint(
    checkpoint_dir: StrPath,
    *,
    kind: str,
    instance: str,
    checkpoint_id: str,
    records: Iterable[Mapping[str, Any]] | None = None,
    lines: Iterable[bytes] | None = None,
    extras: Mapping[str, Any] | None = None,
    before_publish: Callable[[], None] | None = None,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
) -> Manifest:
    """Write ``records`` and then publish the manifest; return the manifest.

    Either ``records`` (mappings, encoded here) or ``lines`` (records already
    encoded by ``encode_record(s)`` or ``envelope_line(s)``), consumed once,
    streaming. ``before_publish`` runs after the records file has its final
    name and before the manifest is linked (a crash hook for tests); if it
    raises, nothing is published.
    """
    if (records is None) == (lines is None):
        raise TypeError("write_checkpoint takes records or lines, exactly one")
    validate_checkpoint_id(checkpoint_id)
    directory = participant_dir(checkpoint_dir, kind, instance)
    # Checked before any I/O, so bad extras never leave files behind.
    frozen_extras = canonical_extras(extras or {})
    new_dirs = _make_dirs(directory)
    manifest_path = directory / MANIFEST_NAME
    refuse_published(manifest_path)

    if lines is None:
        assert records is not None
        lines = _encoded(records)
    sha256_hex, record_count = write_records(directory, lines, max_line_bytes)
    manifest = Manifest(
        kind=kind,
        instance=instance,
        checkpoint_id=checkpoint_id,
        records_file=records_file_name(sha256_hex),
        records_sha256=sha256_hex,
        record_count=record_count,
        extras=frozen_extras,
    )

    def entries_durable() -> None:
        # The new directories' entries and the records file's: durable before
        # the manifest is linked. Synced here, after the manifest's own fsync,
        # rather than one by one as they were made: a journaling file system
        # has committed them with that fsync already, so each of these costs
        # next to nothing instead of a journal commit of its own.
        for parent in new_dirs:
            fsync_dir(parent, best_effort=True)
        fsync_dir(directory)
        if before_publish is not None:
            before_publish()

    publish_manifest(directory, manifest, entries_durable)
    return manifest


def _encoded(records: Iterable[Mapping[str, Any]]) -> Iterator[bytes]:
    for index, record in enumerate(records):
        if not isinstance(record, Mapping):
            raise TypeError(f"record {index} is a {type(record).__name__}, not a mapping")
        yield encode_record(record)


def _make_dirs(directory: Path) -> list[Path]:
    """Make ``directory`` and its missing parents; the parents whose entries changed,
    innermost last, for the caller to sync (their new entries live there)."""
    missing: list[Path] = []
    probe = directory
    while not probe.is_dir():
        missing.append(probe)
        if probe.parent == probe:
            break
        probe = probe.parent
    changed: list[Path] = []
    for new_dir in reversed(missing):
        try:
            new_dir.mkdir()
        except FileExistsError:
            continue  # a concurrent writer made it; its entry is its to sync
        changed.append(new_dir.parent)
    return changed
