"""Libraries are used through their public API: no envckpt module names a private part of one.

Checked on the source: ``from lib import _name``, ``import lib._module`` and
``lib._name`` (at any depth of an attribute chain that starts at an imported
library) are refused for every library that is not the standard library.
Dunders (``__version__``) are public. What an object returned by a library
holds cannot be seen this way; review catches that.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "envckpt"
MODULES = sorted(PACKAGE.rglob("*.py"))


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _is_library(dotted: str) -> bool:
    top = dotted.split(".")[0]
    return top != "envckpt" and top not in sys.stdlib_module_names


def private_uses(source: str) -> list[str]:
    """Each private library name the source reaches, as ``line N: dotted.name``."""
    tree = ast.parse(source)
    libraries: dict[str, str] = {}  # a local name -> the library path it is bound to
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if not _is_library(alias.name):
                    continue
                if any(_private(part) for part in alias.name.split(".")):
                    found.append(f"line {node.lineno}: {alias.name}")
                local = alias.asname or alias.name.split(".")[0]
                libraries[local] = alias.name if alias.asname else local
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if not _is_library(node.module):
                continue
            for alias in node.names:
                dotted = f"{node.module}.{alias.name}"
                if any(_private(part) for part in dotted.split(".")):
                    found.append(f"line {node.lineno}: {dotted}")
                libraries[alias.asname or alias.name] = dotted
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        chain = [node.attr]
        value = node.value
        while isinstance(value, ast.Attribute):
            chain.append(value.attr)
            value = value.value
        if isinstance(value, ast.Name) and value.id in libraries and _private(node.attr):
            dotted = ".".join([libraries[value.id], *reversed(chain)])
            found.append(f"line {node.lineno}: {dotted}")
    return sorted(set(found), key=lambda use: (int(use.split(":")[0].split()[1]), use))


@pytest.mark.parametrize("path", MODULES, ids=[str(p.relative_to(PACKAGE)) for p in MODULES])
def test_no_module_names_a_private_part_of_a_library(path: Path) -> None:
    """Nothing private of transitions, structlog, h11, orjson, uvicorn... is imported or read."""
    uses = private_uses(path.read_text())
    assert not uses, f"{path.relative_to(PACKAGE.parent)} uses private library names: {uses}"


def test_the_check_sees_each_way_of_reaching_a_private_name() -> None:
    """Not vacuous: each form is reported, public names and the standard library are not."""
    source = (
        "import structlog\n"
        "import transitions.core as tc\n"
        "from h11 import _events\n"
        "import orjson._impl\n"
        "from transitions import Machine\n"
        "import os\n"
        "a = structlog._config\n"
        "b = tc.Machine._is_valid_source\n"
        "c = Machine._private_thing\n"
        "d = structlog.get_logger\n"
        "e = os._exit\n"
        "f = structlog.__version__\n"
    )
    assert private_uses(source) == [
        "line 3: h11._events",
        "line 4: orjson._impl",
        "line 7: structlog._config",
        "line 8: transitions.core.Machine._is_valid_source",
        "line 9: transitions.Machine._private_thing",
    ]
