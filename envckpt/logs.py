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

Each logger keeps the structlog logger it resolved, and resolves again only
when structlog's configuration changes (another wrapper class, logger
factory, context class or processors list), so an event costs what its
processors cost; ``is_enabled_for`` asks a filtering logger for its level,
so a caller can skip building fields no one will see.

``configure`` is the one-line recipe for a program that wants envckpt's
events (the demo and the servers it starts use it); JSON lines are rendered
by orjson::

    from envckpt import logs
    logs.configure(json=True, level="INFO", path="run/events.jsonl")
    log = logs.get_logger("envckpt.facade").bind(checkpoint_id=cid)
    log.info("transition", machine="instance_lifecycle", ...)
"""

from __future__ import annotations

import json as _json
import logging
import math
import sys
import time
from collections.abc import Callable, MutableMapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import orjson
import structlog

ROOT = "envckpt"
# The library's stdlib loggers stay silent unless the host adds handlers.
logging.getLogger(ROOT).addHandler(logging.NullHandler())

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
}


class EnvckptLogger:
    """A logger that decides at each call whether structlog or stdlib carries it."""

    __slots__ = ("_context", "_name", "_resolved", "_stdlib")

    def __init__(self, name: str, context: dict[str, Any] | None = None) -> None:
        self._name = name
        self._context = context or {}
        self._stdlib = logging.getLogger(name)
        # (structlog configuration key, the structlog logger made under it)
        self._resolved: tuple[tuple[Any, ...], Any] | None = None

    def bind(self, **fields: Any) -> EnvckptLogger:
        """A logger whose every event carries ``fields`` too."""
        return EnvckptLogger(self._name, {**self._context, **fields})

    def is_enabled_for(self, level: str) -> bool:
        """Whether an event at ``level`` would go anywhere (skip building costly fields)."""
        if structlog.is_configured():
            check = getattr(self._structlog(), "is_enabled_for", None)
            # A wrapper class that cannot say (not a filtering one) decides per call.
            return True if check is None else bool(check(_LEVELS[level]))
        return self._stdlib.isEnabledFor(_LEVELS[level])

    def enabled(self, level: str) -> Callable[..., None] | None:
        """What logs an event at ``level`` (``emit(event, **fields)``), or None when it
        would go nowhere: the check and the call resolve the logger once."""
        if not structlog.is_configured() or self._context:
            return getattr(self, level) if self.is_enabled_for(level) else None
        logger = self._structlog()
        check = getattr(logger, "is_enabled_for", None)
        if check is not None and not check(_LEVELS[level]):
            return None
        method: Callable[..., None] = getattr(logger, level)
        return method

    def _structlog(self) -> Any:
        """The structlog logger for this name under the current configuration."""
        config = structlog.get_config()
        # Identity of each part: the processors list is the same object when
        # capture_logs swaps its contents, and bound loggers see those in place.
        key = (
            id(config["processors"]),
            config["wrapper_class"],
            config["logger_factory"],
            config["context_class"],
        )
        resolved = self._resolved
        if resolved is None or resolved[0] != key:
            resolved = self._resolved = (key, structlog.get_logger(self._name).bind())
        return resolved[1]

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
        if structlog.is_configured():
            getattr(self._structlog(), level)(event, **self._context, **fields)
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
    stream: TextIO | None = None,
) -> None:
    """Print envckpt's events: JSON lines or console text, at ``level`` and above.

    ``path`` appends to a file (one JSON object per line with ``json=True``);
    otherwise ``stream`` (default stderr). For programs, never for libraries:
    it configures structlog for the whole process.
    """
    if level.lower() not in _LEVELS:
        raise ValueError(f"unknown level {level!r}; one of {sorted(_LEVELS)}")
    renderer: Any = (
        structlog.processors.JSONRenderer(serializer=_orjson_text, default=str)
        if json
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    output: TextIO = (
        Path(path).open("a", buffering=1)  # noqa: SIM115 - lives as long as the process
        if path is not None
        else (stream or sys.stderr)
    )
    structlog.configure(
        processors=[structlog.contextvars.merge_contextvars, _stamp, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level.lower()]),
        logger_factory=structlog.WriteLoggerFactory(file=output),
        cache_logger_on_first_use=False,
    )


# What structlog's add_log_level writes for a method name that is not a level.
_LEVEL_OF_METHOD = {"warn": "warning", "exception": "error"}


def _stamp(logger: Any, method: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """structlog's ``add_log_level``, ``TimeStamper(fmt="iso", utc=True)`` and
    ``format_exc_info`` in one step, plus ``ts``; one clock read for both times.

    The same fields in the same order as those processors wrote them: an
    event costs a few processor calls fewer (the transition log's share of a
    snapshot).
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
    return f"{text}.{micros:06d}Z" if micros else f"{text}Z"


def _orjson_text(event: Any, **options: Any) -> str:
    # About a third of the standard library's time per event. Non-string keys
    # are written as strings, other types through ``default``; what orjson
    # refuses even so (integers beyond 64 bits) the standard library writes.
    default = options.get("default")
    try:
        return orjson.dumps(event, default=default, option=orjson.OPT_NON_STR_KEYS).decode()
    except TypeError:
        return _json.dumps(event, default=default)
