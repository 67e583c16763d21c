"""A streamed records writer with no envckpt code: encode, hash and write one record at a time.

What a careful implementation does with a large records file: each line goes
through a buffered file and the hash as it is made, so the whole file is
never held (or joined) in memory; one fsync at the end. The floor's commit
(``bench/floor_app.py``) and ``store_over_raw``'s baseline
(``bench/store_write.py``) both write this way::

    digest, count = write_streamed(path, (orjson.dumps(record) for record in records))
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from pathlib import Path

# Large enough that a write call carries many records, small enough to stay in cache.
BUFFER_BYTES = 1 << 20


def write_streamed(path: Path, lines: Iterable[bytes]) -> tuple[str, int]:
    """Write ``lines`` (no newlines in them), each ended by a newline, to the new file
    ``path``; fsync it; return the sha256 of its bytes and the number of lines."""
    digest = hashlib.sha256()
    count = 0
    with open(path, "xb", buffering=BUFFER_BYTES) as stream:
        for line in lines:
            record = line + b"\n"
            digest.update(record)
            stream.write(record)
            count += 1
        stream.flush()
        os.fsync(stream.fileno())
    return digest.hexdigest(), count
