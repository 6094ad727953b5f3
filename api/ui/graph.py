"""The relationship graph around one entity, laid out for an SVG drawn by the template.

A radial layout: the entity in the middle, its neighbours evenly on a circle, one edge each,
labelled with the relationship type. Coordinates only: the template writes the SVG, so every
label goes through the template's escaping like any other value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from memory_core.read.explorer import Neighbour

WIDTH = 720
HEIGHT = 480
RADIUS = 180
_LABEL_CHARS = 28


@dataclass(frozen=True)
class Node:
    """A circle with a label, linking to that entity's page."""

    key: str
    label: str
    x: float
    y: float
    centre: bool = False


@dataclass(frozen=True)
class Edge:
    """A line from the centre to a neighbour, labelled at its middle."""

    x1: float
    y1: float
    x2: float
    y2: float
    label: str
    label_x: float
    label_y: float
    outgoing: bool


@dataclass(frozen=True)
class GraphLayout:
    """Everything the template needs to draw the picture."""

    width: int
    height: int
    nodes: list[Node]
    edges: list[Edge]


def _short(text: str) -> str:
    return text if len(text) <= _LABEL_CHARS else text[: _LABEL_CHARS - 1] + "…"


def radial_layout(centre_key: str, centre_name: str | None, neighbours: list[Neighbour]) -> GraphLayout:
    """The entity at the centre and ``neighbours`` on a circle around it (the first at the top)."""
    cx, cy = WIDTH / 2, HEIGHT / 2
    nodes = [Node(centre_key, _short(centre_name or centre_key), cx, cy, centre=True)]
    edges: list[Edge] = []
    count = len(neighbours)
    for index, neighbour in enumerate(neighbours):
        angle = -math.pi / 2 + 2 * math.pi * index / max(count, 1)
        x = round(cx + RADIUS * 1.6 * math.cos(angle), 1)
        y = round(cy + RADIUS * math.sin(angle), 1)
        nodes.append(Node(neighbour.canonical_key, _short(neighbour.display_name or neighbour.canonical_key), x, y))
        edges.append(
            Edge(
                x1=cx,
                y1=cy,
                x2=x,
                y2=y,
                label=_short(neighbour.rel_type),
                label_x=round((cx + x) / 2, 1),
                label_y=round((cy + y) / 2 - 4, 1),
                outgoing=neighbour.outgoing,
            )
        )
    return GraphLayout(WIDTH, HEIGHT, nodes, edges)
