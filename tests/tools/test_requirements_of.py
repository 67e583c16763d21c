"""tools/requirements_of.py: an installed distribution's requirements without its extras."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest
from packaging.requirements import Requirement

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "requirements_of.py"


def load_tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("requirements_of", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_nemo_gyms_base_requirements_are_listed_and_its_extras_left_out() -> None:
    """What the Makefile hands uv: openai and ray stay; vllm (extra vllm), pytest (extra dev)
    and nemo-gym's own extras go."""
    pytest.importorskip("nemo_gym")
    lines = load_tool().base_requirements("nemo-gym")
    names = {Requirement(line).name for line in lines}
    assert "openai==2.44.0" in lines
    assert {"openai", "ray", "fastapi", "uvicorn"} <= names
    assert not names & {"vllm", "pytest", "daytona", "nemo-gym", "pre-commit"}
    assert all("extra" not in str(Requirement(line).marker or "") for line in lines)
