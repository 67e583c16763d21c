"""envckpt's structured events, silent inside a host program until the host asks.

The library never configures output. Every module logs through
``get_logger(name)``, which resolves at each call:

* structlog configured (by the host, by ``configure`` below, or by a test's
  ``structlog.testing.capture_logs``): the event goes through structlog's
  configuration, fields and all;
* structlog not configured: the event goes to the stdlib logger ``name``
  (under ``envckpt``, which has a ``NullHandler``), rendered as
  ``event key=value ...`` with the fields also in ``record.envckpt``. Nothing
  is printed unless the host configures stdlib logging, and a level the host
  filters out costs one ``isEnabledFor`` check.

Each logger keeps the structlog logger it resolved, and what ``enabled``
answered for each level, until structlog's configuration changes (another
wrapper class, logger factory, context class or processors list object;
checked by identity on structlog's configuration object at every call), so
an event costs what its processors cost; ``enabled`` gives None for a level
the logger filters, so a caller can skip building fields no one will see.

``configure`` is the one-line recipe for a program that wants envckpt's
events (the demo and the servers it starts use it); JSON lines are rendered
by orjson, to bytes written in one system call each when the file is
binary (as ``path=`` opens it)::

    from envckpt import logs
    logs.configure(json=True, level="INFO", path="run/events.jsonl")
    log = logs.get_logger("envckpt.facade").bind(checkpoint_id=cid)
    log.info("transition", machine="instance_lifecycle", ...)
"""

from __future__ import annotations

import io
import json as _json
import logging
import math
import sys
import time
from collections.abc import Callable, MutableMapping
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, TextIO, cast

import orjson
import structlog

ROOT = "envckpt"
# The library's stdlib loggers stay silent unless the host adds handlers.
logging.getLogger(ROOT).addHandler(logging.NullHandler())


class _ConfigView:
    """structlog's configuration read through ``get_config()``, with the attribute
    names of its configuration object: for a structlog without that object."""

    @property
    def is_configured(self) -> bool:
        return structlog.is_configured()

    def __getattr__(self, name: str) -> Any:
        return structlog.get_config()[name.removeprefix("default_")]


# structlog's configuration object, read at every event where ``get_config()``
# would build a dict each time (configure() assigns its attributes in place);
# a structlog that no longer has it is read through get_config().
_STRUCTLOG: Any = getattr(getattr(structlog, "_config", None), "_CONFIG", None) or _ConfigView()

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
}
# structlog's filtering wrapper classes (one per level, made once and cached
# by structlog): their methods are known, so an event may skip a step of them.
_FILTERING = frozenset(
    structlog.make_filtering_bound_logger(level) for level in (logging.NOTSET, *_LEVELS.values())
)


class _Resolved:
    """The structlog logger made under one configuration, and its emitter per level."""

    __slots__ = (
        "context_class",
        "emitters",
        "factory",
        "logger",
        "processors",
        "records",
        "wrapper",
    )

    def __init__(self, config: Any, logger: Any) -> None:
        # The parts themselves, not their ids: a list freed and another made at
        # the same address must not pass for the old one.
        self.processors = config.default_processors
        self.wrapper = config.default_wrapper_class
        self.factory = config.logger_factory
        self.context_class = config.default_context_class
        self.logger = logger
        self.emitters: dict[str, Callable[..., None] | None] = {}
        self.records: dict[str, Callable[[str, dict[str, Any]], None] | None] = {}

    def holds(self, config: Any) -> bool:
        """Whether structlog is still configured as when this logger was made."""
        # The processors list is the same object when capture_logs swaps its
        # contents, and bound loggers see those in place.
        return (
            self.processors is config.default_processors
            and self.wrapper is config.default_wrapper_class
            and self.factory is config.logger_factory
            and self.context_class is config.default_context_class
        )

    def allows(self, level: str) -> bool:
        """Whether the logger's level lets an event at ``level`` through."""
        # Asked of the class: the generic BoundLogger makes any attribute a
        # logging method, and "calling" is_enabled_for there would log it.
        check = getattr(type(self.logger), "is_enabled_for", None)
        # A wrapper class that cannot say (not a filtering one) decides per call.
        return True if check is None else bool(check(self.logger, _LEVELS[level]))

    def emitter(self, level: str) -> Callable[..., None] | None:
        """What logs an event at ``level``, or None when the logger's level filters it.

        Kept for the next call only under structlog's filtering wrapper classes,
        whose level is fixed; another (stdlib's BoundLogger) may follow a level
        the host changes at any time, so it is asked again at every call.
        """
        filtering = type(self.logger) in _FILTERING
        emit: Callable[..., None] | None
        if not self.allows(level):
            emit = None
        elif filtering:
            emit = _json_lines(self.logger, level) or _processing(self.logger, level)
        else:
            emit = getattr(self.logger, level)
        if filtering:
            self.emitters[level] = emit
        return emit

    def record_emitter(self, level: str) -> Callable[[str, dict[str, Any]], None] | None:
        """``emitter(level)`` taking the fields as one dict (``emit(event, fields)``), kept
        as ``emitter`` keeps its answer."""
        emit = self.emitter(level)
        filtering = type(self.logger) in _FILTERING
        record = None
        if emit is not None:
            record = (_json_records(self.logger, level) if filtering else None) or _spread(emit)
        if filtering:
            self.records[level] = record
        return record


def _spread(emit: Callable[..., None]) -> Callable[[str, dict[str, Any]], None]:
    """``emit(event, **fields)`` called as ``record(event, fields)``."""

    def record(event: str, fields: dict[str, Any]) -> None:
        emit(event, **fields)

    return record


def _processing(logger: Any, level: str) -> Callable[..., None]:
    """``logger.<level>`` of a structlog filtering logger, one step shorter.

    Its method calls ``_proxy_to_logger(level, event, **fields)``, which runs
    ``_process_event`` (context, fields, the configured processors) and hands
    the result to the wrapped logger's method, an event dropped by a processor
    (``DropEvent``) going nowhere. So does this, without re-packing the fields
    twice on the way (``_process_event`` is structlog's hook for wrapper classes).
    """
    process = logger._process_event
    write = getattr(logger._logger, level)

    def emit(event: str, **fields: Any) -> None:
        try:
            args, kwargs = process(level, event, fields)
        except structlog.DropEvent:
            return
        write(*args, **kwargs)

    return emit


def _json_lines(logger: Any, level: str) -> Callable[..., None] | None:
    """``_json_records``'s emitter called as ``emit(event, **fields)``, or None."""
    record = _json_records(logger, level)
    if record is None:
        return None

    def emit(event: str, **fields: Any) -> None:
        record(event, fields)

    return emit


def _json_records(logger: Any, level: str) -> Callable[[str, dict[str, Any]], None] | None:
    """The emitter of ``configure(json=True)`` to a binary file, or None under any other
    configuration; it takes an event's fields as one dict, which it fills in.

    It does what ``_processing`` does with that configuration (its three
    processors in order, then one write of the line) in one call: this is the
    transition log of a deployment, an event per machine move, and each step
    saved here is a share of a snapshot. Should the processors list stop
    holding exactly those three (``capture_logs`` swaps its contents in place),
    the event goes through ``_processing`` instead, at every call.
    """
    processors = logger._processors
    writer = logger._logger
    if processors != _JSON_PIPELINE or not isinstance(writer, _LineWriter) or logger._context:
        return None
    general = _processing(logger, level)
    merge, _, render = _JSON_PIPELINE
    write, whole = writer._write, writer._flush is None
    level_name = _LEVEL_OF_METHOD.get(level, level)
    clock, iso = time.time, _iso_utc

    def record(event: str, fields: dict[str, Any]) -> None:
        if processors != _JSON_PIPELINE:
            general(event, **fields)
            return
        # The event dict as _process_event builds it (an empty context, then the
        # fields, then the event), through the same processors.
        fields["event"] = event
        if _CONTEXT_VARS is None or _CONTEXT_VARS:
            merge(writer, level, fields)
        # _stamp's steps, in its order (a test holds the bytes equal).
        fields["level"] = level_name
        now = clock()
        fields["timestamp"] = iso(now)
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


class EnvckptLogger:
    """A logger that decides at each call whether structlog or stdlib carries it."""

    __slots__ = ("_context", "_name", "_resolved", "_stdlib")

    def __init__(self, name: str, context: dict[str, Any] | None = None) -> None:
        self._name = name
        self._context = context or {}
        self._stdlib = logging.getLogger(name)
        self._resolved: _Resolved | None = None

    def bind(self, **fields: Any) -> EnvckptLogger:
        """A logger whose every event carries ``fields`` too."""
        return EnvckptLogger(self._name, {**self._context, **fields})

    def is_enabled_for(self, level: str) -> bool:
        """Whether an event at ``level`` would go anywhere (skip building costly fields)."""
        if _STRUCTLOG.is_configured:
            return self._structlog().allows(level)
        return self._stdlib.isEnabledFor(_LEVELS[level])

    def enabled(self, level: str) -> Callable[..., None] | None:
        """What logs an event at ``level`` (``emit(event, **fields)``), or None when it
        would go nowhere: the check and the call resolve the logger once, and the
        answer is kept until structlog's configuration changes."""
        if not _STRUCTLOG.is_configured or self._context:
            return getattr(self, level) if self.is_enabled_for(level) else None
        resolved = self._structlog()
        try:
            return resolved.emitters[level]
        except KeyError:
            return resolved.emitter(level)

    def enabled_fields(self, level: str) -> Callable[[str, dict[str, Any]], None] | None:
        """``enabled(level)`` for a caller that has an event's fields as one dict already:
        ``emit(event, fields)``, which may add to ``fields`` (pass a dict of its own).

        The machines log each transition this way: spreading a dict into keyword
        arguments only for the emitter to gather them again costs as much as
        rendering the line.
        """
        if not _STRUCTLOG.is_configured or self._context:
            emit = self.enabled(level)
            return None if emit is None else _spread(emit)
        resolved = self._structlog()
        try:
            return resolved.records[level]
        except KeyError:
            return resolved.record_emitter(level)

    def _structlog(self) -> _Resolved:
        """The structlog logger for this name under the current configuration."""
        resolved = self._resolved
        if resolved is None or not resolved.holds(_STRUCTLOG):
            resolved = self._resolved = _Resolved(
                _STRUCTLOG, structlog.get_logger(self._name).bind()
            )
        return resolved

    def debug(self, event: str, **fields: Any) -> None:
        self._emit("debug", event, fields)

    def info(self, event: str, **fields: Any) -> None:
        self._emit("info", event, fields)

    def warning(self, event: str, **fields: Any) -> None:
        self._emit("warning", event, fields)

    def error(self, event: str, **fields: Any) -> None:
        self._emit("error", event, fields)

    def exception(self, event: str, **fields: Any) -> None:
        self._emit("error", event, {**fields, "exc_info": True})

    def _emit(self, level: str, event: str, fields: dict[str, Any]) -> None:
        if _STRUCTLOG.is_configured:
            getattr(self._structlog().logger, level)(event, **self._context, **fields)
            return
        numeric = _LEVELS[level]
        if not self._stdlib.isEnabledFor(numeric):
            return
        exc_info = fields.pop("exc_info", False)
        merged = {**self._context, **fields}
        text = " ".join([event, *(f"{key}={value!r}" for key, value in merged.items())])
        self._stdlib.log(
            numeric, text, exc_info=exc_info, extra={"envckpt": {"event": event, **merged}}
        )


def get_logger(name: str = ROOT) -> EnvckptLogger:
    """The logger for ``name`` (a dotted name under ``envckpt``)."""
    return EnvckptLogger(name)


def configure(
    *,
    json: bool = False,
    level: str = "info",
    path: str | Path | None = None,
    stream: IO[str] | IO[bytes] | None = None,
) -> None:
    """Print envckpt's events: JSON lines or console text, at ``level`` and above.

    ``path`` appends to a file (one JSON object per line with ``json=True``);
    otherwise ``stream`` (default stderr), text or binary. For programs, never
    for libraries: it configures structlog for the whole process.

    Every event reaches the OS before the call returns (a killed process
    loses no line it logged). JSON lines to a binary file (``path`` opens one,
    unbuffered) are rendered to bytes and written in one system call each.
    """
    if level.lower() not in _LEVELS:
        raise ValueError(f"unknown level {level!r}; one of {sorted(_LEVELS)}")
    if json and path is not None:
        stream = Path(path).open("ab", buffering=0)  # noqa: SIM115 - lives as long as the process
    elif path is not None:
        stream = Path(path).open("a", buffering=1)  # noqa: SIM115 - as above
    output = stream or sys.stderr
    renderer: Any
    factory: Any
    if json and isinstance(output, io.RawIOBase | io.BufferedIOBase):
        renderer, factory = _json_line, _LineWriter(cast("IO[bytes]", output)).factory
    else:
        renderer = (
            structlog.processors.JSONRenderer(serializer=_orjson_text, default=str)
            if json
            else structlog.dev.ConsoleRenderer(colors=False)
        )
        factory = structlog.WriteLoggerFactory(file=cast("TextIO", output))
    structlog.configure(
        # A list of its own (capture_logs edits the configured list in place):
        # _JSON_PIPELINE's steps, with this output's renderer last.
        processors=[*_JSON_PIPELINE[:-1], renderer],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level.lower()]),
        logger_factory=factory,
        cache_logger_on_first_use=False,
    )


class _LineWriter:
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

    def factory(self, *args: Any) -> _LineWriter:
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
_LEVEL_OF_METHOD = {"warn": "warning", "exception": "error"}


def _stamp(logger: Any, method: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """structlog's ``add_log_level``, ``TimeStamper(fmt="iso", utc=True)`` and
    ``format_exc_info`` in one step, plus ``ts``; one clock read for both times.

    The same fields in the same order as those processors wrote them: an
    event costs a few processor calls fewer (the transition log's share of a
    snapshot). ``_json_records`` repeats these steps inline; a test holds both
    lines equal, byte for byte.
    """
    event["level"] = _LEVEL_OF_METHOD.get(method, method)
    now = time.time()
    event["timestamp"] = _iso_utc(now)
    # Charts overlay and order events from several processes by this field.
    event.setdefault("ts", now)
    if "exc_info" in event:
        return structlog.processors.format_exc_info(logger, method, event)
    return event


# The last whole second formatted, as (second, "YYYY-MM-DDTHH:MM:SS"): events
# come many to a second, and formatting the date is most of a timestamp's cost.
_last_second: tuple[float, str] = (-1.0, "")


def _iso_utc(seconds: float) -> str:
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


_JSON_LINE = orjson.OPT_APPEND_NEWLINE
_JSON_LINE_ANY_KEYS = orjson.OPT_NON_STR_KEYS | orjson.OPT_APPEND_NEWLINE


def _json_line(logger: Any, method: str, event: MutableMapping[str, Any]) -> bytes:
    """The event as one JSON line in bytes (what ``_orjson_text`` writes, encoded,
    with its newline), for a binary file."""
    try:
        # String keys, the usual event: orjson's key check is a third of its time.
        return orjson.dumps(event, default=str, option=_JSON_LINE)
    except TypeError:
        pass
    try:
        return orjson.dumps(event, default=str, option=_JSON_LINE_ANY_KEYS)
    except TypeError:
        return (_json.dumps(event, default=str) + "\n").encode()


# structlog's context variables, made only by bind_contextvars: while it has
# made none, merge_contextvars (a walk over every variable of the context)
# finds nothing. None where structlog no longer keeps them there.
_CONTEXT_VARS: dict[str, Any] | None = getattr(structlog.contextvars, "_CONTEXT_VARS", None)

# What ``configure(json=True)`` to a binary file runs, in order (see ``_json_records``).
_JSON_PIPELINE: list[Callable[..., Any]] = [
    structlog.contextvars.merge_contextvars,
    _stamp,
    _json_line,
]


def _orjson_text(event: Any, **options: Any) -> str:
    # About a third of the standard library's time per event. Non-string keys
    # are written as strings, other types through ``default``; what orjson
    # refuses even so (integers beyond 64 bits) the standard library writes.
    default = options.get("default")
    try:
        return orjson.dumps(event, default=default, option=orjson.OPT_NON_STR_KEYS).decode()
    except TypeError:
        return _json.dumps(event, default=default)
