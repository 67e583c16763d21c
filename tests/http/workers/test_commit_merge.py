"""Tests for envckpt.http.workers.commit_merge: the workers' shares as one records file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from envckpt.episodes import EnvironmentEpisode
from envckpt.errors import ParticipantError
from envckpt.http.workers.commit_merge import merged_lines, records_digest, write_merged
from envckpt.participant import store
from envckpt.participant.store import envelope_line


def pair(rollout_id: str, attempt: int = 0, n: int = 0) -> list[str]:
    episode = EnvironmentEpisode(rollout_id, attempt)
    return [episode.capture_key, envelope_line(episode, {"n": n}).decode()]


def nothing() -> None:
    return None


def test_lines_follow_episode_order_across_shares() -> None:
    """Whichever worker holds what, the merged file lists episodes in one order."""
    shares = [[pair("b"), pair("a", 2)], [pair("a", 1), pair("c")]]
    lines = merged_lines(shares)
    order = [json.loads(line)["episode_id"] for line in lines]
    assert order == [
        {"rollout_id": "a", "attempt": 1},
        {"rollout_id": "a", "attempt": 2},
        {"rollout_id": "b", "attempt": 0},
        {"rollout_id": "c", "attempt": 0},
    ]
    assert merged_lines(list(reversed(shares))) == lines


def test_an_episode_two_workers_exported_is_refused() -> None:
    """Two shares naming one episode: the commit is refused, nothing is written."""
    with pytest.raises(ParticipantError) as refused:
        merged_lines([[pair("a")], [pair("a", n=9)]])
    assert refused.value.code == "checkpoint_error"


def test_the_merged_checkpoint_is_an_ordinary_participant_checkpoint(tmp_path: Path) -> None:
    """Records and manifest as one process writes them: readable, verified, same digest."""
    shares = [[pair("b", n=2)], [pair("a", n=1)]]
    manifest = write_merged(
        tmp_path, kind="model", instance="policy", checkpoint_id="c1", shares=shares,
        before_publish=nothing,
    )  # fmt: skip
    read = store.read_manifest(tmp_path, kind="model", instance="policy", checkpoint_id="c1")
    assert read.to_json() == manifest and read.record_count == 2
    assert read.records_sha256 == records_digest(merged_lines(shares))
    store.verify_records(tmp_path, read)
    records = list(store.iter_records(tmp_path, read))
    assert [r["n"] for r in records] == [1, 2]


def test_a_second_writer_of_the_same_commit_returns_the_published_manifest(
    tmp_path: Path,
) -> None:
    """A retry answered by another worker writes the same bytes and gets the same manifest;
    other records, or another checkpoint's manifest, are refused."""
    shares = [[pair("a")], [pair("b")]]
    first = write_merged(
        tmp_path, kind="agent", instance="agent", checkpoint_id="c1", shares=shares,
        before_publish=nothing,
    )  # fmt: skip
    again = write_merged(
        tmp_path, kind="agent", instance="agent", checkpoint_id="c1", shares=shares,
        before_publish=nothing,
    )  # fmt: skip
    assert again == first
    for other, cid in (([[pair("a", n=5)]], "c1"), (shares, "c2")):
        with pytest.raises(ParticipantError) as refused:
            write_merged(
                tmp_path, kind="agent", instance="agent", checkpoint_id=cid, shares=other,
                before_publish=nothing,
            )  # fmt: skip
        assert refused.value.code == "invalid_checkpoint_state"


def test_an_abort_before_publishing_leaves_no_manifest(tmp_path: Path) -> None:
    """``before_publish`` raising (the commit was resumed) publishes nothing."""

    def aborted() -> None:
        raise ParticipantError("stale_checkpoint", "aborted")

    with pytest.raises(ParticipantError):
        write_merged(
            tmp_path, kind="agent", instance="agent", checkpoint_id="c1", shares=[[pair("a")]],
            before_publish=aborted,
        )  # fmt: skip
    assert not (store.participant_dir(tmp_path, "agent", "agent") / store.MANIFEST_NAME).exists()
