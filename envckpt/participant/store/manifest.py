"""A participant's ``manifest.json``: what it says, how it is published and read.

The manifest names the records file, its digest and its record count (plus
extras, for callers that pass them; the participant core writes none). It is
written last and is create-only: a temp file, fsync, then a hard link to
``manifest.json`` (a link never replaces, so of two racing writers exactly
one publishes), then the directory is fsynced. A directory without a
manifest is unpublished and never restorable.

A manifest without extras (every one the core writes) skips checking,
freezing and thawing them altogether. Its body (sorted keys, two-space
indent) is then encoded by orjson: for Gym's seven fields, the very bytes the
standard library writes.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import orjson

from envckpt import checksummed
from envckpt.errors import CorruptCheckpoint
from envckpt.fsutil import fsync_dir
from envckpt.ids import validate_checkpoint_id, validate_path_component
from envckpt.participant.store.layout import (
    DEFAULT_MAX_MANIFEST_BYTES,
    DEFAULT_MAX_MANIFEST_VALUES,
    MANIFEST_NAME,
    SCHEMA_VERSION,
    SHA256_HEX,
    STANDARD_FIELDS,
    StrPath,
    checked_records_path,
    participant_dir,
    records_file_name,
    reject_json_constant,
    temp_path,
)


def _freeze(value: Any) -> Any:
    if isinstance(value, Mapping):
        return MappingProxyType({key: _freeze(item) for key, item in value.items()})
    if isinstance(value, list | tuple):
        return tuple(_freeze(item) for item in value)
    return value


def _thaw(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {key: _thaw(item) for key, item in value.items()}
    if isinstance(value, tuple):
        return [_thaw(item) for item in value]
    return value


# The extras of a manifest that has none: shared, read-only.
_NO_EXTRAS: Mapping[str, Any] = MappingProxyType({})
# The seven standard fields in one fixed order (the file sorts its keys anyway).
_STANDARD_ORDER = tuple(sorted(STANDARD_FIELDS))


def canonical_extras(extras: Mapping[str, Any]) -> Mapping[str, Any]:
    """``extras`` checked (string keys, no standard field, JSON only) and frozen read-only."""
    if not extras:
        return _NO_EXTRAS
    for key in extras:
        if not isinstance(key, str):
            raise ValueError(f"manifest extras keys must be strings, got {key!r}")
        if key in STANDARD_FIELDS:
            raise ValueError(f"manifest extras may not override the standard field {key!r}")
    try:
        # A JSON round trip both proves the extras serialise and detaches them
        # from the caller's (mutable) objects.
        plain = json.loads(json.dumps(_thaw(extras), allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"manifest extras are not JSON: {exc}") from exc
    frozen: Mapping[str, Any] = _freeze(plain)
    return frozen


@dataclass(frozen=True, slots=True)
class Manifest:
    """What ``manifest.json`` says about one participant's records file.

    ``extras`` is read-only: nested objects are ``MappingProxyType`` and arrays
    are tuples (so a Manifest compares by value but is not hashable).
    """

    kind: str
    instance: str
    checkpoint_id: str
    records_file: str
    records_sha256: str
    record_count: int
    extras: Mapping[str, Any] = field(default_factory=lambda: _NO_EXTRAS)
    schema_version: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        if type(self.schema_version) is not int or self.schema_version != SCHEMA_VERSION:
            raise ValueError(f"unknown schema_version {self.schema_version!r}")
        validate_path_component(self.kind, what="kind")
        validate_path_component(self.instance, what="instance")
        validate_checkpoint_id(self.checkpoint_id)
        if not isinstance(self.records_sha256, str) or not SHA256_HEX.fullmatch(
            self.records_sha256
        ):
            raise ValueError(f"records_sha256 {self.records_sha256!r} is not 64 lowercase hex")
        if self.records_file != records_file_name(self.records_sha256):
            raise ValueError(
                f"records_file {self.records_file!r} must be "
                f"{records_file_name(self.records_sha256)!r}"
            )
        # type() rather than isinstance(): True is an int but not a count.
        if type(self.record_count) is not int or self.record_count < 0:
            raise ValueError(f"record_count must be a non-negative int, got {self.record_count!r}")
        object.__setattr__(self, "extras", canonical_extras(self.extras))

    def to_json(self) -> dict[str, Any]:
        """The manifest as plain JSON types, extras merged in."""
        body: dict[str, Any] = _thaw(self.extras) if self.extras else {}
        body.update((name, getattr(self, name)) for name in _STANDARD_ORDER)
        return body


def records_path(checkpoint_dir: StrPath, manifest: Manifest) -> Path:
    """The records file a manifest names, checked to stay inside its directory."""
    directory = participant_dir(checkpoint_dir, manifest.kind, manifest.instance)
    return checked_records_path(
        directory,
        manifest.records_file,
        manifest.records_sha256,
        str(directory / MANIFEST_NAME),
    )


def publish_manifest(
    directory: Path, manifest: Manifest, before_publish: Callable[[], None] | None
) -> None:
    body = _encode(manifest)
    manifest_path = directory / MANIFEST_NAME
    tmp = temp_path(directory, "manifest")
    try:
        with open(tmp, "xb") as stream:
            stream.write(body)
            stream.flush()
            os.fsync(stream.fileno())
        if before_publish is not None:
            before_publish()
        try:
            # link() never replaces an existing name (rename would), so of two
            # racing writers exactly one publishes.
            os.link(tmp, manifest_path)
        except FileExistsError:
            _discard_losing_records(directory, manifest)
            raise CorruptCheckpoint(
                "checkpoint directory already published", path=str(directory)
            ) from None
    finally:
        tmp.unlink(missing_ok=True)
    fsync_dir(directory)


def _encode(manifest: Manifest) -> bytes:
    if manifest.extras:
        # Extras may hold what orjson refuses (integers beyond 64 bits) or
        # writes differently (non-ASCII): the standard library, as before.
        text = json.dumps(manifest.to_json(), sort_keys=True, indent=2, allow_nan=False)
        return (text + "\n").encode("ascii")
    # Gym's seven fields (strings and ints): the same bytes, a tenth of the time.
    return orjson.dumps(manifest.to_json(), option=_MANIFEST_OPTIONS)


_MANIFEST_OPTIONS = orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE


def _discard_losing_records(directory: Path, manifest: Manifest) -> None:
    # The winner's manifest names its records file; ours is garbage unless it is
    # the very same file (same bytes, same name), which must then stay.
    try:
        published = _load_manifest_json(
            directory / MANIFEST_NAME, DEFAULT_MAX_MANIFEST_BYTES, DEFAULT_MAX_MANIFEST_VALUES
        )
        winner = published["records_file"]
    except (ValueError, KeyError, TypeError):
        return  # cannot tell what the winner uses: touch nothing
    if winner != manifest.records_file:
        (directory / manifest.records_file).unlink(missing_ok=True)


def read_manifest(
    checkpoint_dir: StrPath,
    *,
    kind: str,
    instance: str,
    checkpoint_id: str | None = None,
    max_bytes: int = DEFAULT_MAX_MANIFEST_BYTES,
    max_values: int = DEFAULT_MAX_MANIFEST_VALUES,
) -> Manifest:
    """Read and validate the manifest of one participant directory.

    Checks the schema, kind, instance, checkpoint id (when given), field types
    and that ``records_file`` is the digest name inside the directory. Does not
    open the records file: ``verify_records`` does. ``ManifestTooLarge`` (a
    ``CorruptCheckpoint``) for a file over ``max_bytes`` (refused before it is
    read) or a document of more than ``max_values`` JSON values.
    """
    directory = participant_dir(checkpoint_dir, kind, instance)
    if checkpoint_id is not None:
        validate_checkpoint_id(checkpoint_id)
    path = directory / MANIFEST_NAME
    where = str(path)

    data = _load_manifest_json(path, max_bytes, max_values)
    schema = data.get("schema_version")
    if type(schema) is not int or schema != SCHEMA_VERSION:
        raise CorruptCheckpoint(
            f"unknown manifest schema_version {schema!r} (this reader knows {SCHEMA_VERSION})",
            path=where,
        )
    for name in ("kind", "instance", "checkpoint_id", "records_file", "records_sha256"):
        if not isinstance(data.get(name), str):
            raise CorruptCheckpoint(f"manifest field {name!r} missing or not a string", path=where)
    count = data.get("record_count")
    if type(count) is not int or count < 0:
        raise CorruptCheckpoint(
            f"manifest field 'record_count' must be a non-negative int, got {count!r}", path=where
        )
    for name, expected in (("kind", kind), ("instance", instance)):
        if data[name] != expected:
            raise CorruptCheckpoint(
                f"foreign checkpoint: manifest {name} is {data[name]!r}, expected {expected!r}",
                path=where,
            )
    if checkpoint_id is not None and data["checkpoint_id"] != checkpoint_id:
        raise CorruptCheckpoint(
            f"foreign checkpoint: manifest checkpoint_id is {data['checkpoint_id']!r}, "
            f"expected {checkpoint_id!r}",
            path=where,
        )
    checked_records_path(directory, data["records_file"], data["records_sha256"], where)

    try:
        manifest = Manifest(
            kind=data["kind"],
            instance=data["instance"],
            checkpoint_id=data["checkpoint_id"],
            records_file=data["records_file"],
            records_sha256=data["records_sha256"],
            record_count=count,
            extras={key: value for key, value in data.items() if key not in STANDARD_FIELDS},
            schema_version=schema,
        )
    except (TypeError, ValueError) as exc:
        raise CorruptCheckpoint(f"invalid manifest: {exc}", path=where) from exc
    return manifest


def _load_manifest_json(path: Path, max_bytes: int, max_values: int) -> dict[str, Any]:
    where = str(path)
    # O_NOFOLLOW: a symlinked manifest could smuggle in another directory's.
    raw = checksummed.read_capped(
        path,
        max_bytes=max_bytes,
        what="manifest",
        missing="no manifest: unpublished or missing checkpoint",
    )
    try:
        data = json.loads(raw, parse_constant=reject_json_constant)
    except RecursionError:
        raise CorruptCheckpoint("manifest is nested too deeply", path=where) from None
    except ValueError as exc:  # includes JSONDecodeError and UnicodeDecodeError
        raise CorruptCheckpoint(f"manifest is not valid JSON: {exc}", path=where) from exc
    if not isinstance(data, dict):
        raise CorruptCheckpoint("manifest is not a JSON object", path=where)
    checksummed.check_entries(
        _json_values(data, max_values), limit=max_values, what="manifest", path=where
    )
    return data


def _json_values(document: Any, limit: int) -> int:
    """The JSON values in ``document`` (with every item of its objects and lists), counted
    only until ``limit`` is passed."""
    count = 0
    pending = [document]
    while pending and count <= limit:
        value = pending.pop()
        count += 1
        if isinstance(value, dict):
            pending.extend(value.values())
        elif isinstance(value, list):
            pending.extend(value)
    return count
