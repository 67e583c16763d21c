"""statecharts/ and the charts in docs/: committed copies up to date, drift found and repaired."""

from __future__ import annotations

from pathlib import Path

import pytest

from envckpt.machines.tables import ALL_TABLES, SNAPSHOT_SESSION
from envckpt.statecharts import embeds
from envckpt.statecharts.charts import MERMAID_BANNER, mermaid

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def charts(tmp_path: Path) -> Path:
    directory = tmp_path / "statecharts"
    embeds.write(directory)
    return directory


def test_committed_statecharts_are_up_to_date() -> None:
    """The committed statecharts/ matches the tables (on failure run `envckpt statecharts`)."""
    assert embeds.check(REPO / "statecharts") == []


def test_committed_docs_show_the_tables_charts() -> None:
    """Every statechart region in docs/ shows its table's chart."""
    assert embeds.check_docs(REPO / "docs") == []
    assert "<!-- statechart:instance_lifecycle -->" in (REPO / "docs" / "engine.md").read_text()


def test_render_all_names_every_file() -> None:
    """render_all() has a chart and a page per table, and the README."""
    expected = {"README.md"} | {
        f"{table.name}{suffix}" for table in ALL_TABLES for suffix in (".mmd", ".md")
    }
    assert set(embeds.render_all()) == expected
    assert embeds.render_all() == embeds.render_all()


def test_fresh_write_checks_clean(charts: Path) -> None:
    """A directory just written has no drift, and writing again changes nothing."""
    assert embeds.check(charts) == []
    assert embeds.write(charts) == []


def test_modified_file_is_reported_and_repaired(charts: Path) -> None:
    """Editing one generated file is reported as out of date, and write() repairs it."""
    chart = charts / "snapshot_session.mmd"
    chart.write_text(chart.read_text() + "    opened --> aborted: teleport\n")
    assert embeds.check(charts) == [f"{chart}: out of date"]
    assert embeds.write(charts) == [chart]
    assert embeds.check(charts) == []


def test_missing_file_and_missing_directory_are_reported(charts: Path, tmp_path: Path) -> None:
    """A deleted generated file, or a directory that does not exist, is reported missing."""
    (charts / "participant_phases.mmd").unlink()
    assert embeds.check(charts) == [f"{charts / 'participant_phases.mmd'}: missing"]
    problems = embeds.check(tmp_path / "nowhere")
    assert len(problems) == len(embeds.render_all())
    assert all(problem.endswith(": missing") for problem in problems)


def test_a_generated_file_of_no_machine_is_reported_and_removed(charts: Path) -> None:
    """A generated chart whose banner follows its front matter is still recognised as stale."""
    stale = charts / "old_machine.mmd"
    stale.write_text(f'---\ntitle: "old"\n---\n{MERMAID_BANNER}\nstateDiagram-v2\n')
    assert embeds.check(charts) == [f"{stale}: generated for no machine"]
    assert embeds.write(charts) == [stale]
    assert not stale.exists()


def test_hand_written_files_and_svgs_are_left_alone(charts: Path) -> None:
    """Files without the banner and SVGs are not part of the checked set."""
    (charts / "NOTES.md").write_text("# notes by hand\n")
    (charts / "instance_lifecycle.svg").write_text("<svg/>")
    assert embeds.check(charts) == []
    assert embeds.write(charts) == []
    assert (charts / "NOTES.md").exists()


DOC = """# Engine

Some text.

<!-- statechart:snapshot_session -->
stale chart
<!-- /statechart -->

More text.
"""


def test_doc_regions_are_refilled_and_checked(tmp_path: Path) -> None:
    """A stale region is reported, write_docs() refills it, and the text around it is kept."""
    docs = tmp_path / "docs"
    (docs / "deep").mkdir(parents=True)
    doc = docs / "deep" / "engine.md"
    doc.write_text(DOC)
    (docs / "plain.md").write_text("# no charts here\n")
    assert embeds.check_docs(docs) == [f"{doc}: embedded statechart out of date"]
    assert embeds.write_docs(docs) == [doc]
    text = doc.read_text()
    assert text.startswith("# Engine\n\nSome text.\n\n<!-- statechart:snapshot_session -->\n")
    assert f"```mermaid\n{mermaid(SNAPSHOT_SESSION)}```\n<!-- /statechart -->" in text
    assert text.endswith("\n\nMore text.\n")
    assert embeds.check_docs(docs) == []
    assert embeds.write_docs(docs) == []


def test_a_region_naming_no_machine_is_an_error() -> None:
    """A statechart region must name a table."""
    with pytest.raises(ValueError, match="names no machine: 'nope'"):
        embeds.embed("<!-- statechart:nope -->\n<!-- /statechart -->\n")


def test_docs_directory_may_be_missing(tmp_path: Path) -> None:
    """Without a docs directory there is nothing to refill or check."""
    assert embeds.write_docs(tmp_path / "none") == []
    assert embeds.check_docs(tmp_path / "none") == []
