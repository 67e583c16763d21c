"""What a reader sees in a Mermaid SVG: its width, its labels, where its edges cross.

Mermaid 11 writes each edge as a ``<path data-edge="true">`` made of ``M``,
``L`` and ``C`` commands, and each edge label as a ``<g class="edgeLabel">``
placed by ``translate`` transforms around a ``<foreignObject>`` of the label's
size. ``read_svg`` collects those in page coordinates; the checks are plain
geometry on them:

    layout = read_svg(Path("instance_lifecycle.svg").read_text())
    layout.width                    # 798.5 (the viewBox width, in px)
    layout.overlapping_labels()     # [] when no two edge labels share any area
    layout.crossings()              # points where two different edges cross
    layout.texts()                  # every label's text, for "is each trigger shown?"
"""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from itertools import combinations, pairwise

Point = tuple[float, float]

_TRANSLATE = re.compile(r"translate\(\s*(-?[\d.e+-]+)[\s,]+(-?[\d.e+-]+)\s*\)")
_PATH_TOKEN = re.compile(r"[A-Za-z]|-?(?:\d+\.?\d*|\.\d+)(?:e[+-]?\d+)?")
# Segments per cubic Bezier: enough for crossings between curves drawn at
# Mermaid's sizes (a crossing is counted once however many segments meet there).
_CURVE_STEPS = 12
# Edges that end at the same state meet near its border: that is not a crossing.
_NEAR_END = 8.0
# Two crossings of the same two edges closer than this are one crossing.
_SAME_POINT = 4.0


@dataclass(frozen=True, slots=True)
class Label:
    """One edge label's box in page coordinates (``x``, ``y``: top left corner)."""

    text: str
    x: float
    y: float
    width: float
    height: float

    def overlap(self, other: Label) -> float:
        """The area the two boxes share (0 when they only touch)."""
        dx = min(self.x + self.width, other.x + other.width) - max(self.x, other.x)
        dy = min(self.y + self.height, other.y + other.height) - max(self.y, other.y)
        return dx * dy if dx > 0 and dy > 0 else 0.0


@dataclass(frozen=True, slots=True)
class SvgLayout:
    """The measurable parts of one rendered chart."""

    width: float
    height: float
    edge_labels: tuple[Label, ...]
    nodes: tuple[Label, ...]  # states, notes, start dots and box titles: text and outline
    edges: tuple[tuple[Point, ...], ...]  # each edge as a polyline

    def texts(self) -> tuple[str, ...]:
        """The text of every edge label and every state or note."""
        return tuple(label.text for label in self.edge_labels + self.nodes if label.text)

    def overlapping_labels(self, *, tolerance: float = 1.0) -> list[tuple[Label, Label]]:
        """Pairs of edge labels that share more than ``tolerance`` square px."""
        return [
            (first, second)
            for first, second in combinations(self.edge_labels, 2)
            if first.overlap(second) > tolerance
        ]

    def labels_over_nodes(self, *, share: float = 0.1) -> list[tuple[Label, Label]]:
        """Pairs (edge label, node or box title) sharing over ``share`` of the label's area.

        A label's box has padding around its text, so a corner that touches a
        state hides nothing; a tenth of the label does.
        """
        return [
            (label, node)
            for label in self.edge_labels
            for node in self.nodes
            if label.overlap(node) > share * label.width * label.height
        ]

    def crossings(self) -> int:
        """How many times two different edges cross (away from their ends)."""
        total = 0
        for first, second in combinations(self.edges, 2):
            ends = (first[0], first[-1], second[0], second[-1])
            points: list[Point] = []
            for point in _intersections(first, second):
                if min(math.dist(point, end) for end in ends) < _NEAR_END:
                    continue
                if all(math.dist(point, seen) >= _SAME_POINT for seen in points):
                    points.append(point)
            total += len(points)
        return total

    def summary(self) -> str:
        """One line: width, edges, crossings, labels on each other or on states."""
        return (
            f"{self.width:.0f} px wide, {len(self.edges)} edges, {self.crossings()} crossings,"
            f" {len(self.overlapping_labels())} overlapping labels,"
            f" {len(self.labels_over_nodes())} labels on states"
        )


def read_svg(text: str) -> SvgLayout:
    """Measure a Mermaid SVG document; ValueError if it is not one."""
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        raise ValueError(f"not an SVG document: {exc}") from None
    if _local(root.tag) != "svg":
        raise ValueError(f"not an SVG document: the root is <{_local(root.tag)}>")
    view_box = root.get("viewBox", "").replace(",", " ").split()
    if len(view_box) != 4:
        raise ValueError("the SVG has no viewBox")
    width, height = float(view_box[2]), float(view_box[3])
    labels: list[Label] = []
    nodes: list[Label] = []
    edges: list[tuple[Point, ...]] = []
    _collect(root, (0.0, 0.0), labels, nodes, edges)
    return SvgLayout(width, height, tuple(labels), tuple(nodes), tuple(edges))


def _collect(
    element: ET.Element,
    origin: Point,
    labels: list[Label],
    nodes: list[Label],
    edges: list[tuple[Point, ...]],
) -> None:
    here = _moved(origin, element.get("transform"))
    classes = set(element.get("class", "").split())
    tag = _local(element.tag)
    if tag == "path" and element.get("data-edge") == "true" and "note-edge" not in classes:
        edges.append(
            tuple((x + here[0], y + here[1]) for x, y in _path_points(element.get("d", "")))
        )
        return
    if tag == "g" and "edgeLabel" in classes:
        label = _edge_label(element, here)
        if label is not None:
            labels.append(label)
        return
    if tag == "g" and "node" in classes:
        nodes.append(_node(element, here))
        return
    if tag == "g" and "cluster-label" in classes:
        title = _edge_label(element, here)  # a box's title: text in a foreignObject too
        if title is not None:
            nodes.append(title)
        return
    for child in element:
        _collect(child, here, labels, nodes, edges)


def _node(group: ET.Element, origin: Point) -> Label:
    """A node's text and the box of its outline (its first rect, or circle)."""
    text = " ".join(_text(group).split())
    for shape in group.iter():
        tag = _local(shape.tag)
        if tag == "rect" and shape.get("width"):
            x, y = _offset_to(group, shape, origin)
            x, y = x + float(shape.get("x", 0)), y + float(shape.get("y", 0))
            return Label(text, x, y, float(shape.get("width", 0)), float(shape.get("height", 0)))
        if tag == "circle" and shape.get("r"):
            x, y = _offset_to(group, shape, origin)
            r = float(shape.get("r", 0))
            cx, cy = x + float(shape.get("cx", 0)), y + float(shape.get("cy", 0))
            return Label(text, cx - r, cy - r, 2 * r, 2 * r)
    return Label(text, origin[0], origin[1], 0.0, 0.0)


def _edge_label(group: ET.Element, origin: Point) -> Label | None:
    for inner in group.iter():
        if _local(inner.tag) != "foreignObject":
            continue
        width, height = float(inner.get("width", 0)), float(inner.get("height", 0))
        if width <= 0 or height <= 0:
            return None  # Mermaid's placeholder for an edge without a label
        x, y = _offset_to(group, inner, origin)
        return Label(" ".join(_text(inner).split()), x, y, width, height)
    return None


def _offset_to(top: ET.Element, target: ET.Element, origin: Point) -> Point:
    """``origin`` moved by every transform from below ``top`` down to ``target``."""

    def walk(element: ET.Element, at: Point) -> Point | None:
        for child in element:
            moved = _moved(at, child.get("transform"))
            if child is target:
                return moved
            found = walk(child, moved)
            if found is not None:
                return found
        return None

    found = walk(top, origin)
    if found is None:
        raise ValueError("label element not found under its group")
    return found


def _moved(origin: Point, transform: str | None) -> Point:
    if not transform:
        return origin
    match = _TRANSLATE.search(transform)
    if match is None:
        return origin
    return origin[0] + float(match[1]), origin[1] + float(match[2])


def _path_points(d: str) -> list[Point]:
    """The polyline of an SVG path of absolute M, L and C commands."""
    tokens = _PATH_TOKEN.findall(d)
    points: list[Point] = []
    command = ""
    index = 0

    def numbers(count: int) -> list[float]:
        nonlocal index
        values = [float(token) for token in tokens[index : index + count]]
        if len(values) != count or any(token.isalpha() for token in tokens[index : index + count]):
            raise ValueError(f"malformed path data: {d[:80]!r}")
        index += count
        return values

    while index < len(tokens):
        if tokens[index].isalpha():
            command = tokens[index]
            index += 1
            if command in "Zz":
                continue
        if command in ("M", "L"):
            x, y = numbers(2)
            points.append((x, y))
        elif command == "C":
            x1, y1, x2, y2, x, y = numbers(6)
            if not points:
                raise ValueError(f"path starts with a curve: {d[:80]!r}")
            x0, y0 = points[-1]
            for step in range(1, _CURVE_STEPS + 1):
                t = step / _CURVE_STEPS
                u = 1 - t
                points.append(
                    (
                        u**3 * x0 + 3 * u * u * t * x1 + 3 * u * t * t * x2 + t**3 * x,
                        u**3 * y0 + 3 * u * u * t * y1 + 3 * u * t * t * y2 + t**3 * y,
                    )
                )
        else:
            raise ValueError(f"unsupported path command {command!r} in {d[:80]!r}")
    return points


def _intersections(first: tuple[Point, ...], second: tuple[Point, ...]) -> list[Point]:
    found = []
    for a, b in pairwise(first):
        for c, d in pairwise(second):
            point = _segment_intersection(a, b, c, d)
            if point is not None:
                found.append(point)
    return found


def _segment_intersection(a: Point, b: Point, c: Point, d: Point) -> Point | None:
    rx, ry = b[0] - a[0], b[1] - a[1]
    sx, sy = d[0] - c[0], d[1] - c[1]
    denominator = rx * sy - ry * sx
    if abs(denominator) < 1e-12:
        return None  # parallel (collinear overlaps are not crossings)
    t = ((c[0] - a[0]) * sy - (c[1] - a[1]) * sx) / denominator
    u = ((c[0] - a[0]) * ry - (c[1] - a[1]) * rx) / denominator
    if 0 <= t <= 1 and 0 <= u <= 1:
        return a[0] + t * rx, a[1] + t * ry
    return None


def _text(element: ET.Element) -> str:
    return " ".join(part for part in element.itertext())


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]
