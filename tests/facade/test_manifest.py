"""Tests for envckpt.facade.manifest: gym_checkpoint.json written whole, read back or refused."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from envckpt import checksummed
from envckpt.episodes import EnvironmentEpisode
from envckpt.errors import CorruptCheckpoint, ManifestTooLarge
from envckpt.facade import manifest as manifest_module
from envckpt.facade.manifest import (
    MANIFEST_KIND,
    MANIFEST_NAME,
    MAX_MANIFEST_BYTES,
    SCHEMA_VERSION,
    GymSnapshotManifest,
    InstanceRecord,
    read_manifest,
    write_manifest,
)
from envckpt.gym.summaries import GymCheckpointCommitSummary

from helpers.facade_world import E1, E2, E3, A, B, FacadeWorld, take_snapshot

MANIFEST = GymSnapshotManifest(
    checkpoint_id="ck-1",
    instances={
        A.instance_id: InstanceRecord(
            episodes=(E1, E3),
            staging_keys=("r1/t0", "r1/t1"),
            participants=("agent", "policy", "tools"),
            restarts=(EnvironmentEpisode("r4", 0),),
        ),
        B.instance_id: InstanceRecord(episodes=(E2,), staging_keys=(), participants=("agent",)),
    },
)


def rewritten(directory: Path, change: Callable[[dict[str, Any]], None]) -> None:
    """Rewrite the manifest's body with ``change`` applied and a correct checksum."""
    body = copy.deepcopy(MANIFEST.body())
    change(body)
    data = checksummed.encode(kind=MANIFEST_KIND, schema_version=SCHEMA_VERSION, body=body)
    (directory / MANIFEST_NAME).write_bytes(data)


def record(body: dict[str, Any]) -> dict[str, Any]:
    instance: dict[str, Any] = body["instances"][A.instance_id]
    return instance


def test_write_then_read_is_the_same_manifest(tmp_path: Path) -> None:
    """Round trip: every record, episode, key and restart comes back; the size is reported."""
    size = write_manifest(tmp_path, MANIFEST)
    assert read_manifest(tmp_path) == MANIFEST
    assert size == (tmp_path / MANIFEST_NAME).stat().st_size
    assert [p.name for p in tmp_path.iterdir()] == [MANIFEST_NAME]


def test_the_file_is_readable_json_with_its_envelope(tmp_path: Path) -> None:
    """The file is indented JSON naming its kind and schema beside the body."""
    write_manifest(tmp_path, MANIFEST)
    text = (tmp_path / MANIFEST_NAME).read_text()
    document = json.loads(text)
    assert "\n " in text
    assert (document["kind"], document["schema_version"]) == (MANIFEST_KIND, SCHEMA_VERSION)
    assert document["instances"][A.instance_id]["episodes"] == [E1.to_wire(), E3.to_wire()]


def test_a_rewrite_replaces_the_whole_file(tmp_path: Path) -> None:
    """Writing again replaces the manifest; the old one is gone whole."""
    write_manifest(tmp_path, MANIFEST)
    smaller = GymSnapshotManifest(checkpoint_id="ck-2", instances={})
    write_manifest(tmp_path, smaller)
    assert read_manifest(tmp_path) == smaller


def test_a_record_keeps_only_rows_of_exported_episodes() -> None:
    """from_summary sorts episodes and restarts and drops rows of unexported episodes."""
    summary = GymCheckpointCommitSummary(
        exported_episodes=(E3, E1),
        staging_keys=("r1/t0", "r3/t0", "orphan/t0", "r1/t1"),
        participants=("agent", "policy"),
        staging_keys_by_episode={
            E1: ("r1/t1", "r1/t0"),
            E3: ("r3/t0",),
            EnvironmentEpisode("orphan", 0): ("orphan/t0",),
        },
    )
    restarts = (EnvironmentEpisode("r9", 0), EnvironmentEpisode("r5", 0))
    built = InstanceRecord.from_summary(summary, restarts)
    assert built.episodes == (E1, E3)
    assert built.staging_keys == ("r1/t0", "r1/t1", "r3/t0")
    assert built.participants == ("agent", "policy")
    assert built.restarts == (EnvironmentEpisode("r5", 0), EnvironmentEpisode("r9", 0))


def test_continued_attempts_and_staging_keys_cover_every_instance() -> None:
    """What a restore continues and which rows it keeps, across instances."""
    assert MANIFEST.continued_attempts() == {
        (A.instance_id, "r1", 0),
        (A.instance_id, "r3", 0),
        (B.instance_id, "r2", 1),
    }
    assert MANIFEST.staging_keys() == {"r1/t0", "r1/t1"}


def test_a_missing_manifest_is_refused(tmp_path: Path) -> None:
    """No gym_checkpoint.json: CorruptCheckpoint naming the path."""
    with pytest.raises(CorruptCheckpoint, match="Gym snapshot manifest is missing") as info:
        read_manifest(tmp_path)
    assert info.value.path == str(tmp_path / MANIFEST_NAME)


def test_an_unreadable_manifest_is_refused(tmp_path: Path) -> None:
    """A manifest that cannot be read (here a directory) is CorruptCheckpoint."""
    (tmp_path / MANIFEST_NAME).mkdir()
    with pytest.raises(CorruptCheckpoint, match="unreadable"):
        read_manifest(tmp_path)


def test_a_tampered_byte_is_refused(tmp_path: Path) -> None:
    """Editing a value without the checksum is refused."""
    write_manifest(tmp_path, MANIFEST)
    path = tmp_path / MANIFEST_NAME
    path.write_text(path.read_text().replace('"r1"', '"r9"'))
    with pytest.raises(CorruptCheckpoint, match="checksum"):
        read_manifest(tmp_path)


def test_a_truncated_manifest_is_refused(tmp_path: Path) -> None:
    """A manifest cut short (a torn copy) is refused."""
    write_manifest(tmp_path, MANIFEST)
    path = tmp_path / MANIFEST_NAME
    path.write_bytes(path.read_bytes()[:-20])
    with pytest.raises(CorruptCheckpoint, match="not valid JSON"):
        read_manifest(tmp_path)


def test_a_manifest_of_another_kind_or_schema_is_refused(tmp_path: Path) -> None:
    """A checksummed document of another kind, or a future schema, is refused."""
    body = MANIFEST.body()
    (tmp_path / MANIFEST_NAME).write_bytes(
        checksummed.encode(kind="envckpt.ledger", schema_version=SCHEMA_VERSION, body=body)
    )
    with pytest.raises(CorruptCheckpoint, match="foreign"):
        read_manifest(tmp_path)
    (tmp_path / MANIFEST_NAME).write_bytes(
        checksummed.encode(kind=MANIFEST_KIND, schema_version=SCHEMA_VERSION + 1, body=body)
    )
    with pytest.raises(CorruptCheckpoint, match="schema"):
        read_manifest(tmp_path)


CORRUPTIONS: dict[str, Callable[[dict[str, Any]], None]] = {
    "checkpoint id empty": lambda b: b.update(checkpoint_id=""),
    "checkpoint id not a string": lambda b: b.update(checkpoint_id=7),
    "checkpoint id with a slash": lambda b: b.update(checkpoint_id="../ck"),
    "instances a list": lambda b: b.update(instances=[]),
    "instance id malformed": lambda b: b.update(instances={"shard-0": record(b)}),
    "record a list": lambda b: b["instances"].update({A.instance_id: list(record(b))}),
    "record extra field": lambda b: record(b).update(note="x"),
    "record missing field": lambda b: record(b).pop("restarts"),
    "episode without attempt": lambda b: record(b).update(episodes=[{"rollout_id": "r1"}]),
    "episode negative attempt": lambda b: record(b).update(
        episodes=[{"rollout_id": "r1", "attempt": -1}]
    ),
    "episodes an object": lambda b: record(b).update(episodes={}),
    "restarts an object": lambda b: record(b).update(restarts={}),
    "episodes a string": lambda b: record(b).update(episodes="r1"),
    "staging keys not strings": lambda b: record(b).update(staging_keys=[1]),
    "staging keys a string": lambda b: record(b).update(staging_keys="r1/t0"),
    "participants not a list": lambda b: record(b).update(participants={"agent": 1}),
}


@pytest.mark.parametrize("change", CORRUPTIONS.values(), ids=CORRUPTIONS.keys())
def test_a_checksummed_but_invalid_body_is_refused(
    tmp_path: Path, change: Callable[[dict[str, Any]], None]
) -> None:
    """Every field's type and shape is checked after the checksum: CorruptCheckpoint."""
    rewritten(tmp_path, lambda body: None)
    assert read_manifest(tmp_path) == MANIFEST  # the unchanged rewrite is accepted
    rewritten(tmp_path, change)
    with pytest.raises(CorruptCheckpoint, match="invalid Gym snapshot manifest") as info:
        read_manifest(tmp_path)
    assert info.value.path == str(tmp_path / MANIFEST_NAME)


async def test_a_tampered_manifest_refuses_the_restore_and_installs_nothing(
    tmp_path: Path,
) -> None:
    """Editing a real snapshot's gym_checkpoint.json makes the restore fail before any call."""
    world = FacadeWorld()
    await world.start(A, E1)
    await take_snapshot(world, tmp_path)
    path = tmp_path / MANIFEST_NAME
    path.write_text(path.read_text().replace('"r1"', '"r9"'))
    after = world.restarted()
    with pytest.raises(CorruptCheckpoint):
        async with after.facade.restored(tmp_path):
            pytest.fail("must not be yielded")
    assert after.requests() == 0


def test_a_manifest_over_its_byte_cap_is_refused_before_it_is_read(tmp_path: Path) -> None:
    """Over max_bytes is ManifestTooLarge (a CorruptCheckpoint); a sparse 8 GiB file is
    refused from its size alone."""
    size = write_manifest(tmp_path, MANIFEST)
    assert read_manifest(tmp_path, max_bytes=size) == MANIFEST
    with pytest.raises(ManifestTooLarge) as caught:
        read_manifest(tmp_path, max_bytes=size - 1)
    assert caught.value.unit == "bytes" and isinstance(caught.value, CorruptCheckpoint)
    with open(tmp_path / MANIFEST_NAME, "r+b") as stream:
        stream.truncate(8 << 30)
    with pytest.raises(ManifestTooLarge) as caught:
        read_manifest(tmp_path)
    assert caught.value.limit == MAX_MANIFEST_BYTES


def test_a_manifest_of_too_many_entries_is_refused(tmp_path: Path) -> None:
    """Instances, episodes, restarts, staging keys and participants count against the cap."""
    write_manifest(tmp_path, MANIFEST)
    # 2 instances; A: 2 episodes, 2 keys, 3 participants, 1 restart; B: 1 episode, 1 participant.
    entries = 2 + 8 + 2
    assert read_manifest(tmp_path, max_entries=entries) == MANIFEST
    with pytest.raises(ManifestTooLarge) as caught:
        read_manifest(tmp_path, max_entries=entries - 1)
    assert (caught.value.unit, caught.value.found) == ("entries", entries)


def test_a_manifest_no_reader_would_take_is_not_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over either cap, write_manifest raises ManifestTooLarge and writes nothing."""
    monkeypatch.setattr(manifest_module, "MAX_MANIFEST_ENTRIES", 11)
    with pytest.raises(ManifestTooLarge, match="entries"):
        write_manifest(tmp_path, MANIFEST)
    monkeypatch.setattr(manifest_module, "MAX_MANIFEST_ENTRIES", 12)
    monkeypatch.setattr(manifest_module, "MAX_MANIFEST_BYTES", 100)
    with pytest.raises(ManifestTooLarge, match="bytes"):
        write_manifest(tmp_path, MANIFEST)
    assert not (tmp_path / MANIFEST_NAME).exists()
