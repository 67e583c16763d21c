"""Tests for envckpt.checksummed: documents that prove they are whole, or are refused."""

from __future__ import annotations

import hashlib
import json
import os
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from envckpt import checksummed
from envckpt.errors import CorruptCheckpoint, ManifestTooLarge

KIND = "envckpt.test_document"
BODY: dict[str, Any] = {"entries": [{"id": "r1", "attempt": 0}, {"id": "r2", "attempt": 3}]}


def read(data: bytes, **overrides: Any) -> dict[str, Any]:
    arguments: dict[str, Any] = {
        "kind": KIND,
        "schema_version": 1,
        "fields": ("entries",),
        "path": "/ckpt/doc.json",
    }
    arguments.update(overrides)
    return checksummed.decode(data, **arguments)


def forged(document: dict[str, Any]) -> bytes:
    """``document`` with a correct digest over whatever it holds (a forger's or a bug's file)."""
    unsigned = {key: value for key, value in document.items() if key != "sha256"}
    digest = hashlib.sha256(checksummed.canonical(unsigned)).hexdigest()
    return checksummed.canonical({**unsigned, "sha256": digest})


def envelope(**changes: Any) -> dict[str, Any]:
    document: dict[str, Any] = {"kind": KIND, "schema_version": 1, **BODY}
    document.update(changes)
    return document


def test_round_trip_returns_the_body() -> None:
    """decode(encode(body)) is the body, without the envelope fields."""
    assert read(checksummed.encode(kind=KIND, schema_version=1, body=BODY)) == BODY


def test_indent_changes_only_the_layout() -> None:
    """An indented document decodes to the same body; its digest covers the canonical form."""
    compact = checksummed.encode(kind=KIND, schema_version=1, body=BODY)
    indented = checksummed.encode(kind=KIND, schema_version=1, body=BODY, indent=2)
    assert compact != indented and b"\n  " in indented
    assert read(indented) == read(compact) == BODY
    assert json.loads(indented)["sha256"] == json.loads(compact)["sha256"]


def test_canonical_form_is_sorted_compact_ascii() -> None:
    """The digest's input has sorted keys, no spaces and only ASCII."""
    assert checksummed.canonical({"b": 1, "a": "é"}) == b'{"a":"\\u00e9","b":1}'


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_nan_and_infinity_are_refused_when_writing(value: float) -> None:
    """A body holding NaN or Infinity cannot be encoded (JSON has no such numbers)."""
    with pytest.raises(ValueError):
        checksummed.encode(kind=KIND, schema_version=1, body={"entries": [value]})
    with pytest.raises(ValueError):
        checksummed.encode(kind=KIND, schema_version=1, body={"entries": [value]}, indent=1)


@pytest.mark.parametrize("field", ["kind", "schema_version", "sha256"])
def test_a_body_field_named_like_the_envelope_is_refused(field: str) -> None:
    """The body cannot shadow kind, schema_version or sha256."""
    with pytest.raises(ValueError, match="envelope"):
        checksummed.encode(kind=KIND, schema_version=1, body={**BODY, field: 1})


def test_a_tampered_byte_is_refused() -> None:
    """Changing one value without fixing the digest is a checksum mismatch."""
    data = checksummed.encode(kind=KIND, schema_version=1, body=BODY)
    tampered = data.replace(b'"attempt":3', b'"attempt":4')
    assert tampered != data
    with pytest.raises(CorruptCheckpoint, match="checksum mismatch") as info:
        read(tampered)
    assert info.value.path == "/ckpt/doc.json"


def test_a_wrong_digest_type_is_refused() -> None:
    """A sha256 that is not the digest string (here a number) is a mismatch."""
    with pytest.raises(CorruptCheckpoint, match="checksum"):
        read(checksummed.canonical({**envelope(), "sha256": 0}))


def test_a_foreign_kind_with_a_correct_digest_is_refused() -> None:
    """A whole document of another kind is refused by kind, not accepted by its digest."""
    with pytest.raises(CorruptCheckpoint, match=r"foreign file kind 'envckpt\.ledger'"):
        read(forged(envelope(kind="envckpt.ledger")))


@pytest.mark.parametrize("version", [2, 0, "1", 1.0, True, None])
def test_another_schema_version_is_refused(version: object) -> None:
    """A future (or past, or mistyped) schema is refused even with a correct digest."""
    document = envelope(schema_version=version)
    if version is None:
        del document["schema_version"]
    with pytest.raises(CorruptCheckpoint, match="schema"):
        read(forged(document))


def test_an_extra_field_is_refused() -> None:
    """A field the reader does not know is refused, digest or not."""
    with pytest.raises(CorruptCheckpoint, match="fields"):
        read(forged(envelope(note="added later")))


def test_a_missing_field_is_refused() -> None:
    """A body without one of the expected fields is refused, digest or not."""
    document = envelope()
    del document["entries"]
    with pytest.raises(CorruptCheckpoint, match="fields"):
        read(forged(document))


def test_a_missing_digest_is_refused() -> None:
    """A document without sha256 is refused."""
    with pytest.raises(CorruptCheckpoint, match="fields"):
        read(checksummed.canonical(envelope()))


@pytest.mark.parametrize("literal", [b"NaN", b"Infinity", b"-Infinity"])
def test_nan_and_infinity_are_refused_when_reading(literal: bytes) -> None:
    """Python's JSON extensions are not JSON: a file holding them is refused."""
    data = checksummed.encode(kind=KIND, schema_version=1, body={"entries": [1]})
    with pytest.raises(CorruptCheckpoint, match="not valid JSON"):
        read(data.replace(b"[1]", b"[" + literal + b"]"))


def test_every_truncation_is_refused() -> None:
    """Each prefix of a document (its final newline aside) is refused."""
    data = checksummed.encode(kind=KIND, schema_version=1, body=BODY, indent=1)
    for length in range(len(data) - 1):
        with pytest.raises(CorruptCheckpoint):
            read(data[:length])


@pytest.mark.parametrize("data", [b"", b"\xff\xfe{}", b"[1, 2]", b'"text"', b"null"], ids=repr)
def test_non_objects_are_refused(data: bytes) -> None:
    """Empty files, invalid UTF-8 and JSON that is not an object are refused."""
    with pytest.raises(CorruptCheckpoint):
        read(data)


def test_the_caller_names_the_error_class() -> None:
    """``error`` selects the CorruptCheckpoint subclass raised, with the path."""

    class LedgerDamaged(CorruptCheckpoint):
        pass

    with pytest.raises(LedgerDamaged) as info:
        read(b"{", error=LedgerDamaged)
    assert info.value.path == "/ckpt/doc.json"


# ---- capped reads ---------------------------------------------------------------


def test_read_capped_reads_a_file_within_its_cap(tmp_path: Path) -> None:
    """A regular file up to the cap comes back whole; one byte more is ManifestTooLarge."""
    path = tmp_path / "doc.json"
    path.write_bytes(b"x" * 100)
    assert checksummed.read_capped(path, max_bytes=100) == b"x" * 100
    with pytest.raises(ManifestTooLarge) as caught:
        checksummed.read_capped(path, max_bytes=99, what="manifest")
    assert (caught.value.limit, caught.value.found, caught.value.unit) == (99, 100, "bytes")
    assert caught.value.path == str(path) and "manifest is over its cap of 99" in str(caught.value)


def test_read_capped_refuses_by_size_before_reading(tmp_path: Path) -> None:
    """A 64 GiB sparse file is refused from fstat alone: no read, nothing allocated."""
    path = tmp_path / "huge.json"
    with open(path, "wb") as stream:
        stream.truncate(64 << 30)
    tracemalloc.start()
    try:
        with pytest.raises(ManifestTooLarge) as caught:
            checksummed.read_capped(path, max_bytes=1 << 20)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert caught.value.found == 64 << 30 and peak < 64 * 1024


def test_read_capped_refuses_a_file_that_grows_past_the_cap_while_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cap holds on what is read, not only on what fstat said."""
    path = tmp_path / "growing.json"
    path.write_bytes(b"x" * 10)
    real_read = os.read

    def growing(fd: int, size: int) -> bytes:
        return real_read(fd, size) or b"y" * size  # never reaches an end

    monkeypatch.setattr(checksummed.os, "read", growing)
    with pytest.raises(ManifestTooLarge):
        checksummed.read_capped(path, max_bytes=200_000)


@pytest.mark.parametrize("kind", ["missing", "link", "fifo", "directory"])
def test_read_capped_refuses_what_is_no_regular_file(tmp_path: Path, kind: str) -> None:
    """Missing, a link (even to a good file), a FIFO (no blocking open) or a directory."""
    good = tmp_path / "good.json"
    good.write_bytes(b"{}")
    path = tmp_path / "doc.json"
    expected = {
        "missing": "manifest is missing",
        "link": "manifest is a symbolic link",
        "fifo": "not a regular file",
        "directory": "not a regular file",
    }[kind]
    if kind == "link":
        path.symlink_to(good)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    with pytest.raises(CorruptCheckpoint, match=expected) as caught:
        checksummed.read_capped(path, max_bytes=1000, what="manifest")
    assert not isinstance(caught.value, ManifestTooLarge)


def test_check_entries_refuses_past_the_limit() -> None:
    """At the limit passes; one more is ManifestTooLarge in entries."""
    checksummed.check_entries(10, limit=10, what="manifest", path="/m")
    with pytest.raises(ManifestTooLarge) as caught:
        checksummed.check_entries(11, limit=10, what="manifest", path="/m")
    assert (caught.value.found, caught.value.limit, caught.value.unit) == (11, 10, "entries")


def test_a_document_nested_past_the_recursion_limit_is_refused() -> None:
    """Deep nesting is CorruptCheckpoint, never a RecursionError escaping the reader."""
    with pytest.raises(CorruptCheckpoint, match="nested too deeply"):
        read(b"[" * 100_000 + b"]" * 100_000)
