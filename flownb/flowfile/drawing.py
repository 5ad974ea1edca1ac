"""A flow, drawn: variables -> generation nodes -> outputs, as SVG and as Mermaid.

Pure functions of a :class:`~flownb.flowfile.model.FlowGraph` (no network, no system binary, no
provider): :func:`layout` places the nodes in columns by depth, :func:`to_svg` draws them,
:func:`to_mermaid` writes the same picture as a ``flowchart LR`` for front ends that render
Mermaid. ``notes`` adds a line under a node's box: :func:`run_notes` writes a run's time,
tokens and cost per node, and :class:`Picture` shows such a drawing in a notebook.

Everything that came from the flow file is escaped: labels, defaults and prompts are data.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from .model import ActionNode, FlowGraph, ImageNode, OutputNode, VariableNode

__all__ = ["Box", "Drawing", "Picture", "layout", "run_notes", "to_mermaid", "to_svg"]

BoxKind = Literal["variable", "text", "image", "output"]

# Geometry of the SVG, in pixels.
_BOX_W, _BOX_H, _NOTE_H = 210, 54, 16
_COL_GAP, _ROW_GAP, _PAD = 70, 22, 16
_CLIP = 30  # characters of a title or detail line before it is clipped with an ellipsis
_NOTE_CLIP = 40  # a note is drawn smaller, so more of it fits

# Fill and stroke per kind (colour-blind safe pairs; text stays dark on every fill).
_COLOURS: Mapping[BoxKind, tuple[str, str]] = {
    "variable": ("#e8f1fb", "#3b6ea8"),
    "text": ("#fdf1e3", "#b86e1c"),
    "image": ("#f1e9f8", "#7a4ba8"),
    "output": ("#e7f5ec", "#2f7d4f"),
}


@dataclass(frozen=True, slots=True)
class Box:
    """One node as drawn: ``title`` (label or name), ``detail`` (a variable's default, a
    generation node's kind and model), ``tooltip`` (the prompt), its ``column`` and ``row``, and
    whether it ``runs`` (a generation node that feeds no output never runs)."""

    id: str
    kind: BoxKind
    title: str
    detail: str
    tooltip: str
    column: int
    row: int
    runs: bool = True


@dataclass(frozen=True, slots=True)
class Drawing:
    """The boxes of a flow, and its edges as ``(source id, target id)`` pairs in file order."""

    boxes: tuple[Box, ...]
    edges: tuple[tuple[str, str], ...]


def _box_text(
    node: VariableNode | ActionNode | ImageNode | OutputNode,
    values: Mapping[str, str] | None = None,
) -> tuple[BoxKind, str, str, str]:
    if isinstance(node, VariableNode):
        label = node.data.variable.label
        if values is not None and label in values:  # a run's own input, not the default
            return "variable", label, f"= {values[label]}" if values[label] else "(empty)", ""
        value = node.data.variable.value
        return "variable", label, f"= {value}" if value else "(no default)", ""
    if isinstance(node, OutputNode):
        return "output", node.data.name, "output", ""
    kind: BoxKind = "image" if isinstance(node, ImageNode) else "text"
    model = node.data.modelParams.model
    detail = f"{kind} · {model}" if model else kind
    return kind, node.data.name or node.id, detail, node.data.prompt


def layout(graph: FlowGraph, values: Mapping[str, str] | None = None) -> Drawing:
    """Return where each node of ``graph`` is drawn: variables in the first column, generation
    nodes one column right of the deepest node feeding them, outputs in the last column; rows
    in node order within a column. A variable's detail is its value in ``values`` (a run's
    inputs, by variable name) when there, else its default."""
    nodes = {n.id: n for n in graph.nodes}
    incoming: dict[str, list[str]] = {n: [] for n in nodes}
    for edge in graph.edges:
        incoming[edge.target].append(edge.source)
    column = _columns(nodes, incoming)
    runs = _running(nodes, incoming)
    rows: dict[int, int] = {}
    boxes = []
    for node_id, node in nodes.items():
        col = column[node_id]
        row = rows.get(col, 0)
        rows[col] = row + 1
        kind, title, detail, tooltip = _box_text(node, values)
        generation = kind in ("text", "image")
        boxes.append(
            Box(
                node_id,
                kind,
                title,
                detail,
                tooltip,
                col,
                row,
                runs=not generation or node_id in runs,
            )
        )
    edges = tuple((e.source, e.target) for e in graph.edges)
    return Drawing(tuple(boxes), edges)


def _columns(nodes: Mapping[str, Any], incoming: Mapping[str, list[str]]) -> dict[str, int]:
    """Return each node's column: 0 for a variable, 1 + the deepest generation node above it
    for a generation node, one past the last of those for an output."""
    column = {node_id: 0 for node_id, node in nodes.items() if isinstance(node, VariableNode)}
    # The graph is acyclic (parse_flow refused cycles). Iterative, as flows can be deep.
    pending = [n for n, node in nodes.items() if isinstance(node, ActionNode | ImageNode)]
    while pending:
        left = []
        for node_id in pending:
            above = [s for s in incoming[node_id] if isinstance(nodes[s], ActionNode | ImageNode)]
            if all(s in column for s in above):
                column[node_id] = 1 + max((column[s] for s in above), default=0)
            else:
                left.append(node_id)
        if len(left) == len(pending):  # unreachable for a parsed flow; never loop forever
            column.update(dict.fromkeys(left, 1))
            break
        pending = left
    last = max(column.values(), default=0) + 1
    column.update((n, last) for n, node in nodes.items() if isinstance(node, OutputNode))
    return column


def _running(nodes: Mapping[str, Any], incoming: Mapping[str, list[str]]) -> set[str]:
    """Return the nodes an output depends on, directly or through others (the generation
    nodes among them are those that run)."""
    runs: set[str] = set()
    stack = [s for n, node in nodes.items() if isinstance(node, OutputNode) for s in incoming[n]]
    while stack:
        node_id = stack.pop()
        if node_id not in runs:
            runs.add(node_id)
            stack.extend(incoming[node_id])
    return runs


def _clip(text: str, limit: int = _CLIP) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _positions(drawing: Drawing, box_h: int) -> tuple[dict[str, tuple[int, int]], int, int]:
    """Return each box's top-left corner, and the picture's width and height; every column is
    centred vertically on the tallest one."""
    per_column: dict[int, int] = {}
    for box in drawing.boxes:
        per_column[box.column] = max(per_column.get(box.column, 0), box.row + 1)
    tallest = max(per_column.values(), default=1)
    height = 2 * _PAD + tallest * box_h + (tallest - 1) * _ROW_GAP
    columns = max(per_column, default=0) + 1
    width = 2 * _PAD + columns * _BOX_W + (columns - 1) * _COL_GAP
    where: dict[str, tuple[int, int]] = {}
    for box in drawing.boxes:
        count = per_column[box.column]
        span = count * box_h + (count - 1) * _ROW_GAP
        top = (height - span) // 2
        x = _PAD + box.column * (_BOX_W + _COL_GAP)
        where[box.id] = (x, top + box.row * (box_h + _ROW_GAP))
    return where, width, height


def to_svg(
    graph: FlowGraph,
    *,
    title: str = "",
    notes: Mapping[str, str] | None = None,
    values: Mapping[str, str] | None = None,
) -> str:
    """Return a self-contained SVG picture of ``graph`` (no script, no outside reference).

    ``title`` names the picture (shown by screen readers and as a tooltip); ``notes`` maps a
    node id to one extra line drawn under its detail (a run's time, tokens, cost); ``values``
    (a run's inputs, by variable name) are shown on the variables instead of their defaults.
    """
    notes = notes or {}
    drawing = layout(graph, values)
    box_h = _BOX_H + (_NOTE_H if notes else 0)
    where, width, height = _positions(drawing, box_h)
    esc = html.escape
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" font-family="sans-serif" font-size="12">',
        f"<title>{esc(title or 'flow')}</title>",
        '<defs><marker id="flownb-arrow" viewBox="0 0 10 10" refX="10" refY="5" '
        'markerWidth="7" markerHeight="7" orient="auto-start-reverse">'
        '<path d="M 0 0 L 10 5 L 0 10 z" fill="#666"/></marker></defs>',
    ]
    for source, target in drawing.edges:
        if source not in where or target not in where:
            continue
        sx, sy = where[source]
        tx, ty = where[target]
        x1, y1, x2, y2 = sx + _BOX_W, sy + box_h // 2, tx, ty + box_h // 2
        bend = max(30, (x2 - x1) // 2)
        parts.append(
            f'<path class="edge" d="M {x1} {y1} C {x1 + bend} {y1}, {x2 - bend} {y2}, {x2} {y2}" '
            'fill="none" stroke="#666" stroke-width="1.4" marker-end="url(#flownb-arrow)"/>'
        )
    for box in drawing.boxes:
        x, y = where[box.id]
        fill, stroke = _COLOURS[box.kind]
        dash = "" if box.runs else ' stroke-dasharray="5 4" opacity="0.6"'
        tip = box.tooltip or box.title
        if box.id in notes:
            tip += f"\n({notes[box.id]})"
        if not box.runs:
            tip += "\n(feeds no output: never runs)"
        parts += [
            f'<g class="node {box.kind}" data-id="{esc(box.id)}">',
            f"<title>{esc(tip)}</title>",
            f'<rect x="{x}" y="{y}" width="{_BOX_W}" height="{box_h}" rx="8" fill="{fill}" '
            f'stroke="{stroke}" stroke-width="1.6"{dash}/>',
            f'<text x="{x + 10}" y="{y + 22}" font-weight="bold" fill="#222">'
            f"{esc(_clip(box.title))}</text>",
            f'<text x="{x + 10}" y="{y + 41}" fill="#444">{esc(_clip(box.detail))}</text>',
        ]
        if box.id in notes:
            parts.append(
                f'<text class="note" x="{x + 10}" y="{y + 58}" fill="#444" font-size="10">'
                f"{esc(_clip(notes[box.id], _NOTE_CLIP))}</text>"
            )
        parts.append("</g>")
    parts.append("</svg>")
    return "\n".join(parts)


def _mermaid_text(text: str) -> str:
    # Mermaid labels are quoted strings: its own entity codes keep quotes and markup literal.
    text = _clip(text, 60)
    for raw, code in (("&", "#amp;"), ('"', "#quot;"), ("<", "#lt;"), (">", "#gt;")):
        text = text.replace(raw, code)
    return text


def to_mermaid(graph: FlowGraph, *, notes: Mapping[str, str] | None = None) -> str:
    """Return ``graph`` as a Mermaid ``flowchart LR``: one box per node (label or name, then
    its default or kind and model, then its note), one arrow per edge, a class per kind."""
    notes = notes or {}
    drawing = layout(graph)
    ids = {box.id: f"n{i}" for i, box in enumerate(drawing.boxes)}
    shapes = {"variable": ('(["', '"])'), "output": ('[["', '"]]')}
    lines = ["flowchart LR"]
    for box in drawing.boxes:
        label = "<br/>".join(
            _mermaid_text(t) for t in (box.title, box.detail, notes.get(box.id, "")) if t
        )
        left, right = shapes.get(box.kind, ('["', '"]'))
        lines.append(f"  {ids[box.id]}{left}{label}{right}:::{box.kind}")
        if not box.runs:
            lines.append(f"  class {ids[box.id]} idle")
    for source, target in drawing.edges:
        if source in ids and target in ids:
            lines.append(f"  {ids[source]} --> {ids[target]}")
    for kind, (fill, stroke) in _COLOURS.items():
        lines.append(f"  classDef {kind} fill:{fill},stroke:{stroke},color:#222")
    lines.append("  classDef idle stroke-dasharray:5 4,opacity:0.6")
    return "\n".join(lines) + "\n"


def _dollars(amount: float) -> str:
    """Return ``amount`` in dollars: cents from $1 up, else two significant digits (a call
    costs fractions of a cent), never in exponent notation."""
    if amount <= 0:
        return "$0"
    if amount < 1e-8:
        return "~$0"
    if amount >= 1:
        return f"${amount:.2f}"
    places = 1 - math.floor(math.log10(amount))
    return f"${amount:.{places}f}"


def run_notes(node_ids: Sequence[str], generations: Iterable[Any]) -> dict[str, str]:
    """Return a note per generation node that ran, from its generation (``node_ids[i]`` made
    ``generations[i]``; None: it did not run): ``cached`` or its time, then its tokens and its
    cost, e.g. ``1.24 s · 340 tok · $0.0012`` or ``cached · 340 tok · saved $0.0012``. A cost
    the price table does not know is ``$?``; one not priced (offline) is left out."""
    notes: dict[str, str] = {}
    for node_id, gen in zip(node_ids, generations, strict=False):
        if gen is None:
            continue
        seconds = gen.latency
        parts = [
            "cached" if gen.cached else f"{seconds:.2f} s" if seconds < 10 else f"{seconds:.0f} s"
        ]
        usage = gen.usage or {}
        tokens = usage.get("total_tokens") or (
            usage.get("prompt_tokens", 0) + usage.get("completion_tokens", 0)
        )
        if tokens:
            parts.append(f"{tokens:,} tok")
        if gen.cost is not None:
            money = "$?" if math.isnan(gen.cost) else _dollars(gen.cost)
            parts.append(f"saved {money}" if gen.cached else money)
        notes[node_id] = " · ".join(parts)
    return notes


class Picture:
    """A drawing to show: the SVG in a notebook, ``text`` in a terminal.

    Attributes:
        svg: the picture (see :func:`to_svg`).
        text: what a terminal shows instead.
    """

    def __init__(self, svg: str, text: str) -> None:
        self.svg = svg
        self.text = text

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        # Inline SVG in HTML first (what every notebook front end draws), in an element math
        # typesetters skip (a note's "$0.0012 ... $0.0040" is money).
        html_svg = f'<div class="flownb-picture tex2jax_ignore mathjax_ignore">{self.svg}</div>'
        return {"text/html": html_svg, "image/svg+xml": self.svg, "text/plain": self.text}

    def __repr__(self) -> str:
        return self.text
