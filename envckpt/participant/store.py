"""The on-disk checkpoint of one participant: a records file and its manifest.

Layout (protocol.md section 6)::

    <checkpoint_dir>/gym/<kind>/<instance>/records-<sha256>.jsonl
    <checkpoint_dir>/gym/<kind>/<instance>/manifest.json

The records file holds one compact JSON object per line (one per episode
attempt, keys in the order they were exported). The manifest names the records
file, its digest and its record count; it is written last and is create-only,
so a directory without a manifest is unpublished and never restorable, and a
directory with one never changes.

Call order (every function is synchronous; the participant core runs them via
``asyncio.to_thread``)::

    # commit
    manifest = write_checkpoint(checkpoint_dir, kind=..., instance=...,
                                checkpoint_id=..., records=records,
                                extras={"episode_ids": [...]})
    # restore: validate everything before installing anything
    manifest = read_manifest(checkpoint_dir, kind=..., instance=...,
                             checkpoint_id=expected_id)
    verify_records(checkpoint_dir, manifest)        # whole file, once
    for record in iter_records(checkpoint_dir, manifest):
        install(record)

Every problem found while reading raises ``CorruptCheckpoint``. Writing into a
directory that already has a manifest raises ``CorruptCheckpoint("checkpoint
directory already published")`` and leaves the existing files alone. Bad
arguments from the caller (ids, extras, records that are not JSON objects)
raise ``ValueError`` or ``TypeError``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, BinaryIO, NoReturn

from envckpt.errors import CorruptCheckpoint
from envckpt.ids import validate_checkpoint_id, validate_path_component

SCHEMA_VERSION = 1
MANIFEST_NAME = "manifest.json"
GYM_DIR = "gym"
DEFAULT_MAX_LINE_BYTES = 64 * 1024 * 1024
DEFAULT_MAX_MANIFEST_BYTES = 64 * 1024 * 1024

STANDARD_FIELDS = frozenset(
    {
        "schema_version",
        "kind",
        "instance",
        "checkpoint_id",
        "records_file",
        "records_sha256",
        "record_count",
    }
)

_SHA256_HEX = re.compile(r"[0-9a-f]{64}")
_RECORDS_NAME = re.compile(r"records-([0-9a-f]{64})\.jsonl")
# Records are hashed and written in chunks of about this size: large enough that
# hashlib (which drops the GIL above 2 KiB) and write() are called rarely, small
# enough that memory stays flat however many records there are.
_CHUNK_BYTES = 1024 * 1024

# ensure_ascii: any Python str (even a lone surrogate) round-trips, and a line
# never contains a raw newline. allow_nan=False: NaN and Infinity are not JSON.
_RECORD_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=True, allow_nan=False)

StrPath = str | os.PathLike[str]


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not valid JSON")


# The plain decoder already builds dicts in document order, which is what
# object_pairs_hook=dict would do, about 25% faster.
_RECORD_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def records_file_name(sha256_hex: str) -> str:
    """The records file name for a digest: ``records-<sha256>.jsonl``."""
    return f"records-{sha256_hex}.jsonl"


def participant_dir(checkpoint_dir: StrPath, kind: str, instance: str) -> Path:
    """``<checkpoint_dir>/gym/<kind>/<instance>``, with kind and instance validated."""
    validate_path_component(kind, what="kind")
    validate_path_component(instance, what="instance")
    return Path(checkpoint_dir) / GYM_DIR / kind / instance


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


def _canonical_extras(extras: Mapping[str, Any]) -> Mapping[str, Any]:
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
    extras: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    schema_version: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        if type(self.schema_version) is not int or self.schema_version != SCHEMA_VERSION:
            raise ValueError(f"unknown schema_version {self.schema_version!r}")
        validate_path_component(self.kind, what="kind")
        validate_path_component(self.instance, what="instance")
        validate_checkpoint_id(self.checkpoint_id)
        if not isinstance(self.records_sha256, str) or not _SHA256_HEX.fullmatch(
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
        object.__setattr__(self, "extras", _canonical_extras(self.extras))

    def to_json(self) -> dict[str, Any]:
        """The manifest as plain JSON types, extras merged in."""
        body: dict[str, Any] = _thaw(self.extras)
        body.update(
            schema_version=self.schema_version,
            kind=self.kind,
            instance=self.instance,
            checkpoint_id=self.checkpoint_id,
            records_file=self.records_file,
            records_sha256=self.records_sha256,
            record_count=self.record_count,
        )
        return body


# --------------------------------------------------------------------------- write


def write_checkpoint(
    checkpoint_dir: StrPath,
    *,
    kind: str,
    instance: str,
    checkpoint_id: str,
    records: Iterable[Mapping[str, Any]],
    extras: Mapping[str, Any] | None = None,
    before_publish: Callable[[], None] | None = None,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
) -> Manifest:
    """Write ``records`` and then publish the manifest; return the manifest.

    ``records`` is consumed once, streaming. ``before_publish`` runs after the
    records file has its final name and before the manifest is linked (a crash
    hook for tests); if it raises, nothing is published.
    """
    validate_checkpoint_id(checkpoint_id)
    directory = participant_dir(checkpoint_dir, kind, instance)
    # Checked before any I/O, so bad extras never leave files behind.
    frozen_extras = _canonical_extras(extras or {})
    _make_dirs(directory)
    manifest_path = directory / MANIFEST_NAME
    _refuse_published(manifest_path)

    sha256_hex, record_count = _write_records(directory, records, max_line_bytes)
    manifest = Manifest(
        kind=kind,
        instance=instance,
        checkpoint_id=checkpoint_id,
        records_file=records_file_name(sha256_hex),
        records_sha256=sha256_hex,
        record_count=record_count,
        extras=frozen_extras,
    )
    _publish_manifest(directory, manifest, before_publish)
    return manifest


def _refuse_published(manifest_path: Path) -> None:
    if os.path.lexists(manifest_path):
        raise CorruptCheckpoint(
            "checkpoint directory already published", path=str(manifest_path.parent)
        )


def _make_dirs(directory: Path) -> None:
    missing: list[Path] = []
    probe = directory
    while not probe.is_dir():
        missing.append(probe)
        if probe.parent == probe:
            break
        probe = probe.parent
    for new_dir in reversed(missing):
        try:
            new_dir.mkdir()
        except FileExistsError:
            continue  # a concurrent writer made it; its entry is its to sync
        # A new directory's entry lives in its parent: sync the parent so the
        # path survives a crash. Best effort, as not every filesystem allows it.
        _fsync_dir(new_dir.parent, best_effort=True)


def _fsync_dir(directory: Path, *, best_effort: bool = False) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        if not best_effort:
            raise


def _temp_path(directory: Path, stem: str) -> Path:
    # Unique per writer, dot-prefixed so nothing mistakes it for a published file.
    return directory / f".{stem}-{os.getpid()}-{uuid.uuid4().hex}.tmp"


def _write_records(
    directory: Path, records: Iterable[Mapping[str, Any]], max_line_bytes: int
) -> tuple[str, int]:
    digest = hashlib.sha256()
    count = 0
    tmp = _temp_path(directory, "records")
    try:
        # Unbuffered: we hand the file whole chunks, a second buffer would only copy.
        with open(tmp, "xb", buffering=0) as stream:
            pending: list[str] = []
            pending_bytes = 0
            for record in records:
                line = _encode_record(record, count, max_line_bytes)
                pending.append(line)
                pending_bytes += len(line) + 1
                count += 1
                if pending_bytes >= _CHUNK_BYTES:
                    _emit(stream, digest, pending)
                    pending.clear()
                    pending_bytes = 0
            if pending:
                _emit(stream, digest, pending)
            os.fsync(stream.fileno())
        # A writer that lost a race while we were writing: leave its directory alone.
        _refuse_published(directory / MANIFEST_NAME)
        # The name is the digest, so an existing file of that name (a retry after
        # a crash, a concurrent writer) already holds these exact bytes.
        os.replace(tmp, directory / records_file_name(digest.hexdigest()))
    finally:
        tmp.unlink(missing_ok=True)
    # The records entry must be durable before a manifest can point at it.
    _fsync_dir(directory)
    return digest.hexdigest(), count


def _encode_record(record: Mapping[str, Any], index: int, max_line_bytes: int) -> str:
    if not isinstance(record, Mapping):
        raise TypeError(f"record {index} is a {type(record).__name__}, not a mapping")
    # json encodes only real dicts; dict() keeps the mapping's key order.
    line = _RECORD_ENCODER.encode(record if isinstance(record, dict) else dict(record))
    # ASCII output, so characters are bytes. A line the reader would refuse is
    # refused now rather than discovered at restore.
    if len(line) > max_line_bytes:
        raise ValueError(f"record {index} encodes to {len(line)} bytes > {max_line_bytes}")
    return line


def _emit(stream: BinaryIO, digest: Any, lines: list[str]) -> None:
    lines.append("")  # join then ends the chunk with a newline
    chunk = "\n".join(lines).encode("ascii")
    digest.update(chunk)
    view = memoryview(chunk)
    while view:  # a raw write may be partial
        written = stream.write(view)
        view = view[written:]


def _publish_manifest(
    directory: Path, manifest: Manifest, before_publish: Callable[[], None] | None
) -> None:
    body = json.dumps(manifest.to_json(), sort_keys=True, indent=2, allow_nan=False) + "\n"
    manifest_path = directory / MANIFEST_NAME
    tmp = _temp_path(directory, "manifest")
    try:
        with open(tmp, "xb") as stream:
            stream.write(body.encode("ascii"))
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
    _fsync_dir(directory)


def _discard_losing_records(directory: Path, manifest: Manifest) -> None:
    # The winner's manifest names its records file; ours is garbage unless it is
    # the very same file (same bytes, same name), which must then stay.
    try:
        published = json.loads((directory / MANIFEST_NAME).read_bytes())
        winner = published["records_file"]
    except (OSError, ValueError, KeyError, TypeError):
        return  # cannot tell what the winner uses: touch nothing
    if winner != manifest.records_file:
        (directory / manifest.records_file).unlink(missing_ok=True)


# ---------------------------------------------------------------------------- read


def read_manifest(
    checkpoint_dir: StrPath,
    *,
    kind: str,
    instance: str,
    checkpoint_id: str | None = None,
    max_bytes: int = DEFAULT_MAX_MANIFEST_BYTES,
) -> Manifest:
    """Read and validate the manifest of one participant directory.

    Checks the schema, kind, instance, checkpoint id (when given), field types
    and that ``records_file`` is the digest name inside the directory. Does not
    open the records file: ``verify_records`` does.
    """
    directory = participant_dir(checkpoint_dir, kind, instance)
    if checkpoint_id is not None:
        validate_checkpoint_id(checkpoint_id)
    path = directory / MANIFEST_NAME
    where = str(path)

    data = _load_manifest_json(path, max_bytes)
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
    _check_records_name(directory, data["records_file"], data["records_sha256"], where)

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


def _load_manifest_json(path: Path, max_bytes: int) -> dict[str, Any]:
    where = str(path)
    try:
        # O_NOFOLLOW: a symlinked manifest could smuggle in another directory's.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        raise CorruptCheckpoint(
            "no manifest: unpublished or missing checkpoint", path=where
        ) from None
    except OSError as exc:
        raise CorruptCheckpoint(f"cannot open manifest: {exc}", path=where) from exc
    with os.fdopen(fd, "rb") as stream:
        raw = stream.read(max_bytes + 1)
    if len(raw) > max_bytes:
        raise CorruptCheckpoint(f"manifest larger than {max_bytes} bytes", path=where)
    try:
        data = json.loads(raw, parse_constant=_reject_constant)
    except ValueError as exc:  # includes JSONDecodeError and UnicodeDecodeError
        raise CorruptCheckpoint(f"manifest is not valid JSON: {exc}", path=where) from exc
    if not isinstance(data, dict):
        raise CorruptCheckpoint("manifest is not a JSON object", path=where)
    return data


def _check_records_name(directory: Path, name: str, sha256_hex: str, where: str) -> Path:
    if (
        name in {"", ".", ".."}
        or "/" in name
        or "\\" in name
        or "\x00" in name
        or os.path.isabs(name)
    ):
        raise CorruptCheckpoint(
            f"records_file {name!r} escapes the participant directory", path=where
        )
    if not _RECORDS_NAME.fullmatch(name):
        raise CorruptCheckpoint(
            f"records_file {name!r} is not a records-<sha256>.jsonl name", path=where
        )
    if not _SHA256_HEX.fullmatch(sha256_hex):
        raise CorruptCheckpoint(
            f"records_sha256 {sha256_hex!r} is not 64 lowercase hex", path=where
        )
    if name != records_file_name(sha256_hex):
        raise CorruptCheckpoint(
            f"records_file {name!r} does not match records_sha256 {sha256_hex!r}", path=where
        )
    # The name is plain, but the file could still be a symlink out of the directory.
    path = directory / name
    if not path.resolve().is_relative_to(directory.resolve()):
        raise CorruptCheckpoint(
            f"records_file {name!r} escapes the participant directory", path=where
        )
    return path


def records_path(checkpoint_dir: StrPath, manifest: Manifest) -> Path:
    """The records file a manifest names, checked to stay inside its directory."""
    directory = participant_dir(checkpoint_dir, manifest.kind, manifest.instance)
    return _check_records_name(
        directory,
        manifest.records_file,
        manifest.records_sha256,
        str(directory / MANIFEST_NAME),
    )


def verify_records(
    checkpoint_dir: StrPath, manifest: Manifest, *, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
) -> None:
    """Read the whole records file once: every line a JSON object, count and digest right."""
    for _record in iter_records(checkpoint_dir, manifest, max_line_bytes=max_line_bytes):
        pass


def iter_records(
    checkpoint_dir: StrPath, manifest: Manifest, *, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
) -> Iterator[dict[str, Any]]:
    """Stream the records in file order, keys in their exported order.

    The digest and count are only known at the end, so a mismatch raises after
    the last record; call ``verify_records`` first before installing anything.
    """
    path = records_path(checkpoint_dir, manifest)
    return _scan_records(path, manifest, max_line_bytes)


def _scan_records(path: Path, manifest: Manifest, max_line_bytes: int) -> Iterator[dict[str, Any]]:
    where = str(path)
    digest = hashlib.sha256()
    count = 0
    try:
        stream = open(path, "rb", buffering=0)  # noqa: SIM115 - closed by the with below
    except FileNotFoundError:
        raise CorruptCheckpoint("records file missing", path=where) from None
    except OSError as exc:
        raise CorruptCheckpoint(f"cannot open records file: {exc}", path=where) from exc
    with stream:
        for line in _lines(stream, digest, max_line_bytes, where):
            count += 1
            if count > manifest.record_count:
                raise CorruptCheckpoint(
                    f"record count mismatch: manifest says {manifest.record_count}, file has more",
                    path=where,
                )
            yield _decode_record(line, count, where)
    if count != manifest.record_count:
        raise CorruptCheckpoint(
            f"record count mismatch: manifest says {manifest.record_count}, file has {count}",
            path=where,
        )
    if digest.hexdigest() != manifest.records_sha256:
        raise CorruptCheckpoint(
            f"records digest mismatch: manifest says {manifest.records_sha256}, "
            f"file hashes to {digest.hexdigest()}",
            path=where,
        )


def _lines(stream: BinaryIO, digest: Any, max_line_bytes: int, where: str) -> Iterator[bytes]:
    # Reads fixed chunks (hashing each once) and splits them into lines; only a
    # line that spans chunks is buffered, and never beyond max_line_bytes.
    partial = bytearray()
    line_no = 0
    while chunk := stream.read(_CHUNK_BYTES):
        digest.update(chunk)
        pieces = chunk.split(b"\n")
        tail = pieces.pop()
        for piece in pieces:
            line_no += 1
            if partial:
                partial += piece
                line = bytes(partial)
                partial.clear()
            else:
                line = piece
            if len(line) > max_line_bytes:
                raise _too_long(line_no, max_line_bytes, where)
            yield line
        partial += tail
        if len(partial) > max_line_bytes:
            raise _too_long(line_no + 1, max_line_bytes, where)
    if partial:
        raise CorruptCheckpoint(
            f"records file truncated: line {line_no + 1} has no final newline", path=where
        )


def _too_long(line_no: int, max_line_bytes: int, where: str) -> CorruptCheckpoint:
    return CorruptCheckpoint(f"line {line_no} longer than {max_line_bytes} bytes", path=where)


def _decode_record(line: bytes, line_no: int, where: str) -> dict[str, Any]:
    try:
        record = _RECORD_DECODER.decode(line.decode("utf-8"))
    except ValueError as exc:  # includes JSONDecodeError and UnicodeDecodeError
        raise CorruptCheckpoint(f"bad JSON on line {line_no}: {exc}", path=where) from exc
    if type(record) is not dict:
        raise CorruptCheckpoint(
            f"line {line_no} is a JSON {type(record).__name__}, not an object", path=where
        )
    return record
