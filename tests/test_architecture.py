"""The layering and shape rules of docs/engine.md, checked on the source itself.

* Nothing imports from a layer above it (function-level imports included).
* Product code never imports the simulated Gym or the demo.
* No module is over 450 lines.
* Outside ``envckpt/machines/``, code names states by their enum values: no
  comparison against a state name spelt as a string.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from envckpt.machines.tables import ALL_TABLES

PACKAGE = Path(__file__).resolve().parents[1] / "envckpt"
MAX_MODULE_LINES = 450

# Bottom to top, as docs/engine.md "Layers" draws it. A module may import
# from its own layer and the layers below.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "values",
        (
            "ids",
            "episodes",
            "clock",
            "fsutil",
            "crashpoints",
            "logs",
            "log_lines",
            "extras",
            "process_tie",
        ),
    ),
    ("protocol", ("protocol",)),
    ("errors", ("errors", "checksummed")),
    ("interfaces", ("interfaces", "inventory")),
    ("machines", ("machines",)),
    ("participant", ("participant",)),
    ("coordination", ("coordination",)),
    ("http", ("http",)),
    ("gym", ("gym",)),
    ("facade", ("facade",)),
    ("trainer", ("trainer",)),
    ("deployments", ("sim", "nemo_gym")),
    (
        "applications",
        ("demo", "cli", "__main__", "__init__", "config", "snapshots"),
    ),
)
PRODUCT_MAY_NOT_IMPORT = ("sim", "demo")


def layer_of(module: str) -> int:
    """The layer index of ``envckpt.<module>`` (dotted, without the package)."""
    head = module.split(".")[0]
    for index, (_, members) in enumerate(LAYERS):
        if head in members:
            return index
    raise AssertionError(f"envckpt.{module} is in no layer: add it to LAYERS and docs/engine.md")


def modules() -> Iterator[tuple[str, Path]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).with_suffix("")
        parts = relative.parts
        if parts[-1] == "__init__" and len(parts) > 1:
            parts = parts[:-1]
        yield ".".join(parts), path


def imported(path: Path, module: str) -> Iterator[tuple[int, str]]:
    """(line, envckpt submodule) for every import of envckpt in ``path``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module.rsplit(".", 1)[0] if "." in module else ""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("envckpt."):
                    yield node.lineno, alias.name.removeprefix("envckpt.")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
                target = f"{base}.{node.module}" if node.module else base
                yield node.lineno, target.strip(".")
            elif node.module == "envckpt":
                for alias in node.names:
                    yield node.lineno, alias.name
            elif node.module and node.module.startswith("envckpt."):
                yield node.lineno, node.module.removeprefix("envckpt.")


ALL_MODULES = list(modules())


@pytest.mark.parametrize(("module", "path"), ALL_MODULES, ids=[m for m, _ in ALL_MODULES])
def test_no_module_imports_from_a_layer_above_it(module: str, path: Path) -> None:
    """Every envckpt import points to the module's own layer or below."""
    own = layer_of(module)
    upward = [
        f"line {line}: envckpt.{target} ({LAYERS[layer_of(target)][0]})"
        for line, target in imported(path, module)
        if layer_of(target) > own
    ]
    assert not upward, f"envckpt.{module} ({LAYERS[own][0]}) imports upwards: {upward}"


@pytest.mark.parametrize(("module", "path"), ALL_MODULES, ids=[m for m, _ in ALL_MODULES])
def test_product_code_never_imports_the_simulated_gym_or_the_demo(module: str, path: Path) -> None:
    """Only deployments and applications may use sim/ or demo/; nemo_gym may not use sim/."""
    head = module.split(".")[0]
    if head in ("sim", "demo", "cli", "__main__"):
        return
    bad = [
        f"line {line}: envckpt.{target}"
        for line, target in imported(path, module)
        if target.split(".")[0] in PRODUCT_MAY_NOT_IMPORT
    ]
    assert not bad, f"envckpt.{module} imports the reference deployment: {bad}"


@pytest.mark.parametrize(("module", "path"), ALL_MODULES, ids=[m for m, _ in ALL_MODULES])
def test_no_module_is_over_the_size_limit(module: str, path: Path) -> None:
    """A module over 450 lines holds more than one concept: split it."""
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_MODULE_LINES, f"envckpt.{module} has {lines} lines"


STATE_NAMES = frozenset(str(state) for table in ALL_TABLES for state in table.states)


def _is_event_name(node: ast.AST) -> bool:
    # ``record["event"] == "restored"`` compares an event-log record's name,
    # which may share a word with a state; that is not a state comparison.
    return (
        isinstance(node, ast.Subscript)
        and isinstance(node.slice, ast.Constant)
        and node.slice.value == "event"
    )


def _string_constants(node: ast.AST) -> Iterator[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        yield node.value
    elif isinstance(node, ast.Tuple | ast.List | ast.Set):
        for element in node.elts:
            yield from _string_constants(element)


@pytest.mark.parametrize(("module", "path"), ALL_MODULES, ids=[m for m, _ in ALL_MODULES])
def test_states_are_named_values_outside_the_machines(module: str, path: Path) -> None:
    """No comparison against a state name spelt as a string (use the state enums)."""
    if module.startswith("machines"):
        return
    tree = ast.parse(path.read_text())
    spelt = [
        f"line {node.lineno}: {text!r}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Compare)
        and not any(_is_event_name(side) for side in (node.left, *node.comparators))
        for operand in (node.left, *node.comparators)
        for text in _string_constants(operand)
        if text in STATE_NAMES
    ]
    assert not spelt, f"envckpt.{module} compares state names as strings: {spelt}"


TESTS = PACKAGE.parent / "tests"
# A module's tests live where the module lives: envckpt/a/b.py in tests/a/test_b.py.
LEAF_MODULES = [(m, p) for m, p in ALL_MODULES if p.name not in ("__init__.py", "__main__.py")]


def mirrored_test_path(module: str) -> Path:
    """tests/<package path>/test_<module>.py for ``envckpt.<module>``."""
    *packages, name = module.split(".")
    return TESTS.joinpath(*packages, f"test_{name}.py")


@pytest.mark.parametrize(("module", "path"), LEAF_MODULES, ids=[m for m, _ in LEAF_MODULES])
def test_every_module_has_its_own_test_module(module: str, path: Path) -> None:
    """Tests mirror the packages, so a module's tests are found without searching."""
    expected = mirrored_test_path(module)
    assert expected.is_file(), f"envckpt.{module} has no {expected.relative_to(TESTS.parent)}"


def test_the_layer_check_sees_an_upward_import(tmp_path: Path) -> None:
    """The checker is not vacuous: a participant module importing the facade is caught."""
    bad = tmp_path / "bad.py"
    bad.write_text("from envckpt.facade.checkpoint import GymEnvironmentCheckpoint\n")
    targets = [target for _, target in imported(bad, "participant.bad")]
    assert targets == ["facade.checkpoint"]
    assert layer_of("facade.checkpoint") > layer_of("participant.bad")


def test_the_state_check_sees_a_spelt_state(tmp_path: Path) -> None:
    """The checker is not vacuous: ``phase == "idle"`` is caught, a dict key is not."""
    source = 'if core.phase == "idle":\n    reply = {"restored": []}\n'
    tree = ast.parse(source)
    found = [
        text
        for node in ast.walk(tree)
        if isinstance(node, ast.Compare)
        for operand in (node.left, *node.comparators)
        for text in _string_constants(operand)
        if text in STATE_NAMES
    ]
    assert found == ["idle"]


def test_the_mirror_check_names_the_test_module_a_module_needs() -> None:
    """The checker is not vacuous: nested modules map to nested test modules."""
    assert mirrored_test_path("participant.store.records") == (
        TESTS / "participant" / "store" / "test_records.py"
    )
    assert mirrored_test_path("cli") == TESTS / "test_cli.py"
    assert len(LEAF_MODULES) > 100
