"""Checksummed JSON documents: the trainer's small files that must prove they are whole.

A document is a JSON object with a ``kind`` (what file this is), a
``schema_version`` (what this build can read), the body's own fields, and
``sha256``: the digest of the canonical encoding (sorted keys, no spaces,
ASCII) of everything else. A truncated, edited, foreign or future file is
refused with ``CorruptCheckpoint`` (or the subclass the caller names) before
anything is read from it.

    data = encode(kind="envckpt.ledger", schema_version=1, body={"entries": [...]})
    body = decode(data, kind="envckpt.ledger", schema_version=1,
                  fields={"entries"}, path=str(path))
    body = read(path, kind="envckpt.ledger", schema_version=1, fields={"entries"})
    data = read_capped(path, max_bytes=16 << 20, what="manifest")   # ManifestTooLarge

``read_capped`` is how every manifest reader opens its file: never through a
symbolic link, and refused by its size (``fstat``) before a byte is read.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from envckpt.errors import CorruptCheckpoint, ManifestTooLarge

_ENVELOPE = frozenset({"kind", "schema_version", "sha256"})


def canonical(value: object) -> bytes:
    """The one encoding digests are taken over. NaN and Infinity are refused."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False
    ).encode()


def encode(
    *, kind: str, schema_version: int, body: Mapping[str, Any], indent: int | None = None
) -> bytes:
    """The document for ``body`` with its envelope; ``indent`` only changes the layout."""
    clash = _ENVELOPE & set(body)
    if clash:
        raise ValueError(f"body fields {sorted(clash)} belong to the envelope")
    document: dict[str, Any] = {"kind": kind, "schema_version": schema_version, **body}
    document["sha256"] = hashlib.sha256(canonical(document)).hexdigest()
    if indent is None:
        return canonical(document) + b"\n"
    return json.dumps(document, sort_keys=True, indent=indent, allow_nan=False).encode() + b"\n"


def decode(
    data: bytes,
    *,
    kind: str,
    schema_version: int,
    fields: Iterable[str],
    path: str = "",
    error: type[CorruptCheckpoint] = CorruptCheckpoint,
) -> dict[str, Any]:
    """The body of a document ``encode`` wrote; ``error`` for anything else.

    The body must have exactly ``fields``; its values are the caller's to check.
    """
    try:
        document = json.loads(data.decode("utf-8"), parse_constant=_refuse_constant)
    except RecursionError:
        raise error(f"{kind}: nested too deeply to be a {kind}", path=path) from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise error(f"{kind}: not valid JSON (truncated?): {exc}", path=path) from exc
    if not isinstance(document, dict):
        raise error(f"{kind}: not a JSON object", path=path)
    if document.get("kind") != kind:
        raise error(f"foreign file kind {document.get('kind')!r}, expected {kind}", path=path)
    version = document.get("schema_version")
    if type(version) is not int or version != schema_version:
        raise error(f"{kind}: schema {version!r}, this build reads {schema_version}", path=path)
    expected = _ENVELOPE | set(fields)
    if set(document) != expected:
        raise error(f"{kind}: fields {sorted(document)}, expected {sorted(expected)}", path=path)
    claimed = document.pop("sha256")
    if claimed != hashlib.sha256(canonical(document)).hexdigest():
        raise error(f"{kind}: checksum mismatch", path=path)
    del document["kind"], document["schema_version"]
    return document


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


# Read in small pieces: one read of the cap would allocate the cap.
_READ_CHUNK = 64 * 1024


def read_capped(
    path: Path,
    *,
    max_bytes: int,
    what: str = "file",
    error: type[CorruptCheckpoint] = CorruptCheckpoint,
    missing: str = "",
) -> bytes:
    """The bytes of the regular file ``path``, at most ``max_bytes`` of them.

    ``error`` if it is missing, unreadable, a symbolic link (``O_NOFOLLOW``: a
    link could hand in another directory's file) or not a regular file;
    ``ManifestTooLarge`` if its size says it is over the cap (checked before
    reading) or it grew past it while being read.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        raise error(missing or f"{what} is missing", path=str(path)) from None
    except OSError as exc:
        if os.path.islink(path):
            raise error(f"{what} is a symbolic link", path=str(path)) from None
        raise error(f"{what} is unreadable: {exc}", path=str(path)) from exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise error(f"{what} is unreadable: not a regular file", path=str(path))
        if info.st_size > max_bytes:
            raise _too_large(what, path, max_bytes, info.st_size)
        chunks: list[bytes] = []
        size = 0
        while chunk := os.read(fd, min(_READ_CHUNK, max_bytes + 1 - size)):
            chunks.append(chunk)
            size += len(chunk)
            if size > max_bytes:
                raise _too_large(what, path, max_bytes, size)
    except OSError as exc:
        raise error(f"{what} is unreadable: {exc}", path=str(path)) from exc
    finally:
        os.close(fd)
    return b"".join(chunks)


def _too_large(what: str, path: Path, limit: int, found: int) -> ManifestTooLarge:
    return ManifestTooLarge(
        f"{what} is over its cap of {limit} bytes ({found} bytes or more)",
        path=str(path),
        limit=limit,
        found=found,
    )


def check_size(size: int, *, limit: int, what: str, path: Path | str) -> None:
    """``ManifestTooLarge`` if a manifest about to be written has more than ``limit`` bytes."""
    if size > limit:
        raise _too_large(what, Path(path), limit, size)


def check_entries(count: int, *, limit: int, what: str, path: Path | str) -> None:
    """``ManifestTooLarge`` if a manifest lists more than ``limit`` entries."""
    if count > limit:
        raise ManifestTooLarge(
            f"{what} lists {count} entries, over its cap of {limit}",
            path=str(path),
            limit=limit,
            found=count,
            unit="entries",
        )


def read(
    path: Path,
    *,
    kind: str,
    schema_version: int,
    fields: Iterable[str],
    what: str = "file",
    error: type[CorruptCheckpoint] = CorruptCheckpoint,
    max_bytes: int | None = None,
) -> dict[str, Any]:
    """Read ``path`` and ``decode`` it; a missing or unreadable file is ``error`` too.

    ``max_bytes``: refuse a larger file before reading it (``read_capped``).
    """
    if max_bytes is not None:
        data = read_capped(path, max_bytes=max_bytes, what=what, error=error)
    else:
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise error(f"{what} is missing", path=str(path)) from None
        except OSError as exc:
            raise error(f"{what} is unreadable: {exc}", path=str(path)) from exc
    return decode(
        data, kind=kind, schema_version=schema_version, fields=fields, path=str(path), error=error
    )
