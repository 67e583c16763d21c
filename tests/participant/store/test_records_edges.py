"""Edges of the records reader (envckpt.participant.store.records) found by mutation.

Each refusal says what is wrong and points at the records file; the line
cap allows a line of exactly the cap, in one read chunk or across two; a
re-read gives each line's size and refuses a file changed since it was
verified; ``allow_nan`` reaches the decoder from every reader.
"""

from __future__ import annotations

import hashlib
import os
import tracemalloc
import warnings
from pathlib import Path
from typing import Any

import pytest

from envckpt.errors import CorruptCheckpoint
from envckpt.participant.store import (
    Manifest,
    iter_records,
    records_path,
    reread_records,
    verify_records,
)

from helpers.store_files import rewrite_records, write

CHUNK = 1024 * 1024  # the reader's read size: lines may span two reads


def published(root: Path, data: bytes, count: int) -> Manifest:
    """A participant directory whose records file holds ``data`` (digest and count right)."""
    write(root)
    return rewrite_records(root, data, count)


def refusal(root: Path, manifest: Manifest, **kwargs: Any) -> str:
    """verify_records must refuse, pointing at the records file; its message."""
    with pytest.raises(CorruptCheckpoint) as caught:
        verify_records(root, manifest, **kwargs)
    assert caught.value.path == str(records_path(root, manifest))
    return caught.value.message


def test_a_missing_records_file_is_named_missing(tmp_path: Path) -> None:
    """The manifest names a file that is gone: 'records file missing'."""
    manifest = published(tmp_path, b"{}\n", 1)
    records_path(tmp_path, manifest).unlink()
    assert refusal(tmp_path, manifest) == "records file missing"


def test_an_unreadable_records_file_is_refused_saying_why(tmp_path: Path) -> None:
    """The records name is a directory: 'cannot open records file' and the OS reason."""
    manifest = published(tmp_path, b"{}\n", 1)
    path = records_path(tmp_path, manifest)
    path.unlink()
    path.mkdir()
    assert refusal(tmp_path, manifest).startswith("cannot open records file: ")


@pytest.mark.parametrize(("count", "found"), [(1, "more"), (3, "2")])
def test_a_count_mismatch_says_what_the_manifest_and_the_file_hold(
    tmp_path: Path, count: int, found: str
) -> None:
    """Two records under a manifest saying 1 or 3: both counts named."""
    manifest = published(tmp_path, b'{"a": 1}\n{"b": 2}\n', count)
    assert refusal(tmp_path, manifest) == (
        f"record count mismatch: manifest says {count}, file has {found}"
    )


def test_a_digest_mismatch_names_both_digests(tmp_path: Path) -> None:
    """Same size, other bytes: the manifest's digest and the file's are both named."""
    manifest = published(tmp_path, b'{"a": 1}\n', 1)
    records_path(tmp_path, manifest).write_bytes(b'{"a": 2}\n')
    actual = hashlib.sha256(b'{"a": 2}\n').hexdigest()
    assert refusal(tmp_path, manifest) == (
        f"records digest mismatch: manifest says {manifest.records_sha256}, file hashes to {actual}"
    )


def test_a_last_line_without_newline_is_a_truncated_file(tmp_path: Path) -> None:
    """The second line lacks its newline: truncated, naming line 2."""
    manifest = published(tmp_path, b'{"a": 1}\n{"b"', 2)
    assert refusal(tmp_path, manifest) == "records file truncated: line 2 has no final newline"


def padding(total: int) -> tuple[bytes, int]:
    """Short record lines of exactly ``total`` bytes (each under 12), and their number."""
    if not total:
        return b"", 0
    short = (total - 9) // 3
    rest = total - 3 * short
    return b'{"p":"' + b"x" * (rest - 9) + b'"}\n' + b"{}\n" * short, short + 1


@pytest.mark.parametrize("offset", [0, CHUNK - 6, CHUNK - 16])
def test_a_line_of_exactly_the_cap_is_read(tmp_path: Path, offset: int) -> None:
    """A 16-byte line under a 16-byte cap reads: at the start, split across two reads, or
    filling the end of one read with its newline in the next."""
    pad, count = padding(offset)
    line = b'{"k": "' + b"y" * 7 + b'"}'
    assert len(line) == 16 and len(pad) == offset
    manifest = published(tmp_path, pad + line + b"\n", count + 1)
    identity = verify_records(tmp_path, manifest, max_line_bytes=16)
    assert list(iter_records(tmp_path, manifest, max_line_bytes=16))[-1] == {"k": "y" * 7}
    last = list(reread_records(tmp_path, manifest, identity, max_line_bytes=16))[-1]
    assert last == ({"k": "y" * 7}, 17)


@pytest.mark.parametrize(("offset", "length"), [(0, 17), (CHUNK - 6, 17), (CHUNK - 20, 30)])
def test_a_line_past_the_cap_is_refused_with_its_number(
    tmp_path: Path, offset: int, length: int
) -> None:
    """A line over a 16-byte cap is refused naming its line number: alone, completed in the
    next read, or already too long at the end of a read."""
    pad, count = padding(offset)
    line = b'{"k": "' + b"y" * (length - 9) + b'"}'
    assert len(line) == length
    manifest = published(tmp_path, pad + line + b"\n", count + 1)
    assert refusal(tmp_path, manifest, max_line_bytes=16) == (
        f"line {count + 1} longer than 16 bytes"
    )


def test_a_reread_gives_each_line_s_size_and_the_same_records(tmp_path: Path) -> None:
    """reread_records yields each record with its line's bytes, newline included."""
    data = b'{"a": 1}\n{"bb": [1, 2]}\n'
    manifest = published(tmp_path, data, 2)
    identity = verify_records(tmp_path, manifest)
    assert list(reread_records(tmp_path, manifest, identity)) == [
        ({"a": 1}, 9),
        ({"bb": [1, 2]}, 15),
    ]


def test_a_reread_of_a_file_replaced_since_verification_is_refused(tmp_path: Path) -> None:
    """The same bytes under a new inode are not the file verified: refused before a record."""
    data = b'{"a": 1}\n'
    manifest = published(tmp_path, data, 1)
    identity = verify_records(tmp_path, manifest)
    path = records_path(tmp_path, manifest)
    replacement = path.with_name("replacement")
    replacement.write_bytes(data)
    os.replace(replacement, path)
    with pytest.raises(CorruptCheckpoint) as caught:
        next(reread_records(tmp_path, manifest, identity))
    assert caught.value.message == "records file changed since it was verified"
    assert caught.value.path == str(path)


def test_every_reader_takes_nan_only_when_allowed(tmp_path: Path) -> None:
    """A NaN token: refused by default, read as a float by each reader given allow_nan."""
    manifest = published(tmp_path, b'{"x": NaN}\n', 1)
    assert refusal(tmp_path, manifest).startswith("bad JSON on line 1")
    identity = verify_records(tmp_path, manifest, allow_nan=True)
    [record] = list(iter_records(tmp_path, manifest, allow_nan=True))
    [(again, _)] = list(reread_records(tmp_path, manifest, identity, allow_nan=True))
    assert record["x"] != record["x"] and again["x"] != again["x"]  # NaN, as written
    with pytest.raises(CorruptCheckpoint):
        list(iter_records(tmp_path, manifest))
    with pytest.raises(CorruptCheckpoint):
        list(reread_records(tmp_path, manifest, identity))


def test_reading_streams_in_bounded_memory(tmp_path: Path) -> None:
    """A 16 MB records file is read a chunk at a time: far less than the file is held."""
    line = b'{"t": "' + b"x" * 990 + b'"}\n'
    count = 16 * 1024
    manifest = published(tmp_path, line * count, count)
    tracemalloc.start()
    try:
        verify_records(tmp_path, manifest)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * 1024 * 1024, peak


def test_the_line_cap_reaches_the_decoder_from_every_reader(tmp_path: Path) -> None:
    """A cap below the line refuses through iter_records and reread_records too."""
    manifest = published(tmp_path, b'{"a": "long enough"}\n', 1)
    identity = verify_records(tmp_path, manifest)
    with pytest.raises(CorruptCheckpoint):
        list(iter_records(tmp_path, manifest, max_line_bytes=8))
    with pytest.raises(CorruptCheckpoint):
        list(reread_records(tmp_path, manifest, identity, max_line_bytes=8))


def test_reading_raises_no_warning(tmp_path: Path) -> None:
    """Verifying and streaming records warns about nothing (warnings as errors here)."""
    manifest = published(tmp_path, b'{"a": 1}\n', 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        identity = verify_records(tmp_path, manifest)
        assert list(reread_records(tmp_path, manifest, identity)) == [({"a": 1}, 9)]
