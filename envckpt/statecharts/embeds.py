"""Keep the generated charts where readers find them: ``statecharts/`` and the docs.

Every generated file is a pure function of the tables (no timestamps, no set
order), so the committed copies are checked for drift like any other file:

    write(Path("statecharts"))      # regenerate <name>.mmd, <name>.md and README.md
    check(Path("statecharts"))      # [] when up to date, else one line per file
    write_docs(Path("docs"))        # refill every statechart region in docs/**/*.md
    check_docs(Path("docs"))        # [] when every region shows its table

A doc region is a pair of markers around a generated Mermaid block::

    <!-- statechart:instance_lifecycle -->
    ...the chart of INSTANCE_LIFECYCLE...
    <!-- /statechart -->

``envckpt statecharts`` (``envckpt.cli``) wraps these calls.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from envckpt.machines.table import MachineTable
from envckpt.machines.tables import ALL_TABLES
from envckpt.statecharts.charts import MARKER, mermaid
from envckpt.statecharts.pages import INDEX, index, page

# Suffixes of the files this module owns in the directory. SVGs are left out
# on purpose: their bytes depend on the browser and its fonts.
GENERATED_SUFFIXES = (".md", ".mmd")
# The banner is within the first lines (after a chart's front matter).
_BANNER_LINES = 16
_REGION = re.compile(
    r"(?P<open><!-- statechart:(?P<name>[a-z_]+) -->\n)"
    r"(?P<body>.*?)"
    r"(?P<close><!-- /statechart -->)",
    re.DOTALL,
)


def render(table: MachineTable[Any]) -> dict[str, str]:
    """The generated files of one table: file name -> text."""
    return {f"{table.name}.mmd": mermaid(table), f"{table.name}.md": page(table)}


def render_all(tables: Iterable[MachineTable[Any]] = ALL_TABLES) -> dict[str, str]:
    """Every generated file of the directory: file name -> text, sorted by name."""
    tables = tuple(tables)
    files: dict[str, str] = {}
    for table in tables:
        files.update(render(table))
    files[INDEX] = index(tables)
    return dict(sorted(files.items()))


def write(directory: Path, tables: Iterable[MachineTable[Any]] = ALL_TABLES) -> list[Path]:
    """Bring ``directory`` up to date; return the files written or removed.

    Unchanged files are not rewritten; generated files no table produces any
    more (a renamed machine) are removed; hand-written files are left alone.
    """
    directory.mkdir(parents=True, exist_ok=True)
    expected = render_all(tables)
    changed: list[Path] = []
    for name, text in expected.items():
        path = directory / name
        data = text.encode("utf-8")
        if not path.is_file() or path.read_bytes() != data:
            path.write_bytes(data)
            changed.append(path)
    for path in _stale(directory, expected):
        path.unlink()
        changed.append(path)
    return changed


def check(directory: Path, tables: Iterable[MachineTable[Any]] = ALL_TABLES) -> list[str]:
    """What differs between ``directory`` and the tables; empty when up to date."""
    expected = render_all(tables)
    problems: list[str] = []
    for name, text in expected.items():
        path = directory / name
        if not path.is_file():
            problems.append(f"{path}: missing")
        elif path.read_bytes() != text.encode("utf-8"):
            problems.append(f"{path}: out of date")
    problems += [f"{path}: generated for no machine" for path in _stale(directory, expected)]
    return problems


def _stale(directory: Path, expected: dict[str, str]) -> list[Path]:
    if not directory.is_dir():
        return []
    return [
        path
        for path in sorted(directory.iterdir())
        if path.is_file()
        and path.suffix in GENERATED_SUFFIXES
        and path.name not in expected
        and is_generated(path)
    ]


def is_generated(path: Path) -> bool:
    """Whether ``path`` carries the generator's banner near its top."""
    with path.open(encoding="utf-8", errors="replace") as handle:
        head = [handle.readline() for _ in range(_BANNER_LINES)]
    return any(MARKER in line.lower() for line in head)


# ----------------------------------------------------------------- doc regions


def embed(text: str, tables: Iterable[MachineTable[Any]] = ALL_TABLES) -> str:
    """``text`` with every statechart region refilled from the tables."""
    by_name = {table.name: table for table in tables}

    def fill(match: re.Match[str]) -> str:
        table = by_name.get(match["name"])
        if table is None:
            raise ValueError(f"statechart region names no machine: {match['name']!r}")
        return f"{match['open']}```mermaid\n{mermaid(table)}```\n{match['close']}"

    return _REGION.sub(fill, text)


def _embedding_docs(docs: Path) -> list[Path]:
    if not docs.is_dir():
        return []
    return [
        path
        for path in sorted(docs.rglob("*.md"))
        if "<!-- statechart:" in path.read_text(encoding="utf-8")
    ]


def write_docs(docs: Path, tables: Iterable[MachineTable[Any]] = ALL_TABLES) -> list[Path]:
    """Refill the statechart regions of every Markdown file under ``docs``."""
    tables = tuple(tables)
    changed = []
    for path in _embedding_docs(docs):
        text = path.read_text(encoding="utf-8")
        updated = embed(text, tables)
        if updated != text:
            path.write_text(updated, encoding="utf-8")
            changed.append(path)
    return changed


def check_docs(docs: Path, tables: Iterable[MachineTable[Any]] = ALL_TABLES) -> list[str]:
    """One line per doc whose statechart regions differ from the tables."""
    tables = tuple(tables)
    return [
        f"{path}: embedded statechart out of date"
        for path in _embedding_docs(docs)
        if embed(path.read_text(encoding="utf-8"), tables) != path.read_text(encoding="utf-8")
    ]
