"""One record line of a records file: compact JSON, encoded fast and decoded exactly.

Encoding is orjson's (about 20x the standard library's speed), as UTF-8.
Where orjson would differ from JSON or from what the standard library wrote
before, the standard library decides:

* orjson writes NaN and Infinity as ``null``: a line holding ``null``
  anywhere is checked by the standard library encoder, which refuses them
  (``ValueError``); the line itself stays orjson's;
* what orjson refuses (integers beyond 64 bits, lone surrogates, non-string
  keys, subclasses it does not know) the standard library writes, or refuses
  with its own ``TypeError``, exactly as before;
* datetimes and dataclasses, which orjson would write as strings and
  objects a restore could not give back, are refused as before.

With ``allow_nan`` (a participant's ``non_finite="gym"``, ``json_state``),
NaN and the infinities are written as Python's ``json`` writes them (the
tokens ``NaN``, ``Infinity``, ``-Infinity``, as NeMo Gym's store does) and
read back as floats; without it they are refused both ways.

A digest is over the bytes written, so no reader depends on which encoder
wrote a line. Decoding is the standard library's: orjson would read an
integer beyond 64 bits as a float::

    line = encode_record({"episode_id": {...}, "turn": 3})   # bytes, no newline
    record = decode_record(line, line_no=1, where=path)      # CorruptCheckpoint if bad
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import orjson

from envckpt.errors import CorruptCheckpoint
from envckpt.participant.store.layout import reject_json_constant

# The fallback and the NaN check. ensure_ascii: any Python str (even a lone
# surrogate) round-trips, and a line never holds a raw newline (orjson
# escapes newlines too). allow_nan=False: NaN and Infinity are not JSON.
_STDLIB_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=True, allow_nan=False)
# Gym's way: NaN, Infinity and -Infinity as Python's json tokens.
_NAN_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=True, allow_nan=True)
_ORJSON_OPTIONS = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS
# Finding "null" with the regex engine's literal scan takes about a third of
# the time of ``bytes in`` on prose-like text.
_NULL = re.compile(rb"null")

# The plain decoder already builds dicts in document order, which is what
# object_pairs_hook=dict would do, about 25% faster.
_DECODER = json.JSONDecoder(parse_constant=reject_json_constant)
_NAN_DECODER = json.JSONDecoder()


def encode_record(record: Mapping[str, Any]) -> bytes:
    """``record`` as one compact JSON line (no newline).

    ``ValueError`` for NaN or Infinity; ``TypeError`` for what is not JSON,
    as the standard library says it.
    """
    # Both encoders take only real dicts at the top; dict() keeps the key order.
    plain = record if isinstance(record, dict) else dict(record)
    try:
        line = orjson.dumps(plain, option=_ORJSON_OPTIONS)
    except TypeError:  # orjson.JSONEncodeError: the standard library writes or refuses it
        return _STDLIB_ENCODER.encode(plain).encode("ascii")
    if _NULL.search(line) is not None:
        # A real null, or a NaN or Infinity orjson wrote as null.
        _STDLIB_ENCODER.encode(plain)
    return line


def encode_records(
    records: Iterable[Mapping[str, Any]], *, allow_nan: bool = False
) -> Iterator[bytes]:
    """``encode_record`` of each record, lazily: one loop, no call per record but the encoder's.

    ``allow_nan``: NaN and the infinities are written as Python's json tokens.
    """
    if allow_nan:
        yield from (_encode_allowing_nan(record) for record in records)
        return
    dumps, options, nulls = orjson.dumps, _ORJSON_OPTIONS, _NULL.search
    for record in records:
        if type(record) is not dict:
            yield encode_record(record)
            continue
        try:
            line = dumps(record, option=options)
        except TypeError:  # as in encode_record: the standard library writes or refuses it
            yield _STDLIB_ENCODER.encode(record).encode("ascii")
            continue
        if nulls(line) is not None:
            _STDLIB_ENCODER.encode(record)  # raises for NaN or Infinity
        yield line


def _encode_allowing_nan(record: Mapping[str, Any]) -> bytes:
    plain = record if isinstance(record, dict) else dict(record)
    try:
        return encode_record(plain)
    except ValueError:  # a NaN or an infinity: Python's json tokens, as Gym writes them
        return _NAN_ENCODER.encode(plain).encode("ascii")


def decode_record(
    line: bytes, *, line_no: int, where: str, allow_nan: bool = False
) -> dict[str, Any]:
    """One line back as a dict, keys in written order; ``CorruptCheckpoint`` otherwise.

    ``allow_nan``: the tokens ``NaN``, ``Infinity``, ``-Infinity`` read as floats.
    """
    try:
        record = (_NAN_DECODER if allow_nan else _DECODER).decode(line.decode("utf-8"))
    except ValueError as exc:  # includes JSONDecodeError and UnicodeDecodeError
        raise CorruptCheckpoint(f"bad JSON on line {line_no}: {exc}", path=where) from exc
    if type(record) is not dict:
        raise CorruptCheckpoint(
            f"line {line_no} is a JSON {type(record).__name__}, not an object", path=where
        )
    return record
