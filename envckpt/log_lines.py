"""``configure(json=True)``'s lines: one JSON object per event, rendered to bytes by
orjson and written in one system call, and the emitter that does all of it in one call.

``envckpt.logs`` configures structlog with ``JSON_PIPELINE``'s steps (the
renderer last) and, for a binary file, ``LineWriter`` as the wrapped logger;
``json_records`` is the shortcut its loggers take while that configuration
holds::

    writer = LineWriter(open("events.jsonl", "ab", buffering=0))
    line = json_line(writer, "info", stamp(writer, "info", {"event": "e"}))

A line holds the fields in the order structlog's processors would write
them, and is in the OS when the call returns (a killed process loses no line
it logged).
"""

from __future__ import annotations

import io
import json as _json
import math
import time
from collections.abc import Callable, MutableMapping
from datetime import UTC, datetime
from typing import IO, Any

import orjson
import structlog


class LineWriter:
    """structlog's wrapped logger for a binary file: each rendered line (bytes,
    newline included) in one write, flushed, so it is in the OS when the call
    returns; no lock, as one write to a file opened for appending is one
    append, whole."""

    __slots__ = ("_file", "_flush", "_write")

    def __init__(self, file: IO[bytes]) -> None:
        self._file = file
        self._write = file.write
        # A raw file has no buffer to flush; a buffered one must reach the OS.
        self._flush = None if isinstance(file, io.RawIOBase) else file.flush

    def factory(self, *args: Any) -> LineWriter:
        """structlog's ``logger_factory``: every logger writes to this one file."""
        return self

    def msg(self, line: bytes) -> None:
        self.finish(line, self._write(line))

    def finish(self, line: bytes, written: int | None) -> None:
        """What is left after a first write took ``written`` bytes of ``line``."""
        # A raw write may take part of a line (a signal, a full pipe): write the rest.
        while written is not None and written < len(line):
            line = line[written:]
            written = self._write(line)
        if self._flush is not None:
            self._flush()

    log = debug = info = warn = warning = msg
    fatal = failure = err = error = critical = exception = msg


# What structlog's add_log_level writes for a method name that is not a level.
LEVEL_OF_METHOD = {"warn": "warning", "exception": "error"}


def stamp(logger: Any, method: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """structlog's ``add_log_level``, ``TimeStamper(fmt="iso", utc=True)`` and
    ``format_exc_info`` in one step, plus ``ts``; one clock read for both times.

    The same fields in the same order as those processors wrote them: an
    event costs a few processor calls fewer (the transition log's share of a
    snapshot). ``json_records`` repeats these steps inline; a test holds both
    lines equal, byte for byte.
    """
    event["level"] = LEVEL_OF_METHOD.get(method, method)
    now = time.time()
    event["timestamp"] = iso_utc(now)
    # Charts overlay and order events from several processes by this field.
    event.setdefault("ts", now)
    if "exc_info" in event:
        return structlog.processors.format_exc_info(logger, method, event)
    return event


# The last whole second formatted, as (second, "YYYY-MM-DDTHH:MM:SS"): events
# come many to a second, and formatting the date is most of a timestamp's cost.
_last_second: tuple[float, str] = (-1.0, "")


def iso_utc(seconds: float) -> str:
    """``datetime.fromtimestamp(seconds, timezone.utc).isoformat()`` with ``Z`` for
    ``+00:00``, as structlog's ISO UTC stamp writes it (no fraction when it is 0)."""
    global _last_second
    # Microseconds rounded half to even, carried into the second, as datetime does.
    fraction, whole = math.modf(seconds)
    micros = round(fraction * 1e6)
    if micros >= 1_000_000:
        micros -= 1_000_000
        whole += 1.0
    cached, text = _last_second
    if whole != cached:
        text = datetime.fromtimestamp(whole, UTC).strftime("%Y-%m-%dT%H:%M:%S")
        _last_second = (whole, text)
    return "%s.%06dZ" % (text, micros) if micros else text + "Z"  # noqa: UP031 - faster


_LINE = orjson.OPT_APPEND_NEWLINE
_ANY_KEYS = orjson.OPT_NON_STR_KEYS | orjson.OPT_APPEND_NEWLINE


def json_line(logger: Any, method: str, event: MutableMapping[str, Any]) -> bytes:
    """The event as one JSON line in bytes (what ``orjson_text`` writes, encoded,
    with its newline), for a binary file."""
    try:
        # String keys, the usual event: orjson's key check is a third of its time.
        return orjson.dumps(event, default=str, option=_LINE)
    except TypeError:
        pass
    try:
        return orjson.dumps(event, default=str, option=_ANY_KEYS)
    except TypeError:
        return (_json.dumps(event, default=str) + "\n").encode()


# structlog's context variables, made only by bind_contextvars: while it has
# made none, merge_contextvars (a walk over every variable of the context)
# finds nothing. None where structlog no longer keeps them there.
CONTEXT_VARS: dict[str, Any] | None = getattr(structlog.contextvars, "_CONTEXT_VARS", None)

# What ``configure(json=True)`` to a binary file runs, in order (see ``json_records``).
JSON_PIPELINE: list[Callable[..., Any]] = [
    structlog.contextvars.merge_contextvars,
    stamp,
    json_line,
]


def orjson_text(event: Any, **options: Any) -> str:
    # About a third of the standard library's time per event. Non-string keys
    # are written as strings, other types through ``default``; what orjson
    # refuses even so (integers beyond 64 bits) the standard library writes.
    default = options.get("default")
    try:
        return orjson.dumps(event, default=default, option=orjson.OPT_NON_STR_KEYS).decode()
    except TypeError:
        return _json.dumps(event, default=default)


def json_records(
    logger: Any, level: str, general: Callable[..., None]
) -> Callable[[str, dict[str, Any]], None] | None:
    """The emitter of ``configure(json=True)`` to a binary file, or None under any other
    configuration; it takes an event's fields as one dict, which it fills in.

    It does what ``general`` (the filtering logger's emitter through its
    processors) does with that configuration (its three processors in order,
    then one write of the line) in one call: this is the transition log of a
    deployment, an event per machine move, and each step saved here is a
    share of a snapshot. Should the processors list stop holding exactly
    those three (``capture_logs`` swaps its contents in place), the event goes
    through ``general`` instead, at every call.
    """
    processors = logger._processors
    writer = logger._logger
    if processors != JSON_PIPELINE or not isinstance(writer, LineWriter) or logger._context:
        return None
    merge, _, render = JSON_PIPELINE
    write, whole = writer._write, writer._flush is None
    level_name = LEVEL_OF_METHOD.get(level, level)

    def record(event: str, fields: dict[str, Any]) -> None:
        if processors != JSON_PIPELINE:
            general(event, **fields)
            return
        # The event dict as _process_event builds it (an empty context, then the
        # fields, then the event), through the same processors.
        fields["event"] = event
        if CONTEXT_VARS is None or CONTEXT_VARS:
            merge(writer, level, fields)
        # stamp's steps, in its order (a test holds the bytes equal).
        fields["level"] = level_name
        now = time.time()
        fields["timestamp"] = iso_utc(now)
        fields.setdefault("ts", now)
        stamped: MutableMapping[str, Any] = fields
        if "exc_info" in fields:
            stamped = structlog.processors.format_exc_info(writer, level, fields)
        line = render(writer, level, stamped)
        # One write takes the whole line but for a signal or a full disk; the
        # writer finishes a short write (and flushes a buffered file).
        written = write(line)
        if written != len(line) or not whole:
            writer.finish(line, written)

    return record
