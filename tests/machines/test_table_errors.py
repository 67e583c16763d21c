"""MachineTable refusals word for word, and the box checks of a chart layout."""

from __future__ import annotations

import pytest

from envckpt.machines.table import ChartLayout, MachineTable, Row, StateGroup

STATES = ("a", "b", "c", "d", "e", "f")


def table(
    *,
    states: tuple[str, ...] = STATES,
    chart: ChartLayout = ChartLayout(),  # frozen: one shared default is safe
    state_notes: tuple[tuple[str, str], ...] = (),
) -> MachineTable:
    return MachineTable(
        name="t",
        title="T",
        states=states,
        initial="a",
        rows=(),
        chart=chart,
        state_notes=state_notes,
    )


def refusal(**kwargs: object) -> str:
    with pytest.raises(ValueError) as caught:
        table(**kwargs)  # type: ignore[arg-type]
    return str(caught.value)


def test_each_declaration_error_reads_exactly() -> None:
    """A row without a trigger, a state twice and an unknown noted state, word for word."""
    with pytest.raises(ValueError) as caught:
        Row("", ("a",), "b")
    assert str(caught.value) == "a row needs a trigger and at least one source"
    assert refusal(states=("a", "a")) == "t: a state is declared twice"
    assert refusal(state_notes=(("z", "why"),)) == "t: note names unknown states ['z']"


def test_chart_problems_are_all_listed_in_one_error() -> None:
    """Every chart problem is named, in order, joined by semicolons."""
    assert refusal(chart=ChartLayout(happy_path=("a", "b", "a"), failure=frozenset({"a"}))) == (
        "t: chart happy path names a state twice; "
        "chart: a state on the happy path is also a failure"
    )


def test_every_pair_of_boxes_is_checked_for_overlap() -> None:
    """The first and third of four boxes overlapping is found."""
    boxes = (
        StateGroup("g0", frozenset({"a", "b"})),
        StateGroup("g1", frozenset({"d"})),
        StateGroup("g2", frozenset({"b", "c"})),
        StateGroup("g3", frozenset({"e"})),
    )
    assert refusal(chart=ChartLayout(boxes=boxes)) == "t: chart boxes g0 and g2 overlap"


def test_disjoint_and_nested_boxes_are_accepted() -> None:
    """Boxes that share nothing, or one inside another, are a sound layout."""
    boxes = (
        StateGroup("outer", frozenset({"a", "b", "c"})),
        StateGroup("inner", frozenset({"a"})),
        StateGroup("apart", frozenset({"e", "f"})),
    )
    assert table(chart=ChartLayout(boxes=boxes)).chart.boxes == boxes


def test_an_unknown_group_is_a_key_error_naming_it() -> None:
    """group() of a name the table lacks raises KeyError naming the table and the group."""
    with pytest.raises(KeyError) as caught:
        table().group("g")
    assert caught.value.args == ("t: no state group 'g'",)
