"""The layering and shape rules of docs/engine.md, checked on the source itself.

* Nothing imports from a layer above it (function-level imports included).
* No import cycle between envckpt modules (function-level imports included).
* Product code never imports the simulated Gym or the demo.
* No module is over 450 lines.
* Outside ``envckpt/machines/``, code names states by their enum values: no
  comparison against a state name spelt as a string.
"""

from __future__ import annotations

import ast
import functools
import itertools
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
            "closing",
            "crashpoints",
            "logs",
            "extras",
            "process_tie",
        ),
    ),
    ("protocol", ("protocol",)),
    ("errors", ("errors", "checksummed")),
    ("telemetry", ("telemetry",)),
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
        (
            "demo",
            "cli",
            "__main__",
            "__init__",
            "config",
            "snapshots",
            "statecharts",
            "report",
            "progress",
        ),
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


def modules(package: Path = PACKAGE) -> Iterator[tuple[str, Path]]:
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package).with_suffix("")
        parts = relative.parts
        if parts[-1] == "__init__" and len(parts) > 1:
            parts = parts[:-1]
        yield ".".join(parts), path


@functools.cache
def parsed(path: Path) -> ast.Module:
    """``path``'s syntax tree, parsed once per test session.

    CPython 3.11 (before gh-106905's fix) can raise a spurious ``SystemError: AST
    constructor recursion depth mismatch`` in a long-lived process whose other
    threads parse too (it did once in a full CI run, never alone); a second parse
    of the same text is unaffected, so that one error is retried once.
    """
    source = path.read_text()
    try:
        return ast.parse(source, filename=str(path))
    except SystemError as error:
        if "recursion depth mismatch" not in str(error):
            raise
        return ast.parse(source, filename=str(path))


def imported(path: Path, module: str) -> Iterator[tuple[int, str]]:
    """(line, envckpt submodule) for every import of envckpt in ``path``."""
    tree = parsed(path)
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


def _nearest_module(dotted: str, known: set[str]) -> str:
    """``dotted`` if it is a module, else the nearest enclosing one (the package itself:
    ``__init__``)."""
    while dotted and dotted not in known:
        dotted = dotted.rpartition(".")[0]
    return dotted or "__init__"


def imported_modules(path: Path, module: str, known: set[str]) -> Iterator[tuple[int, str]]:
    """(line, envckpt module) for every import in ``path``; ``from pkg import name`` is
    the submodule ``pkg.name`` when there is one, else ``pkg`` itself."""
    tree = parsed(path)
    from_lines = {
        node.lineno: node
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and not node.level
    }
    for line, target in imported(path, module):
        node = from_lines.get(line)
        if node is None or node.module not in ("envckpt", f"envckpt.{target}"):
            yield line, _nearest_module(target, known)
            continue
        base = "" if node.module == "envckpt" else target
        for alias in node.names:
            submodule = f"{base}.{alias.name}" if base else alias.name
            yield line, submodule if submodule in known else _nearest_module(base, known)


def import_graph(package: Path = PACKAGE) -> dict[str, dict[str, int]]:
    """module -> {imported module: first line} over every envckpt module in ``package``."""
    found = list(modules(package))
    known = {name for name, _ in found}
    graph: dict[str, dict[str, int]] = {}
    for module, path in found:
        edges = graph.setdefault(module, {})
        for line, target in imported_modules(path, module, known):
            if target != module:
                edges.setdefault(target, line)
    return graph


def import_cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """One cycle (``[a, b, ..., a]``) per group of modules that import each other, found
    as the strongly connected components of ``graph`` (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(component)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(_cycle_through(graph, component) for component in components)


def _cycle_through(graph: dict[str, dict[str, int]], component: set[str]) -> list[str]:
    """A shortest cycle from the component's first module back to it, inside the component."""
    start = min(component)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for target in sorted(graph.get(node, ())):
                if target == start:
                    return [*paths[node], start]
                if target in component and target not in paths:
                    paths[target] = [*paths[node], target]
                    following.append(target)
        frontier = following
    raise AssertionError(f"no cycle through {sorted(component)}")


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


def test_no_import_cycle_between_envckpt_modules() -> None:
    """No module imports, directly or through others, a module that imports it back."""
    graph = import_graph()
    described = [
        f"envckpt.{cycle[0]}"
        + "".join(
            f" -(line {graph[module][target]})-> envckpt.{target}"
            for module, target in itertools.pairwise(cycle)
        )
        for cycle in import_cycles(graph)
    ]
    assert not described, "import cycles:\n" + "\n".join(described)


def test_the_cycle_check_finds_a_planted_cycle() -> None:
    """The checker is not vacuous: a cycle a -> b -> c -> a is reported once, beside an
    acyclic part, and a graph without one reports nothing."""
    planted = {
        "a": {"b": 1},
        "b": {"c": 1, "d": 2},
        "c": {"a": 1},
        "d": {"e": 1},
        "e": {},
        "f": {"f.g": 1},
        "f.g": {"f": 2},
    }
    assert import_cycles(planted) == [["a", "b", "c", "a"], ["f", "f.g", "f"]]
    del planted["c"]["a"], planted["f.g"]["f"]
    assert import_cycles(planted) == []


def test_the_import_graph_sees_a_function_level_import_cycle(tmp_path: Path) -> None:
    """Two modules of a package importing each other, one inside a function and one as
    ``from package import module``, are one cycle in the graph built from their source."""
    package = tmp_path / "envckpt"
    (package / "nemo").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "nemo" / "__init__.py").write_text("")
    (package / "nemo" / "one.py").write_text("from envckpt.nemo.two import helper\n")
    (package / "nemo" / "two.py").write_text(
        "def helper():\n    from envckpt.nemo import one\n    return one\n"
    )
    graph = import_graph(package)
    assert graph["nemo.one"] == {"nemo.two": 1} and graph["nemo.two"] == {"nemo.one": 2}
    assert import_cycles(graph) == [["nemo.one", "nemo.two", "nemo.one"]]


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
    tree = parsed(path)
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
