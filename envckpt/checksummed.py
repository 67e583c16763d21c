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
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from envckpt.errors import CorruptCheckpoint

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


def read(
    path: Path,
    *,
    kind: str,
    schema_version: int,
    fields: Iterable[str],
    what: str = "file",
    error: type[CorruptCheckpoint] = CorruptCheckpoint,
) -> dict[str, Any]:
    """Read ``path`` and ``decode`` it; a missing or unreadable file is ``error`` too."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise error(f"{what} is missing", path=str(path)) from None
    except OSError as exc:
        raise error(f"{what} is unreadable: {exc}", path=str(path)) from exc
    return decode(
        data, kind=kind, schema_version=schema_version, fields=fields, path=str(path), error=error
    )
