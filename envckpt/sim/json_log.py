"""A server process's log as JSON lines in one file (``--log-json``).

    configure_json_log(Path("server.jsonl"))   # in a process's main, before serving

Apart from ``server`` so that a uvicorn worker process (``worker_apps``)
configures its own log without importing the server that launches it.
"""

from __future__ import annotations

import logging
from pathlib import Path

import structlog


def configure_json_log(path: Path) -> None:
    """Send this process's structlog events and stdlib records to ``path`` as JSON lines.

    For a process's ``main`` only. stdlib records (uvicorn's) go through the
    same renderer, so every line of the file is one JSON object; the file is
    appended to and flushed per event, so a process killed mid-run loses no
    line it logged.
    """
    stamps: list[structlog.typing.Processor] = [
        structlog.stdlib.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[structlog.stdlib.add_logger_name, *stamps],
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.JSONRenderer(),
            ],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    # The transitions library narrates each fire at INFO (envckpt's own
    # ``transition`` event records it once, with its fields) and httpx each
    # request between the agent and its model and tool: warnings only.
    for chatty in ("transitions", "httpx"):
        logging.getLogger(chatty).setLevel(logging.WARNING)
    # uvicorn's own logging config (applied by any earlier uvicorn.Config in
    # this process, or by a library's dictConfig) gives its loggers their own
    # stream handlers and level, stops them propagating or disables them: its
    # records would then miss the file. The file is this process's one log.
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        server_logger = logging.getLogger(name)
        server_logger.handlers.clear()
        server_logger.filters.clear()
        server_logger.setLevel(logging.NOTSET)
        server_logger.propagate = True
        server_logger.disabled = False
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            *stamps,
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
