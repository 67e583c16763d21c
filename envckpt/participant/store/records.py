"""A participant's records file: one compact JSON object per line, hashed as written.

Written under a temporary name, hashed while written, fsynced, then renamed
to its digest name (``records-<sha256>.jsonl``); record key order is kept.
Read back as a stream: fixed chunks hashed once, split into lines, every line
a JSON object, and the count and digest checked at the end. A restore reads
the file twice (``verify_records``, then ``reread_records`` to install), and
hashes it only the first time: the second read refuses a file that is no
longer the one verified (device, inode, size, modification and change times).

Lines are encoded and decoded by ``lines`` (orjson writes, the standard
library decides the edge cases and reads).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from envckpt.errors import CorruptCheckpoint
from envckpt.participant.store.layout import (
    DEFAULT_MAX_LINE_BYTES,
    MANIFEST_NAME,
    StrPath,
    records_file_name,
    refuse_published,
    temp_path,
)
from envckpt.participant.store.lines import decode_record
from envckpt.participant.store.manifest import Manifest, records_path

# The records file is written through a buffer of this size and read back in
# chunks of it: large enough that write() and read() are called rarely, small
# enough that memory stays flat however many records there are.
_CHUNK_BYTES = 1024 * 1024


def write_records(directory: Path, lines: Iterable[bytes], max_line_bytes: int) -> tuple[str, int]:
    """Write encoded record ``lines`` (no newlines), hashed as written; return digest, count.

    The file is fsynced under its final name; the caller syncs ``directory``
    (the new entry) before anything may point at it.
    """
    digest = hashlib.sha256()
    count = 0
    tmp = temp_path(directory, "records")
    try:
        # One line at a time through the file's fixed buffer, each line freed
        # before the next is made: the allocator reuses one block. Joining a
        # megabyte of pending lines instead grew and trimmed the heap (brk)
        # per chunk, which cost more system time than the whole write.
        with open(tmp, "xb", buffering=_CHUNK_BYTES) as stream:
            write, update = stream.write, digest.update
            for line in lines:
                # A line the reader would refuse is refused now, not at restore.
                if len(line) > max_line_bytes:
                    raise ValueError(
                        f"record {count} encodes to {len(line)} bytes > {max_line_bytes}"
                    )
                if b"\n" in line:
                    raise ValueError(f"record {count} holds a newline: not one encoded line")
                record = line + b"\n"
                update(record)
                write(record)
                count += 1
            stream.flush()
            os.fsync(stream.fileno())
        # A writer that lost a race while we were writing: leave its directory alone.
        refuse_published(directory / MANIFEST_NAME)
        # The name is the digest, so an existing file of that name (a retry after
        # a crash, a concurrent writer) already holds these exact bytes.
        os.replace(tmp, directory / records_file_name(digest.hexdigest()))
    finally:
        tmp.unlink(missing_ok=True)
    return digest.hexdigest(), count


@dataclass(frozen=True, slots=True)
class FileIdentity:
    """Which file was read, and which version of it: one replaced or written since differs."""

    device: int
    inode: int
    size: int
    mtime_ns: int
    ctime_ns: int

    @classmethod
    def of(cls, fd: int) -> FileIdentity:
        status = os.fstat(fd)
        return cls(
            status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns
        )


def verify_records(
    checkpoint_dir: StrPath,
    manifest: Manifest,
    *,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    visit: Callable[[dict[str, Any]], None] | None = None,
    allow_nan: bool = False,
) -> FileIdentity:
    """Read the whole records file once: every line a JSON object, count and digest right.

    ``visit`` sees each record in file order (it may raise to refuse one).
    Returns the identity of the file read, for ``reread_records``.
    """
    path = records_path(checkpoint_dir, manifest)
    identity: list[FileIdentity] = []
    scan = _scan_sized(
        path, manifest, max_line_bytes, hashed=True, opened=identity, allow_nan=allow_nan
    )
    for record, _size in scan:
        if visit is not None:
            visit(record)
    return identity[0]


def iter_records(
    checkpoint_dir: StrPath,
    manifest: Manifest,
    *,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    allow_nan: bool = False,
) -> Iterator[dict[str, Any]]:
    """Stream the records in file order, keys in their exported order.

    The digest and count are only known at the end, so a mismatch raises after
    the last record; call ``verify_records`` first before installing anything.
    """
    path = records_path(checkpoint_dir, manifest)
    sized = _scan_sized(path, manifest, max_line_bytes, hashed=True, allow_nan=allow_nan)
    return (record for record, _size in sized)


def reread_records(
    checkpoint_dir: StrPath,
    manifest: Manifest,
    identity: FileIdentity,
    *,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    allow_nan: bool = False,
) -> Iterator[tuple[dict[str, Any], int]]:
    """The records of a file ``verify_records`` read, again, each with its line's size
    in bytes, without hashing them again.

    Refuses (``CorruptCheckpoint``) a file that is no longer the one verified
    (replaced, or written since: another identity), before its first record.
    """
    path = records_path(checkpoint_dir, manifest)
    return _scan_sized(
        path, manifest, max_line_bytes, hashed=False, expect=identity, allow_nan=allow_nan
    )


def _scan_sized(
    path: Path,
    manifest: Manifest,
    max_line_bytes: int,
    *,
    hashed: bool,
    opened: list[FileIdentity] | None = None,
    expect: FileIdentity | None = None,
    allow_nan: bool = False,
) -> Iterator[tuple[dict[str, Any], int]]:
    where = str(path)
    digest = hashlib.sha256() if hashed else None
    count = 0
    try:
        stream = open(path, "rb", buffering=0)  # noqa: SIM115 - closed by the with below
    except FileNotFoundError:
        raise CorruptCheckpoint("records file missing", path=where) from None
    except OSError as exc:
        raise CorruptCheckpoint(f"cannot open records file: {exc}", path=where) from exc
    with stream:
        identity = FileIdentity.of(stream.fileno())
        if expect is not None and identity != expect:
            raise CorruptCheckpoint("records file changed since it was verified", path=where)
        if opened is not None:
            opened.append(identity)
        for line in _lines(stream, digest, max_line_bytes, where):
            count += 1
            if count > manifest.record_count:
                raise CorruptCheckpoint(
                    f"record count mismatch: manifest says {manifest.record_count}, file has more",
                    path=where,
                )
            record = decode_record(line, line_no=count, where=where, allow_nan=allow_nan)
            yield record, len(line) + 1
    if count != manifest.record_count:
        raise CorruptCheckpoint(
            f"record count mismatch: manifest says {manifest.record_count}, file has {count}",
            path=where,
        )
    if digest is not None and digest.hexdigest() != manifest.records_sha256:
        raise CorruptCheckpoint(
            f"records digest mismatch: manifest says {manifest.records_sha256}, "
            f"file hashes to {digest.hexdigest()}",
            path=where,
        )


def _lines(
    stream: BinaryIO, digest: Any | None, max_line_bytes: int, where: str
) -> Iterator[bytes]:
    # Reads fixed chunks (hashing each once, if asked) and splits them into
    # lines; only a line that spans chunks is buffered, and never beyond
    # max_line_bytes.
    partial = bytearray()
    line_no = 0
    while chunk := stream.read(_CHUNK_BYTES):
        if digest is not None:
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
