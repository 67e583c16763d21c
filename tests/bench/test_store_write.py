"""bench/store_write.py's writers: the NaN-refusing baseline refuses what the store refuses."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from envckpt.episodes import EnvironmentEpisode

from helpers.repository_bench import repository_bench

store_write = repository_bench("store_write")


def test_the_nan_refusing_writer_writes_the_raw_writers_bytes(tmp_path: Path) -> None:
    """Finite records, nulls included: byte for byte what the unchecked writer writes."""
    records = store_write.records_of(0.05)
    records.append((EnvironmentEpisode("with-null", 0), {"turn": None, "score": 0.5}))
    store_write.raw_write(tmp_path / "raw", records)
    store_write.strict_write(tmp_path / "strict", records)
    written = (tmp_path / "strict" / "records.jsonl").read_bytes()
    assert written == (tmp_path / "raw" / "records.jsonl").read_bytes()
    assert written.count(b"\n") == len(records)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_the_nan_refusing_writer_refuses_what_json_cannot_hold(
    tmp_path: Path, value: float
) -> None:
    """NaN and the infinities, which orjson would write as null, raise as in the store."""
    records = [(EnvironmentEpisode("bad", 0), {"score": [1.0, value]})]
    with pytest.raises(ValueError, match="Out of range float values are not JSON compliant"):
        store_write.strict_write(tmp_path / "strict", records)
