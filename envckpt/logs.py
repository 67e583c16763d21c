"""envckpt's structured events, silent inside a host program until the host asks.

The library never configures output. Every module logs through
``get_logger(name)``, whose logger decides at each call where an event goes:

* structlog configured (by the host, by ``configure`` below, or by a test's
  ``structlog.testing.capture_logs``): ``structlog.get_logger(name)``, so the
  event goes through the host's processors, wrapper class and output;
* structlog not configured: structlog's standard-library wrapper
  (``structlog.stdlib.BoundLogger``) around the stdlib logger ``name``
  (under ``envckpt``, which has a ``NullHandler``), rendered as
  ``event key=value ...`` with the fields also in ``record.envckpt``. Nothing
  is printed unless the host configures stdlib logging, and a level the host
  filters out is dropped by ``structlog.stdlib.filter_by_level`` first.

``enabled(level)`` gives the logging method, or None for a level the logger
filters, so a caller can skip building fields no one will see.

``configure`` is structlog's documented recipe in one call, for a program that
wants envckpt's events (the demo and the servers it starts use it): context
variables, level and timestamp (seconds since the epoch in JSON, ISO on the
console), then ``JSONRenderer`` with orjson (tracebacks as text), or
``ConsoleRenderer``. Every line is flushed to the OS before the log call
returns, so a killed process loses no line it logged::

    from envckpt import logs
    logs.configure(json=True, level="INFO", path="run/events.jsonl")
    log = logs.get_logger("envckpt.facade").bind(checkpoint_id=cid)
    log.info("transition", machine="instance_lifecycle", ...)
"""

from __future__ import annotations

import functools
import io
import json as stdlib_json
import logging
import sys
from collections.abc import Callable, MutableMapping
from pathlib import Path
from typing import IO, Any, BinaryIO, TextIO, cast

import orjson
import structlog

ROOT = "envckpt"
# The library's stdlib loggers stay silent unless the host adds handlers.
logging.getLogger(ROOT).addHandler(logging.NullHandler())

LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
}


def _stdlib_call(
    logger: Any, method: str, event_dict: MutableMapping[str, Any]
) -> tuple[tuple[str], dict[str, Any]]:
    """The last processor of the unconfigured path: the stdlib logger's arguments.

    The message reads ``event key=value ...``; the fields ride along whole in
    ``record.envckpt`` (one attribute, so no field can clash with a
    ``LogRecord`` attribute of the same name).
    """
    exc_info = event_dict.pop("exc_info", False)
    fields = dict(event_dict)
    event = str(fields.get("event", ""))
    text = " ".join(
        [event, *(f"{key}={value!r}" for key, value in fields.items() if key != "event")]
    )
    return (text,), {"exc_info": exc_info, "extra": {ROOT: fields}}


@functools.cache
def _stdlib_logger(name: str) -> structlog.stdlib.BoundLogger:
    """structlog's stdlib wrapper around the stdlib logger ``name``, for an unconfigured host."""
    return structlog.stdlib.BoundLogger(
        logging.getLogger(name),
        processors=[structlog.stdlib.filter_by_level, _stdlib_call],
        context={},
    )


# ``structlog.get_logger(name).bind()`` per name, kept with the parts of structlog's
# configuration it was made under (processors, wrapper class, logger factory,
# context class): resolving a logger costs as much as the processors of a
# transition event, and the configuration rarely changes.
_RESOLVED: dict[str, tuple[object, object, object, object, Any]] = {}


def _configured(name: str) -> Any:
    """structlog's logger for ``name`` under its configuration of this call."""
    config = structlog.get_config()
    held = _RESOLVED.get(name)
    # The parts themselves, compared by identity: a program that configures
    # again (another file, another level) is followed at its next event, and
    # capture_logs, which edits the processors list in place, is seen through it.
    if (
        held is None
        or held[0] is not config["processors"]
        or held[1] is not config["wrapper_class"]
        or held[2] is not config["logger_factory"]
        or held[3] is not config["context_class"]
    ):
        held = _RESOLVED[name] = (
            config["processors"],
            config["wrapper_class"],
            config["logger_factory"],
            config["context_class"],
            structlog.get_logger(name).bind(),
        )
    return held[4]


def _allows(logger: Any, level: str) -> bool:
    """Whether ``logger`` lets an event at ``level`` through."""
    # Asked of the class: structlog's generic BoundLogger makes any attribute a
    # logging method, and "calling" is_enabled_for there would log it. A
    # wrapper class that cannot say decides at the call.
    check = getattr(type(logger), "is_enabled_for", None)
    return True if check is None else bool(check(logger, LEVELS[level]))


class EnvckptLogger:
    """A logger that decides at each call whether structlog or stdlib carries it."""

    __slots__ = ("context", "name")

    def __init__(self, name: str, context: dict[str, Any] | None = None) -> None:
        self.name = name
        self.context = context or {}

    def bind(self, **fields: Any) -> EnvckptLogger:
        """A logger whose every event carries ``fields`` too."""
        return EnvckptLogger(self.name, {**self.context, **fields})

    def structlog_logger(self) -> Any:
        """The structlog logger that carries an event logged now, with this logger's context."""
        logger = _configured(self.name) if structlog.is_configured() else _stdlib_logger(self.name)
        return logger.bind(**self.context) if self.context else logger

    def is_enabled_for(self, level: str) -> bool:
        """Whether an event at ``level`` would go anywhere (skip building costly fields)."""
        return _allows(self.structlog_logger(), level)

    def enabled(self, level: str) -> Callable[..., Any] | None:
        """What logs an event at ``level`` (``emit(event, **fields)``), or None when it
        would go nowhere: the check and the call resolve the logger once."""
        logger = self.structlog_logger()
        return getattr(logger, level) if _allows(logger, level) else None

    def debug(self, event: str, **fields: Any) -> None:
        self.structlog_logger().debug(event, **fields)

    def info(self, event: str, **fields: Any) -> None:
        self.structlog_logger().info(event, **fields)

    def warning(self, event: str, **fields: Any) -> None:
        self.structlog_logger().warning(event, **fields)

    def error(self, event: str, **fields: Any) -> None:
        self.structlog_logger().error(event, **fields)

    def exception(self, event: str, **fields: Any) -> None:
        self.structlog_logger().error(event, **{"exc_info": True, **fields})


def get_logger(name: str = ROOT) -> EnvckptLogger:
    """The logger for ``name`` (a dotted name under ``envckpt``)."""
    return EnvckptLogger(name)


def orjson_bytes(event: Any, **options: Any) -> bytes:
    """``JSONRenderer``'s serializer for a binary file: orjson, non-string keys as strings.

    What orjson refuses even so (integers beyond 64 bits) the standard
    library writes.
    """
    default = options.get("default")
    try:
        # String keys, the usual event: orjson's check of other keys is a
        # third of its time.
        return orjson.dumps(event, default=default)
    except TypeError:
        pass
    try:
        return orjson.dumps(event, default=default, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:
        return stdlib_json.dumps(event, default=default).encode()


def orjson_text(event: Any, **options: Any) -> str:
    """``orjson_bytes`` as text, for a text stream."""
    return orjson_bytes(event, **options).decode()


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

    Every event reaches the OS before the call returns (structlog's loggers
    flush after each line): a killed process loses no line it logged.
    """
    if level.lower() not in LEVELS:
        raise ValueError(f"unknown level {level!r}; one of {sorted(LEVELS)}")
    if path is not None:
        # Lives as long as the process.
        stream = Path(path).open("ab" if json else "a")  # noqa: SIM115
    output = stream or sys.stderr
    binary = isinstance(output, io.RawIOBase | io.BufferedIOBase)
    factory: Any
    if binary:
        factory = structlog.BytesLoggerFactory(file=cast("BinaryIO", output))
    else:
        factory = structlog.WriteLoggerFactory(file=cast("TextIO", output))
    processors: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
    ]
    if json:
        processors += [
            # Seconds since the epoch: formatting an ISO date would cost more
            # than the rest of a transition's line.
            structlog.processors.TimeStamper(fmt=None),
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(
                serializer=orjson_bytes if binary else orjson_text, default=str
            ),
        ]
    else:
        processors += [
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.dev.ConsoleRenderer(colors=False),
        ]
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(LEVELS[level.lower()]),
        logger_factory=factory,
        # Each call resolves the configuration of the moment: a program may
        # configure again (another file, another level) and is followed.
        cache_logger_on_first_use=False,
    )
