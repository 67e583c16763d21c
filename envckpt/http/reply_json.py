"""A control reply's body as JSON, with a nesting limit checked before any decoder runs.

``HttpTransport`` hands the coordinator the status, the parsed body and the
raw text (``ControlReply``). A body that is not JSON (a plain-text 500, a
proxy's HTML page) comes back as ``None`` with its text, as protocol.md asks
the coordinator to report it. A body nested deeper than ``MAX_REPLY_DEPTH``
is refused as ``TransportFailure`` before decoding: the standard library's
decoder recurses once per level and would raise a bare ``RecursionError``
(and a value that deep would blow up later in whatever walks it)::

    reply = control_reply(200, b'{"kind": "model"}')     # ControlReply(200, {...}, raw=...)
    control_reply(200, b"[" * 100_000)                    # TransportFailure

A body that is not UTF-8, or holds the literal NaN or Infinity, is not JSON (``None``).
Any other failure while decoding is the same ``TransportFailure``: nothing
but that and ``None`` ever leaves here.
"""

from __future__ import annotations

import json
import re
from typing import Any, NoReturn

import orjson

from envckpt.coordination.transport import ControlReply, TransportFailure

# Control replies are flat records: a few levels at most. Far below the
# depth at which any decoder or walker of the value would recurse too deep.
MAX_REPLY_DEPTH = 64

# A whole string, escapes included: brackets inside strings do not nest.
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
# Depth needs only where levels open and close: both kinds of bracket become
# one, every other byte goes (one C-speed translate; a mismatched kind is not
# JSON anyway, the decoder refuses it).
_ONE_BRACKET = bytes.maketrans(b"{}", b"[]")
_NOT_BRACKET = bytes(b for b in range(256) if b not in b"[]{}")
# Without escapes, what depth needs is the quotes and the brackets.
_NOT_MARK = bytes(b for b in range(256) if b not in b'[]{}"')

# orjson reads an integer beyond 64 bits as a float and loses its last digits;
# a body holding a run of 19 digits or more (only there can such an integer
# be) is read by the standard library, which reads integers exactly. Every
# digit becomes "0" and the run is a substring search: two C passes, where a
# regex stepped through a 14 KB commit reply in 128 us.
_DIGITS_AS_ZERO = bytes.maketrans(b"0123456789", b"0" * 10)
_LONG_RUN = b"0" * 19


def has_long_digit_run(data: bytes) -> bool:
    """Whether ``data`` holds 19 or more digits in a row."""
    return _LONG_RUN in data.translate(_DIGITS_AS_ZERO)


def nests_deeper(data: bytes, limit: int = MAX_REPLY_DEPTH) -> bool:
    """Whether ``data``'s arrays and objects nest more than ``limit`` deep; no recursion.

    Fewer than ``limit`` brackets in all cannot nest deeper (most control
    replies). Otherwise strings are dropped, then every
    byte but the brackets, then the innermost pairs once per level, each
    pass in C: a commit reply listing a hundred episodes costs a few passes,
    not a Python step per token. Exact for balanced brackets; for brackets
    that never close (not JSON anyway) an upper bound.
    """
    if b"\\" in data:  # escapes: a quote inside a string needs the regex
        if data.count(b"[") + data.count(b"{") <= limit:
            return False
        outside = _STRING.sub(b"", data).partition(b'"')[0]
        brackets = outside.translate(_ONE_BRACKET, _NOT_BRACKET)
    else:
        # Quotes and brackets only (one pass), then every two adjacent quotes
        # go: nothing lies between them, so what was inside a string stays
        # inside one and what was outside stays outside (a 14 KB commit reply
        # leaves no quote at all). Quotes left (strings holding brackets):
        # split at them, the even parts are outside strings.
        marks = data.translate(_ONE_BRACKET, _NOT_MARK)
        if marks.count(b"[") <= limit:
            return False
        marks = marks.replace(b'""', b"")
        if b'"' in marks:
            parts = marks.split(b'"')
            # An unterminated string runs to the end: what follows its quote goes.
            marks = b"".join(parts[0 : len(parts) - (len(parts) % 2 == 0) : 2])
        brackets = marks
    if not brackets:
        return False
    levels = 0
    while levels <= limit:
        # bytes.replace scans its input once: only the pairs innermost at
        # the start of a pass go, so a pass is exactly one level.
        shorter = brackets.replace(b"[]", b"")
        if len(shorter) == len(brackets):
            break
        brackets, levels = shorter, levels + 1
    # What is left never closes (not JSON, or cut short): each opener left
    # encloses everything after it, so it adds its level to those removed.
    return levels + brackets.count(b"[") > limit


def _refuse_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not valid JSON")


def decode_reply(data: bytes) -> Any:
    """The JSON value of a reply body, ``None`` if it is not JSON; ``TransportFailure`` else."""
    if nests_deeper(data):
        raise TransportFailure(f"the reply body nests deeper than {MAX_REPLY_DEPTH} levels")
    try:
        if not has_long_digit_run(data):
            return orjson.loads(data)
        # JSON is UTF-8 (RFC 8259 8.1): a body that is not is not JSON.
        return json.loads(data.decode("utf-8"), parse_constant=_refuse_constant)
    except ValueError:  # orjson.JSONDecodeError and UnicodeDecodeError are ValueErrors
        return None  # not JSON: the raw text tells the coordinator what came
    except (RecursionError, MemoryError, TypeError) as error:
        raise TransportFailure(f"the reply body cannot be decoded: {error!r}") from error


def control_reply(status: int, data: bytes) -> ControlReply:
    """``ControlReply`` of a status and body: parsed JSON (or ``None``) and the raw text."""
    text = data.decode("utf-8", errors="replace")
    return ControlReply(status, decode_reply(data), raw=text)
