"""Fixtures shared by the trainer tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers.snapshot_rig import Rig


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    """A fresh trainer rig (simulated Gym, facade, trainer state) under ``tmp_path``."""
    rig = Rig(tmp_path).fresh()
    yield rig
    rig.plane.close()
