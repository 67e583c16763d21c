"""Measuring rendered charts: width, label boxes, labels on states, edge crossings."""

from __future__ import annotations

import pytest

from envckpt.statecharts.svg_layout import Label, read_svg

SVG_NS = "http://www.w3.org/2000/svg"
HTML_NS = "http://www.w3.org/1999/xhtml"


def svg(*parts: str, view: str = "0 -50 400 300") -> str:
    return f'<svg xmlns="{SVG_NS}" viewBox="{view}"><g class="root">{"".join(parts)}</g></svg>'


def text_box(text: str, width: float, height: float) -> str:
    return (
        f'<foreignObject width="{width}" height="{height}"><div xmlns="{HTML_NS}">'
        f'<span class="edgeLabel"><p>{text}</p></span></div></foreignObject>'
    )


def label(text: str, x: float, y: float, width: float = 60, height: float = 24) -> str:
    """A Mermaid edge label centred on (x, y)."""
    return (
        f'<g class="edgeLabel" transform="translate({x}, {y})">'
        f'<g class="label" transform="translate({-width / 2}, {-height / 2})">'
        f"{text_box(text, width, height)}</g></g>"
    )


def edge(d: str, *, note: bool = False) -> str:
    kind = "transition note-edge" if note else "transition"
    return f'<path class="{kind}" data-edge="true" d="{d}"/>'


def node(text: str, x: float, y: float, width: float = 80, height: float = 40) -> str:
    return (
        f'<g class="node statediagram-state" transform="translate({x}, {y})">'
        f'<rect x="{-width / 2}" y="{-height / 2}" width="{width}" height="{height}"/>'
        f'<g class="label">{text_box(text, width - 8, 24)}</g></g>'
    )


def test_width_and_height_come_from_the_view_box() -> None:
    """The chart's size is its viewBox size."""
    layout = read_svg(svg(view="0 -49 830.8 1235"))
    assert (layout.width, layout.height) == (830.8, 1235)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("<svg", "not an SVG document"),
        ("<html/>", "the root is <html>"),
        (f'<svg xmlns="{SVG_NS}"/>', "no viewBox"),
    ],
)
def test_what_is_not_a_chart_is_refused(text: str, message: str) -> None:
    """Broken XML, another document or an SVG without a viewBox is a ValueError."""
    with pytest.raises(ValueError, match=message):
        read_svg(text)


def test_label_boxes_compose_the_translations_above_them() -> None:
    """A label's box is placed by its group's and its inner group's translations."""
    layout = read_svg(svg(f'<g transform="translate(10, 5)">{label("go", 100, 50)}</g>'))
    assert layout.edge_labels == (Label("go", 80.0, 43.0, 60.0, 24.0),)


def test_separate_labels_do_not_overlap_and_moved_ones_do() -> None:
    """Labels apart are fine; a label moved onto another is reported, touching is not."""
    apart = read_svg(svg(label("prepare", 100, 50), label("resume", 200, 50)))
    assert apart.overlapping_labels() == []
    touching = read_svg(svg(label("prepare", 100, 50), label("resume", 160, 50)))
    assert touching.overlapping_labels() == []
    moved = read_svg(svg(label("prepare", 100, 50), label("resume", 130, 60)))
    ((first, second),) = moved.overlapping_labels()
    assert (first.text, second.text) == ("prepare", "resume")


def test_labels_without_text_are_ignored() -> None:
    """Mermaid's zero-sized placeholder of an unlabelled edge is no label."""
    layout = read_svg(svg(label("", 0, 0, width=0, height=0), label("go", 100, 50)))
    assert [item.text for item in layout.edge_labels] == ["go"]


def test_a_label_on_a_state_is_reported_a_corner_touch_is_not() -> None:
    """A label covering a tenth of itself on a state is reported; a corner touch is not."""
    covering = read_svg(svg(node("idle", 100, 100), label("resume", 100, 80)))
    ((on_label, state),) = covering.labels_over_nodes()
    assert (on_label.text, state.text) == ("resume", "idle")
    corner = read_svg(svg(node("idle", 100, 100), label("resume", 168, 70)))
    assert corner.labels_over_nodes() == []


def test_box_titles_count_as_text_a_label_must_not_cover() -> None:
    """A label over a box's title is reported like a label over a state."""
    title = (
        '<g class="cluster-label" transform="translate(50, 100)">'
        f"{text_box('checkpoint open', 120, 24)}</g>"
    )
    layout = read_svg(svg(title, label("resume expire", 110, 112)))
    assert [(a.text, b.text) for a, b in layout.labels_over_nodes()] == [
        ("resume expire", "checkpoint open")
    ]


def test_texts_hold_labels_and_state_texts() -> None:
    """texts() lists edge labels and the text of every state."""
    layout = read_svg(svg(label("go", 10, 10), node("shut \u27f2 knock", 100, 100)))
    assert layout.texts() == ("go", "shut \u27f2 knock")


def test_two_straight_edges_crossing_count_once() -> None:
    """An X of two edges is one crossing; the edges are read as polylines."""
    layout = read_svg(svg(edge("M0,0L100,100"), edge("M0,100L100,0")))
    assert layout.edges == (((0.0, 0.0), (100.0, 100.0)), ((0.0, 100.0), (100.0, 0.0)))
    assert layout.crossings() == 1


def test_edges_meeting_at_a_state_do_not_cross() -> None:
    """Two edges ending at the same point, or parallel, are no crossing."""
    meeting = read_svg(svg(edge("M0,0L50,50"), edge("M100,0L52,49")))
    assert meeting.crossings() == 0
    parallel = read_svg(svg(edge("M0,0L100,0"), edge("M0,10L100,10")))
    assert parallel.crossings() == 0


def test_a_curve_crossing_a_line_is_counted_and_note_lines_are_not() -> None:
    """Cubic curves are followed; the dashed line to a note is not an edge."""
    curve = "M0,50C30,-20,70,120,100,50"
    layout = read_svg(svg(edge(curve), edge("M50,0L50,100"), edge("M20,0L20,100", note=True)))
    assert len(layout.edges) == 2
    assert layout.crossings() == 1


def test_a_curve_crossing_twice_counts_twice() -> None:
    """An edge that weaves across another crosses it at each pass."""
    layout = read_svg(svg(edge("M0,0C100,100,-50,150,0,200"), edge("M25,0L25,200")))
    assert layout.crossings() == 2


@pytest.mark.parametrize("d", ["M0,0Q10,10,20,20", "C1,2,3,4,5,6", "M0,0L10"])
def test_unreadable_paths_are_refused(d: str) -> None:
    """Path data the reader cannot follow is a ValueError, never a silent zero."""
    with pytest.raises(ValueError):
        read_svg(svg(edge(d)))


def test_summary_names_every_measure() -> None:
    """The one-line summary has the width, edges, crossings and both overlap counts."""
    layout = read_svg(svg(edge("M0,0L100,100"), edge("M0,100L100,0"), view="0 0 321.4 100"))
    assert layout.summary() == (
        "321 px wide, 2 edges, 1 crossings, 0 overlapping labels, 0 labels on states"
    )
