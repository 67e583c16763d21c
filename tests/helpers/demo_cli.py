"""Running ``envckpt demo`` inside a test: output captured, logging configuration put back."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator

import structlog

import envckpt.demo


@contextlib.contextmanager
def restored_logging() -> Iterator[None]:
    """The demo configures structlog globally; put the previous configuration back."""
    saved = structlog.get_config()
    try:
        yield
    finally:
        structlog.configure(**saved)


def run_main(argv: list[str]) -> tuple[int, str, str]:
    """``envckpt demo ARGV``: exit code, stdout, stderr."""
    out, err = io.StringIO(), io.StringIO()
    with restored_logging(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = envckpt.demo.main(argv)
    return code, out.getvalue(), err.getvalue()
