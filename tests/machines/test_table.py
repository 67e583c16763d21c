"""MachineTable: declaration checks and the queries everything else reads."""

from __future__ import annotations

import pytest

from envckpt.machines.table import STAYS, ChartLayout, MachineTable, Role, Row, StateGroup

STATES = ("a", "b", "c")


def table(*rows: Row, states: tuple[str, ...] = STATES, initial: str = "a") -> MachineTable:
    return MachineTable(name="t", title="T", states=states, initial=initial, rows=rows)


@pytest.fixture
def small() -> MachineTable:
    return MachineTable(
        name="small",
        title="Small",
        states=STATES,
        initial="a",
        rows=(
            Row("go", ("a",), "b", "first step"),
            Row("stay", ("b", "a"), STAYS),
            Row("go", ("b",), "c"),
            Row("back", ("c", "b"), "a"),
        ),
        state_notes=(("c", "last"),),
    )


def test_row_needs_a_trigger() -> None:
    """A row with an empty trigger is rejected."""
    with pytest.raises(ValueError, match="trigger"):
        Row("", ("a",), "b")


def test_row_needs_a_source() -> None:
    """A row with no source state is rejected."""
    with pytest.raises(ValueError, match="source"):
        Row("go", (), "b")


def test_unknown_initial_state_is_rejected() -> None:
    """The initial state must be one of the states."""
    with pytest.raises(ValueError, match="initial state 'z'"):
        table(Row("go", ("a",), "b"), initial="z")


def test_unknown_source_state_is_rejected() -> None:
    """A row from a state the table does not declare is rejected."""
    with pytest.raises(ValueError, match="unknown source 'z'"):
        table(Row("go", ("z",), "b"))


def test_unknown_destination_is_rejected() -> None:
    """A row into a state the table does not declare is rejected."""
    with pytest.raises(ValueError, match="unknown destination 'z'"):
        table(Row("go", ("a",), "z"))


def test_duplicate_source_and_trigger_across_rows_is_rejected() -> None:
    """Two rows may not both handle one (state, trigger) pair: there are no guards."""
    with pytest.raises(ValueError, match="'go' twice from 'a'"):
        table(Row("go", ("a",), "b"), Row("go", ("c", "a"), "c"))


def test_duplicate_source_within_one_row_is_rejected() -> None:
    """A row listing the same source twice is rejected."""
    with pytest.raises(ValueError, match="'go' twice from 'a'"):
        table(Row("go", ("a", "a"), "b"))


def test_same_destination_is_accepted() -> None:
    """STAYS is a valid destination although it is not a state."""
    assert table(Row("stay", ("a",), STAYS)).rows[0].dest == STAYS


def test_destination_follows_rows(small: MachineTable) -> None:
    """destination() returns the row's destination for a legal pair."""
    assert small.destination("a", "go") == "b"
    assert small.destination("b", "go") == "c"
    assert small.destination("c", "back") == "a"


def test_destination_resolves_same_to_the_source(small: MachineTable) -> None:
    """A STAYS row keeps the machine where it is."""
    assert small.destination("a", "stay") == "a"
    assert small.destination("b", "stay") == "b"


def test_destination_is_none_when_illegal(small: MachineTable) -> None:
    """An illegal pair, an unknown trigger or an unknown state has no destination."""
    assert small.destination("c", "go") is None
    assert small.destination("a", "fly") is None
    assert small.destination("z", "go") is None


def test_triggers_are_unique_in_declaration_order(small: MachineTable) -> None:
    """triggers lists each trigger once, in the order first declared."""
    assert small.triggers == ("go", "stay", "back")


def test_allowed_lists_legal_triggers_in_declaration_order(small: MachineTable) -> None:
    """allowed() is every trigger with a destination from the state."""
    assert small.allowed("a") == ("go", "stay")
    assert small.allowed("b") == ("go", "stay", "back")
    assert small.allowed("c") == ("back",)
    assert small.allowed("z") == ()


def test_edges_are_sorted_with_same_resolved(small: MachineTable) -> None:
    """edges() yields every (source, trigger, dest) once, sorted, STAYS resolved."""
    assert list(small.edges()) == [
        ("a", "go", "b"),
        ("a", "stay", "a"),
        ("b", "back", "a"),
        ("b", "go", "c"),
        ("b", "stay", "b"),
        ("c", "back", "a"),
    ]


def test_edges_agree_with_destination(small: MachineTable) -> None:
    """Every edge is exactly what destination() answers for its pair."""
    for source, trigger, dest in small.edges():
        assert small.destination(source, trigger) == dest


def test_note_returns_the_state_note_or_empty(small: MachineTable) -> None:
    """note() returns a declared note and an empty string otherwise."""
    assert small.note("c") == "last"
    assert small.note("a") == ""


def test_table_is_frozen(small: MachineTable) -> None:
    """A table cannot be changed after it is declared."""
    with pytest.raises(AttributeError):
        small.initial = "b"  # type: ignore[misc]


def test_terminal_states_must_be_states() -> None:
    """A terminal state the table does not declare is rejected."""
    with pytest.raises(ValueError, match="terminal names unknown states"):
        MachineTable(
            name="t", title="T", states=STATES, initial="a", rows=(), terminal=frozenset({"z"})
        )


def test_groups_must_name_states_and_are_found_by_name() -> None:
    """A group names declared states only, and group() returns its states."""

    def grouping(*states: str) -> MachineTable:
        group = StateGroup("g", frozenset(states))
        return MachineTable(
            name="t", title="T", states=STATES, initial="a", rows=(), groups=(group,)
        )

    with pytest.raises(ValueError, match="group g names unknown states"):
        grouping("a", "z")
    grouped = grouping("a", "b")
    assert grouped.group("g") == {"a", "b"}
    assert "a" in grouped.groups[0] and "c" not in grouped.groups[0]
    with pytest.raises(KeyError):
        grouped.group("nope")


def test_state_returns_the_declared_value(small: MachineTable) -> None:
    """state() maps a name to the table's own state value, or refuses it."""
    assert small.state("b") == "b"
    with pytest.raises(ValueError, match="unknown state 'z'"):
        small.state("z")


def charted(layout: ChartLayout) -> MachineTable:
    return MachineTable(name="t", title="T", states=STATES, initial="a", rows=(), chart=layout)


@pytest.mark.parametrize(
    ("layout", "message"),
    [
        (ChartLayout(happy_path=("a", "z")), "chart happy path names unknown states"),
        (ChartLayout(failure=frozenset({"z"})), "chart failure names unknown states"),
        (ChartLayout(boxes=(StateGroup("g", frozenset({"z"})),)), "chart box g names unknown"),
        (ChartLayout(happy_path=("a", "b", "a")), "happy path names a state twice"),
        (ChartLayout(happy_path=("a",), failure=frozenset({"a"})), "also a failure"),
        (ChartLayout(boxes=(StateGroup("b", frozenset({"a"})),)), "clash"),
        (
            ChartLayout(
                boxes=(StateGroup("x y", frozenset({"a"})), StateGroup("x-y", frozenset({"b"})))
            ),
            "clash",
        ),
        (ChartLayout(boxes=(StateGroup("g", frozenset()),)), "box g is empty"),
        (
            ChartLayout(
                boxes=(
                    StateGroup("g", frozenset({"a", "b"})),
                    StateGroup("h", frozenset({"b", "c"})),
                )
            ),
            "boxes g and h overlap",
        ),
    ],
)
def test_chart_layout_is_checked_against_the_states(layout: ChartLayout, message: str) -> None:
    """A chart naming unknown states, overlapping boxes or clashing names is refused."""
    with pytest.raises(ValueError, match=message):
        charted(layout)


def test_nested_boxes_and_roles_are_accepted() -> None:
    """A box inside another is fine; role() tells happy path, failure and the rest apart."""
    table = charted(
        ChartLayout(
            happy_path=("a", "b"),
            failure=frozenset({"c"}),
            boxes=(StateGroup("outer", frozenset(STATES)), StateGroup("inner", frozenset("ab"))),
        )
    )
    assert [table.chart.role(state) for state in STATES] == [
        Role.HAPPY_PATH,
        Role.HAPPY_PATH,
        Role.FAILURE,
    ]
    assert charted(ChartLayout()).chart.role("a") is Role.OTHER


def test_group_key_is_an_identifier() -> None:
    """A group's key turns its name into an identifier for charts."""
    assert StateGroup("checkpoint open", frozenset()).key == "checkpoint_open"
    assert StateGroup(" may-prepare! ", frozenset()).key == "may_prepare"
