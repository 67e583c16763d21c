"""Edges of the manifest reader (envckpt.participant.store.manifest) found by mutation.

Each refusal of ``read_manifest`` says what is wrong, in the words an operator
reads, and points at the manifest file; the value cap counts every JSON value
and refuses one past it, not at it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from envckpt.errors import CorruptCheckpoint, ManifestTooLarge
from envckpt.participant.store import MANIFEST_NAME, SCHEMA_VERSION, Manifest, read_manifest

from helpers.store_files import CKPT, INSTANCE, KIND, pdir, read, rewrite_manifest, write


def refusal(root: Path, **kwargs: Any) -> CorruptCheckpoint:
    with pytest.raises(CorruptCheckpoint) as caught:
        read(root, **kwargs)
    assert caught.value.path == str(pdir(root) / MANIFEST_NAME)
    return caught.value


def test_an_unknown_schema_is_named_with_the_one_this_reader_knows(tmp_path: Path) -> None:
    """schema_version 99, or true (a bool is no version): both refused, naming the value."""
    write(tmp_path)
    for found in (99, True):
        rewrite_manifest(tmp_path, schema_version=found)
        assert refusal(tmp_path).message == (
            f"unknown manifest schema_version {found!r} (this reader knows {SCHEMA_VERSION})"
        )


@pytest.mark.parametrize(
    "name", ["kind", "instance", "checkpoint_id", "records_file", "records_sha256"]
)
def test_each_string_field_must_be_a_string(tmp_path: Path, name: str) -> None:
    """A string field given as a number is refused, naming the field."""
    write(tmp_path)
    rewrite_manifest(tmp_path, **{name: 7})
    assert refusal(tmp_path).message == f"manifest field {name!r} missing or not a string"


@pytest.mark.parametrize("count", [-1, True, "3", None])
def test_the_record_count_must_be_a_non_negative_int(tmp_path: Path, count: object) -> None:
    """A negative, boolean, string or null count is refused, naming what was found."""
    write(tmp_path)
    rewrite_manifest(tmp_path, record_count=count)
    assert refusal(tmp_path).message == (
        f"manifest field 'record_count' must be a non-negative int, got {count!r}"
    )


def test_a_zero_record_count_is_read(tmp_path: Path) -> None:
    """Zero records is a count like any other."""
    write(tmp_path, records=[])
    assert read(tmp_path).record_count == 0


@pytest.mark.parametrize("name", ["kind", "instance"])
def test_a_manifest_of_another_participant_is_foreign(tmp_path: Path, name: str) -> None:
    """A manifest naming another kind or instance: foreign, with found and expected."""
    write(tmp_path)
    rewrite_manifest(tmp_path, **{name: "other"})
    expected = {"kind": KIND, "instance": INSTANCE}[name]
    assert refusal(tmp_path).message == (
        f"foreign checkpoint: manifest {name} is 'other', expected {expected!r}"
    )


def test_a_manifest_of_another_checkpoint_is_foreign(tmp_path: Path) -> None:
    """Asked for one checkpoint id, a manifest of another: foreign, both ids named."""
    write(tmp_path)
    rewrite_manifest(tmp_path, checkpoint_id="ckpt-other")
    assert refusal(tmp_path).message == (
        f"foreign checkpoint: manifest checkpoint_id is 'ckpt-other', expected {CKPT!r}"
    )


def test_an_invalid_checkpoint_id_is_refused_when_none_was_asked_for(tmp_path: Path) -> None:
    """No id asked for: a manifest whose id is no valid id is still an invalid manifest."""
    write(tmp_path)
    rewrite_manifest(tmp_path, checkpoint_id="no/slashes")
    with pytest.raises(CorruptCheckpoint) as caught:
        read_manifest(tmp_path, kind=KIND, instance=INSTANCE)
    assert caught.value.message.startswith("invalid manifest: ")
    assert caught.value.path == str(pdir(tmp_path) / MANIFEST_NAME)
    assert isinstance(caught.value.__cause__, ValueError)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[1, 2]", "manifest is not a JSON object"),
        ("[" * 100_000 + "]" * 100_000, "manifest is nested too deeply"),
    ],
)
def test_a_manifest_that_is_no_object_is_refused(tmp_path: Path, text: str, message: str) -> None:
    """A list, or a document nested past the parser's depth: refused, saying which."""
    write(tmp_path)
    (pdir(tmp_path) / MANIFEST_NAME).write_text(text)
    assert refusal(tmp_path).message == message


def test_a_manifest_that_is_no_json_is_refused_saying_so(tmp_path: Path) -> None:
    """Bytes that do not parse: 'not valid JSON', with the parser's reason."""
    write(tmp_path)
    (pdir(tmp_path) / MANIFEST_NAME).write_text("{not json")
    assert refusal(tmp_path).message.startswith("manifest is not valid JSON: ")


def test_the_value_cap_counts_every_value_and_allows_exactly_the_cap(tmp_path: Path) -> None:
    """A manifest of n JSON values reads with max_values=n and is refused with n - 1."""
    write(tmp_path, extras={"nested": {"a": [1, 2]}})
    body = json.loads((pdir(tmp_path) / MANIFEST_NAME).read_text())
    # the object, its 8 members, and inside "nested": one object, one list, two ints
    values = 1 + len(body) + 1 + 2
    assert values == 12
    kwargs: dict[str, Any] = {"kind": KIND, "instance": INSTANCE, "checkpoint_id": CKPT}
    assert read_manifest(tmp_path, max_values=values, **kwargs).extras["nested"]["a"] == (1, 2)
    with pytest.raises(ManifestTooLarge) as caught:
        read_manifest(tmp_path, max_values=values - 1, **kwargs)
    assert caught.value.path == str(pdir(tmp_path) / MANIFEST_NAME)


def test_a_missing_manifest_says_the_checkpoint_is_unpublished(tmp_path: Path) -> None:
    """No manifest.json: 'unpublished or missing', pointing at where it should be."""
    write(tmp_path)
    (pdir(tmp_path) / MANIFEST_NAME).unlink()
    assert refusal(tmp_path).message == "no manifest: unpublished or missing checkpoint"


def test_a_nan_in_a_manifest_is_no_json(tmp_path: Path) -> None:
    """NaN is refused by the parser itself, even in an extras field."""
    write(tmp_path)
    path = pdir(tmp_path) / MANIFEST_NAME
    path.write_text(path.read_text().replace("{", '{"extra": NaN, ', 1))
    assert refusal(tmp_path).message == "manifest is not valid JSON: NaN is not valid JSON"


def test_a_manifest_over_the_value_cap_says_how_many_it_lists(tmp_path: Path) -> None:
    """The cap's refusal names the manifest, the count found and the cap."""
    write(tmp_path)
    with pytest.raises(ManifestTooLarge) as caught:
        read_manifest(tmp_path, kind=KIND, instance=INSTANCE, max_values=3)
    assert caught.value.message == "manifest lists 4 entries, over its cap of 3"


def test_a_records_file_escaping_the_directory_points_at_the_manifest(tmp_path: Path) -> None:
    """records_file '../x': refused, the manifest named as where the bad name is."""
    write(tmp_path)
    rewrite_manifest(tmp_path, records_file="../x")
    assert refusal(tmp_path).message == "records_file '../x' escapes the participant directory"


def manifest_fields(**changes: Any) -> dict[str, Any]:
    sha = "a" * 64
    fields: dict[str, Any] = {
        "kind": KIND,
        "instance": INSTANCE,
        "checkpoint_id": CKPT,
        "records_file": f"records-{sha}.jsonl",
        "records_sha256": sha,
        "record_count": 1,
    }
    return fields | changes


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"schema_version": 2}, "unknown schema_version 2"),
        ({"schema_version": True}, "unknown schema_version True"),
        ({"kind": "a/b"}, "kind must be one safe path component, got 'a/b'"),
        ({"instance": ".."}, "instance must be one safe path component, got '..'"),
        ({"records_sha256": "A" * 64}, f"records_sha256 {'A' * 64!r} is not 64 lowercase hex"),
        ({"records_sha256": 7}, "records_sha256 7 is not 64 lowercase hex"),
        (
            {"records_file": "records-x.jsonl"},
            f"records_file 'records-x.jsonl' must be 'records-{'a' * 64}.jsonl'",
        ),
        ({"record_count": -1}, "record_count must be a non-negative int, got -1"),
        ({"record_count": True}, "record_count must be a non-negative int, got True"),
    ],
)
def test_a_manifest_value_checks_each_field(changes: dict[str, Any], message: str) -> None:
    """Building a Manifest with one bad field: ValueError naming the field and the value."""
    with pytest.raises(ValueError) as caught:
        Manifest(**manifest_fields(**changes))
    assert str(caught.value) == message
