"""Fixtures shared by the worker tests."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A new directory right under /tmp, removed after the test: a Unix socket's path
    must stay under about 100 bytes, which pytest's tmp_path may not."""
    path = Path(tempfile.mkdtemp(prefix="ew-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)
