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
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, TextIO, cast

import structlog

from envckpt.log_lines import JSON_PIPELINE, LineWriter, json_line, json_records, orjson_text

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


# An emitter taking an event's fields as one dict, which it may fill in.
_Record = Callable[[str, dict[str, Any]], None]


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
        self.records: dict[str, _Record | None] = {}

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
        return self._resolve(level)[0]

    def record_emitter(self, level: str) -> Callable[[str, dict[str, Any]], None] | None:
        """``emitter(level)`` taking the fields as one dict (``emit(event, fields)``), kept
        as ``emitter`` keeps its answer."""
        return self._resolve(level)[1]

    def _resolve(self, level: str) -> tuple[Callable[..., None] | None, _Record | None]:
        """Both emitters of ``level``, made once and kept together under a filtering logger."""
        filtering = type(self.logger) in _FILTERING
        pair: tuple[Callable[..., None] | None, _Record | None]
        if not self.allows(level):
            pair = (None, None)
        elif not filtering:
            method = getattr(self.logger, level)
            pair = (method, _spread(method))
        else:
            general = _processing(self.logger, level)
            record = json_records(self.logger, level, general)
            pair = (general, _spread(general)) if record is None else (_json_lines(record), record)
        if filtering:
            self.emitters[level], self.records[level] = pair
        return pair


def _spread(emit: Callable[..., None]) -> _Record:
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


def _json_lines(record: _Record) -> Callable[..., None]:
    """``log_lines.json_records``'s emitter ``record`` called as ``emit(event, **fields)``."""

    def emit(event: str, **fields: Any) -> None:
        record(event, fields)

    return emit


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

    def enabled_fields(self, level: str) -> _Record | None:
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
        renderer, factory = json_line, LineWriter(cast("IO[bytes]", output)).factory
    else:
        renderer = (
            structlog.processors.JSONRenderer(serializer=orjson_text, default=str)
            if json
            else structlog.dev.ConsoleRenderer(colors=False)
        )
        factory = structlog.WriteLoggerFactory(file=cast("TextIO", output))
    structlog.configure(
        # A list of its own (capture_logs edits the configured list in place):
        # JSON_PIPELINE's steps, with this output's renderer last.
        processors=[*JSON_PIPELINE[:-1], renderer],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level.lower()]),
        logger_factory=factory,
        cache_logger_on_first_use=False,
    )
