"""Read generated charts back into transitions, as a reader of the picture would.

``chart_transitions`` expands a generated ``stateDiagram-v2`` (boxes, folded
self-loops, shared edges) into ``(source, trigger, dest)`` triples;
``overlay_transitions`` does the same for an overlay flowchart and keeps each
triple's count and line style. The tests compare both with the table, so a
chart that drops or invents a transition fails.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

LOOP = "\u27f2"
TIMES = "\u00d7"

_BOX_OPEN = re.compile(r'^state "(?P<label>[^"]*)" as (?P<key>\w+) \{$')
_STATE = re.compile(r'^state "(?P<label>[^"]*)" as (?P<key>\w+)$')
_LOOP_LINE = re.compile(rf"^(?P<key>\w+) : {LOOP} (?P<trigger>\w+)$")
_EDGE = re.compile(r"^(?P<source>\w+) --> (?P<dest>\w+): (?P<label>.+)$")
_START = re.compile(r"^\[\*\] --> (?P<dest>\w+)$")

_SUBGRAPH = re.compile(r'^subgraph (?P<key>\w+) \["(?P<label>[^"]*)"\]$')
_NODE = re.compile(r'^(?P<key>\w+)\["(?P<label>[^"]*)"\]$')
_FLOW_EDGE = re.compile(
    r'^(?P<source>\w+) (?P<arrow>==>|-\.->|-->)\|"(?P<label>[^"]*)"\| (?P<dest>\w+)$'
)
_COUNTED = re.compile(rf"^(?P<trigger>\w+) {TIMES}(?P<count>\d+)(?P<foreign> \(not in table\))?$")


@dataclass
class ReadChart:
    """What a chart shows: its transitions, start, states and boxes."""

    transitions: set[tuple[str, str, str]] = field(default_factory=set)
    initial: str = ""
    states: list[str] = field(default_factory=list)
    boxes: dict[str, list[str]] = field(default_factory=dict)  # key -> direct children
    counts: dict[tuple[str, str, str], int] = field(default_factory=dict)
    thick: set[tuple[str, str, str]] = field(default_factory=set)  # overlay: drawn thick
    dotted: set[tuple[str, str, str]] = field(default_factory=set)  # overlay: drawn dotted
    # overlay: the states whose transitions one drawn count adds up (a box's states)
    shared: dict[tuple[str, str, str], list[str]] = field(default_factory=dict)

    def leaves(self, node: str) -> list[str]:
        if node not in self.boxes:
            return [node]
        return [leaf for child in self.boxes[node] for leaf in self.leaves(child)]


def chart_transitions(text: str) -> ReadChart:
    """Expand a generated Mermaid state diagram into the transitions it shows."""
    read = ReadChart()
    stack: list[str] = []
    edges: list[tuple[str, str, str]] = []
    in_note = False
    for raw in text.splitlines():
        line = raw.strip()
        if in_note:
            in_note = line != "end note"
            continue
        if line.startswith("note "):
            in_note = True
        elif match := _BOX_OPEN.match(line):
            _open_box(read, stack, match["key"])
        elif line == "}":
            stack.pop()
        elif match := _STATE.match(line):
            _place(read, stack, match["key"])
            read.states.append(match["key"])
        elif match := _LOOP_LINE.match(line):
            read.transitions.add((match["key"], match["trigger"], match["key"]))
        elif match := _START.match(line):
            read.initial = match["dest"]
        elif match := _EDGE.match(line):
            for trigger in match["label"].split("<br/>"):
                edges.append((match["source"], trigger, match["dest"]))
    for source, trigger, dest in edges:
        for leaf in read.leaves(source):
            read.transitions.add((leaf, trigger, dest))
    return read


def overlay_transitions(text: str) -> ReadChart:
    """Expand an overlay flowchart into its transitions, counts and line styles."""
    read = ReadChart()
    stack: list[str] = []
    names: dict[str, str] = {}
    edges: list[tuple[str, str, str, str]] = []
    for raw in text.splitlines():
        line = raw.strip()
        if match := _SUBGRAPH.match(line):
            _open_box(read, stack, match["key"])
        elif line == "end":
            stack.pop()
        elif match := _NODE.match(line):
            name, *loops = match["label"].split("<br/>")
            names[match["key"]] = name
            _place(read, stack, match["key"])
            read.states.append(name)
            for loop in loops:
                counted = _COUNTED.match(loop.removeprefix(f"{LOOP} "))
                assert counted, f"unreadable self-loop {loop!r}"
                triple = (name, counted["trigger"], name)
                read.transitions.add(triple)
                read.counts[triple] = int(counted["count"])
                read.shared[triple] = [name]
        elif match := _FLOW_EDGE.match(line):
            edges.append((match["source"], match["arrow"], match["label"], match["dest"]))
        elif line.startswith("start --> "):
            read.initial = line.removeprefix("start --> ")
    read.initial = names.get(read.initial, read.initial)
    for source, arrow, label, dest in edges:
        for part in label.split("<br/>"):
            counted = _COUNTED.match(part)
            assert counted, f"unreadable edge label {part!r}"
            for leaf in read.leaves(source):
                triple = (names[leaf], counted["trigger"], names[dest])
                read.transitions.add(triple)
                read.counts[triple] = int(counted["count"])
                read.shared[triple] = [names[other] for other in read.leaves(source)]
                (read.thick if arrow == "==>" else read.dotted).add(triple)
    return read


def _open_box(read: ReadChart, stack: list[str], key: str) -> None:
    """A composite state (box) ``key`` starts: placed in the open box, then the open one."""
    _place(read, stack, key)
    read.boxes[key] = []
    stack.append(key)


def _place(read: ReadChart, stack: list[str], key: str) -> None:
    if stack:
        read.boxes[stack[-1]].append(key)
