"""Records write throughput: envckpt's store against a streamed orjson writer.

Both variants write the same records (Gym's envelope, ``{"episode_id":
{...}, ...state}`` per parked episode, as a commit does) to a fresh
directory on the same disk:

* ``store``: what a participant's commit does: ``check_envelopes`` then
  ``envelope_lines`` (orjson, NaN refused) into ``write_checkpoint`` (hash,
  temp file, fsync, rename, manifest, directory fsyncs);
* ``raw``: the fastest encoder installed (orjson), one line per record,
  streamed through a buffered file and sha256 as it goes, one fsync
  (``bench/streamed.py``): no NaN check, no manifest, no rename;
* ``raw, NaN refused``: ``raw`` refusing NaN and the infinities as the store
  does, in the cheapest way found here: orjson writes them as ``null``, so a
  line holding ``null`` is encoded again by the standard library's strict
  encoder, which raises for them. What is left between it and ``store`` is
  the store's own (temp file, rename, manifest, directory syncs).

Runs alternate, each after the previous output is deleted and the disk
synced. ``store_over_raw`` = raw seconds / store seconds (a throughput ratio,
1.0 means the store costs nothing beyond encoding and writing).

    runs, megabytes = measure(workdir, size_mb=16, rounds=5)
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from bench.states import parked_states
from bench.stats import interleave
from bench.streamed import write_streamed
from envckpt.episodes import EnvironmentEpisode
from envckpt.participant.store import (
    check_envelopes,
    envelope_line,
    envelope_lines,
    write_checkpoint,
)

STATE_BYTES = 4000
# orjson's output for NaN and the infinities; a real null also matches.
_NULL = re.compile(rb"null")
_STRICT = json.JSONEncoder(allow_nan=False)
Exported = list[tuple[EnvironmentEpisode, dict[str, Any]]]


def records_of(size_mb: float) -> Exported:
    """Exported (episode, state) pairs of about ``size_mb`` MB of JSON in all."""
    count = max(1, int(size_mb * 1_000_000 / STATE_BYTES))
    states = parked_states(count, state_bytes=STATE_BYTES)
    return [(EnvironmentEpisode(key, 0), state) for key, state in states.items()]


def store_write(directory: Path, exported: Exported) -> None:
    """A commit's write through envckpt's store, as the participant core makes it
    (``envckpt/participant/commit_write.py``)."""
    check_envelopes(exported)
    write_checkpoint(
        directory,
        kind="agent",
        instance="bench",
        checkpoint_id=f"bench-{uuid.uuid4().hex[:8]}",
        lines=envelope_lines(exported),
    )


def _envelopes(exported: Exported) -> Iterator[dict[str, Any]]:
    """Gym's record envelope of each exported state, as the store writes it."""
    return ({"episode_id": episode.to_wire(), **state} for episode, state in exported)


def raw_write(directory: Path, exported: Exported) -> None:
    """The same records encoded with orjson, streamed, hashed and fsynced."""
    directory.mkdir(parents=True)
    write_streamed(directory / "records.jsonl", map(orjson.dumps, _envelopes(exported)))


def strict_write(directory: Path, exported: Exported) -> None:
    """``raw_write``, refusing NaN and the infinities (``ValueError``) as JSON has none."""

    def lines() -> Iterator[bytes]:
        for record in _envelopes(exported):
            line = orjson.dumps(record)
            if _NULL.search(line) is not None:
                _STRICT.encode(record)  # a NaN written as null: raises
            yield line

    directory.mkdir(parents=True)
    write_streamed(directory / "records.jsonl", lines())


def measure(workdir: Path, *, size_mb: float, rounds: int) -> tuple[dict[str, list[float]], float]:
    """Interleaved seconds per write of each variant, and the megabytes each writes."""
    records = records_of(size_mb)
    megabytes = sum(len(envelope_line(e, s)) + 1 for e, s in records) / 1_000_000

    def timed(write: Any) -> float:
        shutil.rmtree(workdir / "out", ignore_errors=True)
        os.sync()
        start = time.perf_counter()
        write(workdir / "out", records)
        return time.perf_counter() - start

    try:
        runs = interleave(
            {
                "store": lambda: timed(store_write),
                "raw": lambda: timed(raw_write),
                "raw, NaN refused": lambda: timed(strict_write),
            },
            rounds=rounds,
        )
    finally:
        shutil.rmtree(workdir / "out", ignore_errors=True)
    return runs, megabytes
