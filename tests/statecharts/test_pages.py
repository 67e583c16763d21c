"""The Markdown pages of statecharts/: chart, rows, states with their roles, state sets."""

from __future__ import annotations

import pytest

from envckpt.machines.table import MachineTable
from envckpt.machines.tables import ALL_TABLES, INSTANCE_LIFECYCLE, SNAPSHOT_SESSION
from envckpt.statecharts.charts import mermaid
from envckpt.statecharts.pages import MARKDOWN_BANNER, READING, index, page, role_text


@pytest.mark.parametrize("table", ALL_TABLES, ids=lambda table: table.name)
def test_page_shows_the_chart_every_row_and_every_state(table: MachineTable) -> None:
    """The page has the banner, the title, the chart and one line per row and per state."""
    text = page(table)
    lines = text.splitlines()
    assert lines[0] == MARKDOWN_BANNER
    assert f"# {table.title}" in lines
    assert f"```mermaid\n{mermaid(table)}```\n" in text
    for row in table.rows:
        assert any(line.startswith(f"| `{row.trigger}` | ") for line in lines)
    for state in table.states:
        assert any(line.startswith(f"| `{state}` | ") for line in lines)


def test_roles_say_terminal_once_and_keep_notes_apart() -> None:
    """A terminal state's role says so once; its note column holds only the note."""
    lines = page(SNAPSHOT_SESSION).splitlines()
    resumed = next(line for line in lines if line.startswith("| `resumed` | "))
    aborted = next(line for line in lines if line.startswith("| `aborted` | "))
    assert resumed.startswith("| `resumed` | happy path, terminal | (none) |")
    assert resumed.endswith("| the snapshot may be published |")
    assert aborted.startswith("| `aborted` | failure, terminal | (none) |")
    assert all(line.count("terminal") <= 1 for line in lines if line.startswith("| `"))


def test_role_text_of_a_plain_state_is_empty() -> None:
    """A state with no role and no end shows an empty role cell."""
    assert role_text(INSTANCE_LIFECYCLE, "restored") == ""
    assert role_text(INSTANCE_LIFECYCLE, "failed") == "failure"


def test_state_sets_list_code_groups_and_chart_boxes() -> None:
    """Every group and box is listed once, with who uses it."""
    lines = page(INSTANCE_LIFECYCLE).splitlines()
    assert (
        "| checkpoint open | `preparing`, `prepared`, `committed` | code, chart box"
        " | participants hold admission closed under one checkpoint id |"
    ) in lines
    assert any(line.startswith("| fresh | `undiscovered`, `discovered` | code |") for line in lines)
    session = page(SNAPSHOT_SESSION).splitlines()
    assert any(line.startswith("| in progress | ") and "| chart box |" in line for line in session)


def test_index_links_every_page_shows_every_chart_and_says_how_to_read() -> None:
    """The README links each page, embeds each chart and carries the reading guide."""
    text = index(ALL_TABLES)
    assert "## Reading a chart" in text
    assert all(line in text for line in READING)
    for table in ALL_TABLES:
        assert f"[{table.name}]({table.name}.md)" in text
        assert f"```mermaid\n{mermaid(table)}```" in text
