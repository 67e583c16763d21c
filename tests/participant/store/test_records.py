"""Tests for envckpt.participant.store.records: the records file, written and read back."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envckpt.errors import CorruptCheckpoint
from envckpt.participant.store import (
    Manifest,
    encode_record,
    iter_records,
    records_path,
    reread_records,
    verify_records,
)

from helpers.examples import examples
from helpers.store_files import RECORDS, pdir, read, restore, rewrite_records, write


def test_round_trip_preserves_records_and_key_order(tmp_path: Path) -> None:
    """Records read back equal the written ones, with keys in the written order."""
    write(tmp_path)
    restored = restore(tmp_path)
    assert restored == RECORDS
    assert [json.dumps(r) for r in restored] == [json.dumps(r) for r in RECORDS]
    assert list(restored[0]) == ["zeta", "alpha", "mid"]
    assert list(restored[0]["alpha"][2]) == ["y", "b"]


def test_records_file_is_named_by_its_sha256(tmp_path: Path) -> None:
    """The records file is records-<sha256 of its bytes>.jsonl and the manifest says so."""
    manifest = write(tmp_path)
    path = records_path(tmp_path, manifest)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert path.name == f"records-{digest}.jsonl"
    assert manifest.records_sha256 == digest
    assert manifest.records_file == path.name
    assert manifest.record_count == len(RECORDS)


def test_records_are_compact_lines(tmp_path: Path) -> None:
    """Each record is one compact JSON line with a final newline."""
    manifest = write(tmp_path, records=[{"a": 1, "b": [1, 2]}])
    assert records_path(tmp_path, manifest).read_bytes() == b'{"a":1,"b":[1,2]}\n'


def test_empty_records_round_trip(tmp_path: Path) -> None:
    """A participant with no records publishes an empty file and a count of zero."""
    manifest = write(tmp_path, records=[])
    assert manifest.record_count == 0
    assert restore(tmp_path) == []


def test_non_mapping_record_fails_and_leaves_no_files(tmp_path: Path) -> None:
    """A record that is not a mapping aborts the write and its temp file is removed."""
    with pytest.raises(TypeError, match="record 1"):
        write(tmp_path, records=[{"a": 1}, ["not", "a", "dict"]])
    assert list(pdir(tmp_path).iterdir()) == []


def test_nan_record_is_refused(tmp_path: Path) -> None:
    """NaN is not JSON, so a record holding it is refused at write time."""
    with pytest.raises(ValueError):
        write(tmp_path, records=[{"x": float("nan")}])
    assert list(pdir(tmp_path).iterdir()) == []


def test_truncated_records_file_is_corrupt(tmp_path: Path) -> None:
    """A records file cut short in the middle of a line is refused."""
    manifest = write(tmp_path)
    path = records_path(tmp_path, manifest)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 5])
    with pytest.raises(CorruptCheckpoint, match="truncated"):
        verify_records(tmp_path, manifest)


def test_records_file_missing_a_whole_line_is_corrupt(tmp_path: Path) -> None:
    """A records file cut at a line boundary fails the count check."""
    manifest = write(tmp_path)
    path = records_path(tmp_path, manifest)
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:-1]))
    with pytest.raises(CorruptCheckpoint, match="count mismatch"):
        verify_records(tmp_path, manifest)


def test_flipped_byte_is_a_digest_mismatch(tmp_path: Path) -> None:
    """Changing one byte of a value is caught by the digest."""
    manifest = write(tmp_path, records=[{"name": "abcdef"}])
    path = records_path(tmp_path, manifest)
    data = bytearray(path.read_bytes())
    data[data.index(b"c")] = ord("x")
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptCheckpoint, match="digest mismatch"):
        verify_records(tmp_path, manifest)
    # iter_records yields the (wrong) record and then raises at the end.
    stream = iter_records(tmp_path, manifest)
    assert next(stream) == {"name": "abxdef"}
    with pytest.raises(CorruptCheckpoint, match="digest mismatch"):
        next(stream)


def test_extra_line_is_corrupt(tmp_path: Path) -> None:
    """A record appended after publishing is refused before it is yielded."""
    manifest = write(tmp_path)
    path = records_path(tmp_path, manifest)
    with path.open("ab") as stream:
        stream.write(b'{"smuggled":true}\n')
    with pytest.raises(CorruptCheckpoint, match="count mismatch"):
        verify_records(tmp_path, manifest)
    assert len([r for r in _iter_until_error(tmp_path, manifest)]) == len(RECORDS)


def _iter_until_error(root: Path, manifest: Manifest) -> Iterator[dict[str, Any]]:
    try:
        yield from iter_records(root, manifest)
    except CorruptCheckpoint:
        return


def test_missing_records_file_is_corrupt(tmp_path: Path) -> None:
    """A manifest whose records file is gone is refused."""
    manifest = write(tmp_path)
    records_path(tmp_path, manifest).unlink()
    with pytest.raises(CorruptCheckpoint, match="records file missing"):
        verify_records(tmp_path, manifest)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b'{"a":1}\n{"a":\n', "bad JSON on line 2"),
        (b'{"a":1}\n\n', "bad JSON on line 2"),
        (b'{"a":1}\n[1,2]\n', "line 2 is a JSON list"),
        (b'{"a":NaN}\n', "bad JSON on line 1"),
        (b'{"a":"\xff"}\n', "bad JSON on line 1"),
    ],
)
def test_bad_json_line_is_corrupt(tmp_path: Path, data: bytes, message: str) -> None:
    """A line that is not one JSON object is refused with its line number, even if hashed right."""
    write(tmp_path)
    manifest = rewrite_records(tmp_path, data, data.count(b"\n"))
    assert read(tmp_path) == manifest
    with pytest.raises(CorruptCheckpoint, match=message):
        verify_records(tmp_path, manifest)


def test_overlong_line_is_corrupt(tmp_path: Path) -> None:
    """A line longer than max_line_bytes is refused without being buffered whole."""
    manifest = write(tmp_path, records=[{"a": 1}, {"pad": "x" * 5000}])
    with pytest.raises(CorruptCheckpoint, match="line 2 longer than 100 bytes"):
        verify_records(tmp_path, manifest, max_line_bytes=100)
    verify_records(tmp_path, manifest, max_line_bytes=5100)


def test_overlong_record_is_refused_at_write(tmp_path: Path) -> None:
    """The writer refuses a record the reader would refuse for its length."""
    with pytest.raises(ValueError, match="bytes >"):
        write(tmp_path, records=[{"pad": "x" * 200}], max_line_bytes=100)


def test_corrupt_checkpoint_carries_the_path(tmp_path: Path) -> None:
    """Read errors name the file they are about."""
    manifest = write(tmp_path)
    records_path(tmp_path, manifest).unlink()
    with pytest.raises(CorruptCheckpoint) as info:
        verify_records(tmp_path, manifest)
    assert info.value.path == str(records_path(tmp_path, manifest))


def test_streaming_write_from_a_generator(tmp_path: Path) -> None:
    """200k records from a generator are written while being generated, and read back."""
    total = 200_000
    seen_on_disk: list[int] = []

    def generate() -> Iterator[dict[str, Any]]:
        for index in range(total):
            if index == total - 1:
                # Before the last record, most bytes must already be in the temp file.
                seen_on_disk.append(sum(p.stat().st_size for p in pdir(tmp_path).iterdir()))
            yield {"i": index, "key": f"task-{index}"}

    manifest = write(tmp_path, records=generate())
    assert manifest.record_count == total
    size = records_path(tmp_path, manifest).stat().st_size
    assert seen_on_disk[0] > size // 2
    verify_records(tmp_path, manifest)
    count = 0
    for expected, record in enumerate(iter_records(tmp_path, manifest)):
        assert record["i"] == expected
        count += 1
    assert count == total


_JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)


_JSON_VALUES = st.recursive(
    _JSON_SCALARS,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4)
    ),
    max_leaves=12,
)


_RECORD_LISTS = st.lists(st.dictionaries(st.text(), _JSON_VALUES, max_size=6), max_size=12)


@settings(max_examples=examples(60), deadline=None)
@given(records=_RECORD_LISTS)
def test_random_records_round_trip_exactly(records: list[dict[str, Any]]) -> None:
    """Any list of JSON-able dicts round-trips with equal values, types and key order."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write(root, records=records)
        restored = restore(root)
    assert restored == records
    assert [json.dumps(r) for r in restored] == [json.dumps(r) for r in records]


# ------------------------------------------------------------- encoded lines


def test_encoded_lines_are_written_as_given(tmp_path: Path) -> None:
    """Lines already encoded are written byte for byte, one per line, and read back."""
    lines = [encode_record({"a": 1}), b'{"b":[1,2]}']
    manifest = write(tmp_path, lines=iter(lines))
    assert records_path(tmp_path, manifest).read_bytes() == b'{"a":1}\n{"b":[1,2]}\n'
    assert restore(tmp_path) == [{"a": 1}, {"b": [1, 2]}]


def test_records_and_lines_are_given_one_way_only(tmp_path: Path) -> None:
    """write_checkpoint takes records or lines, exactly one of them."""
    with pytest.raises(TypeError, match="exactly one"):
        write(tmp_path, records=[{"a": 1}], lines=[b'{"a":1}'])
    assert not (tmp_path / "gym").exists()


def test_a_line_holding_a_newline_is_refused(tmp_path: Path) -> None:
    """A line with a raw newline would split into two records: refused, nothing published."""
    with pytest.raises(ValueError, match="record 1 holds a newline"):
        write(tmp_path, lines=[b'{"a":1}', b'{"a":\n1}'])
    assert list(pdir(tmp_path).iterdir()) == []


# ------------------------------------------------------- verify, then reread


def test_verify_visits_every_record_in_order(tmp_path: Path) -> None:
    """verify_records hands each record to visit, in file order, and a refusal stops it."""
    manifest = write(tmp_path)
    seen: list[dict[str, Any]] = []
    verify_records(tmp_path, manifest, visit=seen.append)
    assert seen == RECORDS

    def refuse(record: dict[str, Any]) -> None:
        raise ValueError("not this one")

    with pytest.raises(ValueError, match="not this one"):
        verify_records(tmp_path, manifest, visit=refuse)


def test_reread_gives_the_verified_records_with_their_sizes(tmp_path: Path) -> None:
    """A reread yields each record with the size of its line, newline included."""
    manifest = write(tmp_path)
    identity = verify_records(tmp_path, manifest)
    reread = list(reread_records(tmp_path, manifest, identity))
    assert [record for record, _ in reread] == RECORDS
    raw = records_path(tmp_path, manifest).read_bytes()
    assert [size for _, size in reread] == [len(line) for line in raw.splitlines(keepends=True)]


@pytest.mark.parametrize("change", ["rewritten", "replaced"])
def test_reread_refuses_a_file_changed_since_it_was_verified(tmp_path: Path, change: str) -> None:
    """The same bytes written again, or another file under the name: refused before any record."""
    manifest = write(tmp_path)
    identity = verify_records(tmp_path, manifest)
    path = records_path(tmp_path, manifest)
    data = path.read_bytes()
    if change == "rewritten":
        os.utime(path, ns=(1, 1))  # as a write in place would move the times
    else:
        path.unlink()
        path.write_bytes(data)
    stream = reread_records(tmp_path, manifest, identity)
    with pytest.raises(CorruptCheckpoint, match="changed since it was verified"):
        next(stream)
