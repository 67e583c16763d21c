"""Tests for envckpt.participant.store: the records file and manifest on disk."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envckpt.errors import CorruptCheckpoint
from envckpt.participant.store import (
    MANIFEST_NAME,
    SCHEMA_VERSION,
    Manifest,
    iter_records,
    participant_dir,
    read_manifest,
    records_path,
    verify_records,
    write_checkpoint,
)

KIND = "agent"
INSTANCE = "simple_agent"
CKPT = "ckpt-0001"

RECORDS: list[dict[str, Any]] = [
    {"zeta": 1, "alpha": [1, 2, {"y": None, "b": True}], "mid": "text é \n ☃"},
    {"episode_id": "task-7", "attempt": 0, "turn": 3, "reward": 0.25},
    {},
]


def _write(root: Path, records: Any = None, **kwargs: Any) -> Manifest:
    return write_checkpoint(
        root,
        kind=kwargs.pop("kind", KIND),
        instance=kwargs.pop("instance", INSTANCE),
        checkpoint_id=kwargs.pop("checkpoint_id", CKPT),
        records=RECORDS if records is None else records,
        **kwargs,
    )


def _read(root: Path, **kwargs: Any) -> Manifest:
    return read_manifest(
        root,
        kind=kwargs.pop("kind", KIND),
        instance=kwargs.pop("instance", INSTANCE),
        checkpoint_id=kwargs.pop("checkpoint_id", CKPT),
    )


def _restore(root: Path) -> list[dict[str, Any]]:
    manifest = _read(root)
    verify_records(root, manifest)
    return list(iter_records(root, manifest))


def _pdir(root: Path) -> Path:
    return participant_dir(root, KIND, INSTANCE)


def _snapshot(directory: Path) -> dict[str, tuple[bytes, int]]:
    return {
        path.name: (path.read_bytes(), path.stat().st_ino) for path in sorted(directory.iterdir())
    }


def _rewrite_manifest(root: Path, **changes: Any) -> None:
    path = _pdir(root) / MANIFEST_NAME
    body = json.loads(path.read_text())
    body.update(changes)
    path.write_text(json.dumps(body))


# ------------------------------------------------------------------ round trip


def test_round_trip_preserves_records_and_key_order(tmp_path: Path) -> None:
    """Records read back equal the written ones, with keys in the written order."""
    _write(tmp_path)
    restored = _restore(tmp_path)
    assert restored == RECORDS
    assert [json.dumps(r) for r in restored] == [json.dumps(r) for r in RECORDS]
    assert list(restored[0]) == ["zeta", "alpha", "mid"]
    assert list(restored[0]["alpha"][2]) == ["y", "b"]


def test_records_file_is_named_by_its_sha256(tmp_path: Path) -> None:
    """The records file is records-<sha256 of its bytes>.jsonl and the manifest says so."""
    manifest = _write(tmp_path)
    path = records_path(tmp_path, manifest)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert path.name == f"records-{digest}.jsonl"
    assert manifest.records_sha256 == digest
    assert manifest.records_file == path.name
    assert manifest.record_count == len(RECORDS)


def test_records_are_compact_lines(tmp_path: Path) -> None:
    """Each record is one compact JSON line with a final newline."""
    manifest = _write(tmp_path, records=[{"a": 1, "b": [1, 2]}])
    assert records_path(tmp_path, manifest).read_bytes() == b'{"a":1,"b":[1,2]}\n'


def test_manifest_has_sorted_keys_and_standard_fields(tmp_path: Path) -> None:
    """manifest.json lists its keys sorted and carries every standard field and the extras."""
    manifest = _write(tmp_path, extras={"staging_keys": ["k2", "k1"], "episode_ids": ["e1"]})
    raw = (_pdir(tmp_path) / MANIFEST_NAME).read_text()
    body = json.loads(raw)
    assert list(body) == sorted(body)
    assert body == {
        "schema_version": SCHEMA_VERSION,
        "kind": KIND,
        "instance": INSTANCE,
        "checkpoint_id": CKPT,
        "records_file": manifest.records_file,
        "records_sha256": manifest.records_sha256,
        "record_count": 3,
        "episode_ids": ["e1"],
        "staging_keys": ["k2", "k1"],
    }


def test_manifest_read_back_equals_written_one(tmp_path: Path) -> None:
    """read_manifest returns a Manifest equal to the one write_checkpoint returned."""
    written = _write(tmp_path, extras={"episode_ids": ["e1", "e2"], "meta": {"n": 1}})
    read = _read(tmp_path)
    assert read == written
    assert read.extras["episode_ids"] == ("e1", "e2")
    assert read.extras["meta"]["n"] == 1


def test_extras_are_read_only(tmp_path: Path) -> None:
    """Manifest extras cannot be mutated, nor changed through the caller's objects."""
    ids = ["e1"]
    manifest = _write(tmp_path, extras={"episode_ids": ids})
    ids.append("e2")
    assert manifest.extras["episode_ids"] == ("e1",)
    with pytest.raises(TypeError):
        manifest.extras["x"] = 1  # type: ignore[index]


def test_extras_may_not_override_standard_fields(tmp_path: Path) -> None:
    """Extras naming a standard field are refused before anything is written."""
    with pytest.raises(ValueError, match="record_count"):
        _write(tmp_path, extras={"record_count": 0})
    assert not (tmp_path / "gym").exists()


def test_non_json_extras_are_refused(tmp_path: Path) -> None:
    """Extras that are not JSON are refused before anything is written."""
    with pytest.raises(ValueError, match="not JSON"):
        _write(tmp_path, extras={"x": object()})
    assert not (tmp_path / "gym").exists()


def test_participant_dir_layout_and_validation(tmp_path: Path) -> None:
    """participant_dir is <dir>/gym/<kind>/<instance> and refuses unsafe components."""
    assert participant_dir(tmp_path, "agent", "a1") == tmp_path / "gym" / "agent" / "a1"
    for bad in ("..", "a/b", "", "."):
        with pytest.raises(ValueError):
            participant_dir(tmp_path, bad, "a1")
        with pytest.raises(ValueError):
            participant_dir(tmp_path, "agent", bad)


def test_empty_records_round_trip(tmp_path: Path) -> None:
    """A participant with no records publishes an empty file and a count of zero."""
    manifest = _write(tmp_path, records=[])
    assert manifest.record_count == 0
    assert _restore(tmp_path) == []


def test_non_mapping_record_fails_and_leaves_no_files(tmp_path: Path) -> None:
    """A record that is not a mapping aborts the write and its temp file is removed."""
    with pytest.raises(TypeError, match="record 1"):
        _write(tmp_path, records=[{"a": 1}, ["not", "a", "dict"]])
    assert list(_pdir(tmp_path).iterdir()) == []


def test_nan_record_is_refused(tmp_path: Path) -> None:
    """NaN is not JSON, so a record holding it is refused at write time."""
    with pytest.raises(ValueError):
        _write(tmp_path, records=[{"x": float("nan")}])
    assert list(_pdir(tmp_path).iterdir()) == []


# ----------------------------------------------------------- create-only


def test_second_write_is_refused_and_files_untouched(tmp_path: Path) -> None:
    """Writing into a published directory raises and changes no file."""
    _write(tmp_path)
    before = _snapshot(_pdir(tmp_path))
    with pytest.raises(CorruptCheckpoint, match="already published"):
        _write(tmp_path, records=[{"other": 1}])
    with pytest.raises(CorruptCheckpoint, match="already published"):
        _write(tmp_path)
    assert _snapshot(_pdir(tmp_path)) == before


def test_racing_writers_exactly_one_publishes(tmp_path: Path) -> None:
    """Two threads publishing at the same moment: one wins, the other gets a typed error."""
    barrier = threading.Barrier(2)
    outcomes: dict[int, Any] = {}

    def writer(index: int) -> None:
        try:
            outcomes[index] = _write(
                tmp_path,
                records=[{"writer": index}],
                before_publish=lambda: barrier.wait(timeout=30),
            )
        except CorruptCheckpoint as exc:
            outcomes[index] = exc

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    winners = [o for o in outcomes.values() if isinstance(o, Manifest)]
    losers = [o for o in outcomes.values() if isinstance(o, CorruptCheckpoint)]
    assert len(winners) == 1 and len(losers) == 1
    assert "already published" in losers[0].message
    assert _read(tmp_path) == winners[0]
    assert _restore(tmp_path) == list(iter_records(tmp_path, winners[0]))
    # The loser removed its own records file; only the winner's remains.
    assert sorted(p.name for p in _pdir(tmp_path).iterdir()) == sorted(
        [MANIFEST_NAME, winners[0].records_file]
    )


def test_crash_before_publish_leaves_unpublished_directory(tmp_path: Path) -> None:
    """A crash between records and manifest leaves no manifest, and reading fails."""

    def crash() -> None:
        raise RuntimeError("simulated crash")

    with pytest.raises(RuntimeError, match="simulated crash"):
        _write(tmp_path, before_publish=crash)
    names = [p.name for p in _pdir(tmp_path).iterdir()]
    assert MANIFEST_NAME not in names
    assert [n for n in names if n.startswith("records-")]
    with pytest.raises(CorruptCheckpoint, match="no manifest"):
        _read(tmp_path)


def test_unpublished_directory_can_be_written_again(tmp_path: Path) -> None:
    """After a crash before publishing, a retry publishes normally."""

    def crash() -> None:
        raise RuntimeError("simulated crash")

    with pytest.raises(RuntimeError):
        _write(tmp_path, before_publish=crash)
    _write(tmp_path)
    assert _restore(tmp_path) == RECORDS


def test_missing_checkpoint_is_corrupt(tmp_path: Path) -> None:
    """A participant directory that never existed reads as an unpublished checkpoint."""
    with pytest.raises(CorruptCheckpoint, match="no manifest: unpublished or missing"):
        _read(tmp_path)


# ------------------------------------------------------------------ corruption


def test_truncated_records_file_is_corrupt(tmp_path: Path) -> None:
    """A records file cut short in the middle of a line is refused."""
    manifest = _write(tmp_path)
    path = records_path(tmp_path, manifest)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 5])
    with pytest.raises(CorruptCheckpoint, match="truncated"):
        verify_records(tmp_path, manifest)


def test_records_file_missing_a_whole_line_is_corrupt(tmp_path: Path) -> None:
    """A records file cut at a line boundary fails the count check."""
    manifest = _write(tmp_path)
    path = records_path(tmp_path, manifest)
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:-1]))
    with pytest.raises(CorruptCheckpoint, match="count mismatch"):
        verify_records(tmp_path, manifest)


def test_flipped_byte_is_a_digest_mismatch(tmp_path: Path) -> None:
    """Changing one byte of a value is caught by the digest."""
    manifest = _write(tmp_path, records=[{"name": "abcdef"}])
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
    manifest = _write(tmp_path)
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


def test_manifest_count_mismatch_is_corrupt(tmp_path: Path) -> None:
    """A manifest whose record_count disagrees with the file is refused."""
    _write(tmp_path)
    _rewrite_manifest(tmp_path, record_count=len(RECORDS) + 1)
    manifest = _read(tmp_path)
    with pytest.raises(CorruptCheckpoint, match="count mismatch"):
        verify_records(tmp_path, manifest)


def test_missing_records_file_is_corrupt(tmp_path: Path) -> None:
    """A manifest whose records file is gone is refused."""
    manifest = _write(tmp_path)
    records_path(tmp_path, manifest).unlink()
    with pytest.raises(CorruptCheckpoint, match="records file missing"):
        verify_records(tmp_path, manifest)


@pytest.mark.parametrize(
    ("field", "value"),
    [("kind", "resources"), ("instance", "other_agent"), ("checkpoint_id", "ckpt-0002")],
)
def test_foreign_manifest_is_corrupt(tmp_path: Path, field: str, value: str) -> None:
    """A manifest naming another kind, instance or checkpoint is refused."""
    _write(tmp_path)
    _rewrite_manifest(tmp_path, **{field: value})
    with pytest.raises(CorruptCheckpoint, match="foreign checkpoint"):
        _read(tmp_path)


def test_manifest_copied_from_another_instance_is_corrupt(tmp_path: Path) -> None:
    """A whole participant directory copied under another instance's name is refused."""
    _write(tmp_path, instance="agent_a")
    source = participant_dir(tmp_path, KIND, "agent_a")
    target = participant_dir(tmp_path, KIND, "agent_b")
    source.rename(target)
    with pytest.raises(CorruptCheckpoint, match="foreign checkpoint"):
        _read(tmp_path, instance="agent_b")


def test_read_without_checkpoint_id_accepts_any(tmp_path: Path) -> None:
    """checkpoint_id=None skips the checkpoint check but keeps the others."""
    _write(tmp_path)
    manifest = read_manifest(tmp_path, kind=KIND, instance=INSTANCE)
    assert manifest.checkpoint_id == CKPT


@pytest.mark.parametrize(
    "records_file",
    ["../x", "/etc/passwd", "../records-" + "0" * 64 + ".jsonl", "sub/records.jsonl", ".."],
)
def test_records_file_outside_directory_is_corrupt(tmp_path: Path, records_file: str) -> None:
    """A records_file that names a path outside the participant directory is refused."""
    _write(tmp_path)
    _rewrite_manifest(tmp_path, records_file=records_file)
    with pytest.raises(CorruptCheckpoint, match="escapes"):
        _read(tmp_path)


def test_records_file_symlink_outside_directory_is_corrupt(tmp_path: Path) -> None:
    """A records file that is a symlink leading out of the directory is refused."""
    manifest = _write(tmp_path)
    path = records_path(tmp_path, manifest)
    outside = tmp_path / "outside.jsonl"
    path.rename(outside)
    path.symlink_to(outside)
    with pytest.raises(CorruptCheckpoint, match="escapes"):
        _read(tmp_path)


def test_records_file_not_matching_digest_is_corrupt(tmp_path: Path) -> None:
    """A records_file name that is not records-<records_sha256>.jsonl is refused."""
    _write(tmp_path)
    _rewrite_manifest(tmp_path, records_file="records-" + "a" * 64 + ".jsonl")
    with pytest.raises(CorruptCheckpoint, match="does not match"):
        _read(tmp_path)
    _rewrite_manifest(tmp_path, records_file="records.jsonl")
    with pytest.raises(CorruptCheckpoint, match="not a records-<sha256>"):
        _read(tmp_path)


@pytest.mark.parametrize("version", [0, 2, "1", True, None])
def test_unknown_schema_version_is_corrupt(tmp_path: Path, version: Any) -> None:
    """A manifest with any schema_version other than the int 1 is refused."""
    _write(tmp_path)
    _rewrite_manifest(tmp_path, schema_version=version)
    with pytest.raises(CorruptCheckpoint, match="schema_version"):
        _read(tmp_path)


@pytest.mark.parametrize(
    ("field", "value"),
    [("record_count", "3"), ("record_count", -1), ("record_count", True), ("kind", 5)],
)
def test_manifest_field_types_are_checked(tmp_path: Path, field: str, value: Any) -> None:
    """Manifest fields of the wrong type are refused."""
    _write(tmp_path)
    _rewrite_manifest(tmp_path, **{field: value})
    with pytest.raises(CorruptCheckpoint, match=field):
        _read(tmp_path)


def test_manifest_not_json_is_corrupt(tmp_path: Path) -> None:
    """A manifest that is not a JSON object is refused."""
    _write(tmp_path)
    path = _pdir(tmp_path) / MANIFEST_NAME
    path.write_text("{not json")
    with pytest.raises(CorruptCheckpoint, match="not valid JSON"):
        _read(tmp_path)
    path.write_text("[1, 2]")
    with pytest.raises(CorruptCheckpoint, match="not a JSON object"):
        _read(tmp_path)


def test_symlinked_manifest_is_corrupt(tmp_path: Path) -> None:
    """A manifest.json that is a symlink is refused."""
    _write(tmp_path)
    path = _pdir(tmp_path) / MANIFEST_NAME
    real = tmp_path / "elsewhere.json"
    path.rename(real)
    path.symlink_to(real)
    with pytest.raises(CorruptCheckpoint, match="cannot open manifest"):
        _read(tmp_path)


def _rewrite_records(root: Path, data: bytes, count: int) -> Manifest:
    """Replace the records with ``data`` and a matching manifest (digest and count right)."""
    directory = _pdir(root)
    for path in directory.iterdir():
        path.unlink()
    digest = hashlib.sha256(data).hexdigest()
    (directory / f"records-{digest}.jsonl").write_bytes(data)
    manifest = Manifest(
        kind=KIND,
        instance=INSTANCE,
        checkpoint_id=CKPT,
        records_file=f"records-{digest}.jsonl",
        records_sha256=digest,
        record_count=count,
    )
    (directory / MANIFEST_NAME).write_text(json.dumps(manifest.to_json(), sort_keys=True))
    return manifest


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
    _write(tmp_path)
    manifest = _rewrite_records(tmp_path, data, data.count(b"\n"))
    assert _read(tmp_path) == manifest
    with pytest.raises(CorruptCheckpoint, match=message):
        verify_records(tmp_path, manifest)


def test_overlong_line_is_corrupt(tmp_path: Path) -> None:
    """A line longer than max_line_bytes is refused without being buffered whole."""
    manifest = _write(tmp_path, records=[{"a": 1}, {"pad": "x" * 5000}])
    with pytest.raises(CorruptCheckpoint, match="line 2 longer than 100 bytes"):
        verify_records(tmp_path, manifest, max_line_bytes=100)
    verify_records(tmp_path, manifest, max_line_bytes=5100)


def test_overlong_record_is_refused_at_write(tmp_path: Path) -> None:
    """The writer refuses a record the reader would refuse for its length."""
    with pytest.raises(ValueError, match="bytes >"):
        _write(tmp_path, records=[{"pad": "x" * 200}], max_line_bytes=100)


def test_corrupt_checkpoint_carries_the_path(tmp_path: Path) -> None:
    """Read errors name the file they are about."""
    manifest = _write(tmp_path)
    records_path(tmp_path, manifest).unlink()
    with pytest.raises(CorruptCheckpoint) as info:
        verify_records(tmp_path, manifest)
    assert info.value.path == str(records_path(tmp_path, manifest))


# ------------------------------------------------------------------ streaming


def test_streaming_write_from_a_generator(tmp_path: Path) -> None:
    """200k records from a generator are written while being generated, and read back."""
    total = 200_000
    seen_on_disk: list[int] = []

    def generate() -> Iterator[dict[str, Any]]:
        for index in range(total):
            if index == total - 1:
                # Before the last record, most bytes must already be in the temp file.
                seen_on_disk.append(sum(p.stat().st_size for p in _pdir(tmp_path).iterdir()))
            yield {"i": index, "key": f"task-{index}"}

    manifest = _write(tmp_path, records=generate())
    assert manifest.record_count == total
    size = records_path(tmp_path, manifest).stat().st_size
    assert seen_on_disk[0] > size // 2
    verify_records(tmp_path, manifest)
    count = 0
    for expected, record in enumerate(iter_records(tmp_path, manifest)):
        assert record["i"] == expected
        count += 1
    assert count == total


# ------------------------------------------------------------------ property


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


@settings(max_examples=60, deadline=None)
@given(records=_RECORD_LISTS)
def test_random_records_round_trip_exactly(records: list[dict[str, Any]]) -> None:
    """Any list of JSON-able dicts round-trips with equal values, types and key order."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        _write(root, records=records)
        restored = _restore(root)
    assert restored == records
    assert [json.dumps(r) for r in restored] == [json.dumps(r) for r in records]


def test_temp_files_do_not_survive_a_publish(tmp_path: Path) -> None:
    """After a successful write only manifest.json and the records file remain."""
    manifest = _write(tmp_path)
    assert sorted(os.listdir(_pdir(tmp_path))) == sorted([MANIFEST_NAME, manifest.records_file])
