"""What differs between two flows, in words: what ``flownb diff A B`` prints.

Only what changes what a flow does is compared: its variables (and their default values), its
generation nodes (prompt, model, every model parameter, system message), its outputs, how they
are joined, and the endpoint a saved flow names. Editor fields (positions, sizes, selection,
``lastRundate``) are not. Nodes are matched by id, then, for flows exported apart, by kind and
name; a parameter is compared by value (``1`` and ``1.0`` are the same).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from .model import (
    ActionNode,
    FlowGraph,
    ImageNode,
    OutputNode,
    VariableNode,
    extras_of,
    parse_flow,
)

__all__ = ["diff_flows"]

_KIND = {
    "variableNode": "variable",
    "actionNode": "text node",
    "imageNode": "image node",
    "outputNode": "output",
}


def _name(node: Any) -> str:
    if isinstance(node, VariableNode):
        return node.data.variable.label
    if isinstance(node, OutputNode):
        return node.data.name
    return str(node.data.name or node.id)


def _match(a: FlowGraph, b: FlowGraph) -> tuple[list[tuple[Any, Any]], list[Any], list[Any]]:
    """Return the pairs of nodes that are the same node in ``a`` and ``b`` (by id, then by kind
    and name), and the nodes only in ``a`` and only in ``b``, each in node order."""
    by_id = {n.id: n for n in b.nodes}
    pairs: list[tuple[Any, Any]] = []
    only_a: list[Any] = []
    taken: set[str] = set()
    for node in a.nodes:
        other = by_id.get(node.id)
        if other is not None and other.type == node.type:
            pairs.append((node, other))
            taken.add(other.id)
        else:
            only_a.append(node)
    rest = [n for n in b.nodes if n.id not in taken]
    unmatched = []
    for node in only_a:
        same = next((o for o in rest if o.type == node.type and _name(o) == _name(node)), None)
        if same is None:
            unmatched.append(node)
        else:
            pairs.append((node, same))
            rest.remove(same)
    return pairs, unmatched, rest


def _text_change(what: str, old: str, new: str) -> list[str]:
    """Return a text's change in words: before and after when short, else a unified diff."""
    if "\n" not in old + new and len(old) + len(new) <= 160:
        return [f"{what}: {old!r} -> {new!r}"]
    lines = difflib.unified_diff(
        old.splitlines(), new.splitlines(), "before", "after", lineterm="", n=1
    )
    return [f"{what} changed:", *(f"    {line}" for line in lines)]


def _value(params: Mapping[str, Any], key: str) -> str:
    return repr(params[key]) if key in params else "unset"


def _node_changes(old: Any, new: Any) -> list[str]:
    """Return what differs between two matched nodes, in words (empty: nothing that counts)."""
    label = f"{_KIND[old.type]} {_name(old)!r}"
    if isinstance(old, VariableNode):
        a, b = old.data.variable.value, new.data.variable.value
        return [f"{label}: default value {a!r} -> {b!r}"] if a != b else []
    if isinstance(old, OutputNode):
        return [f"{label} renamed to {_name(new)!r}"] if _name(old) != _name(new) else []
    out = []
    if _name(old) != _name(new):
        out.append(f"{label} renamed to {_name(new)!r}")
        label = f"{_KIND[new.type]} {_name(new)!r}"
    if old.data.prompt != new.data.prompt:
        out += _text_change(f"{label}: prompt", old.data.prompt, new.data.prompt)
    if (old.data.system or "") != (new.data.system or ""):
        out += _text_change(
            f"{label}: system message", old.data.system or "", new.data.system or ""
        )
    a, b = old.data.modelParams.as_dict(), new.data.modelParams.as_dict()
    for key in dict.fromkeys([*a, *b]):
        if a.get(key) != b.get(key):
            what = "model" if key == "model" else f"parameter {key}"
            out.append(f"{label}: {what} {_value(a, key)} -> {_value(b, key)}")
    return out


def _joins(graph: FlowGraph, names: Mapping[str, str]) -> set[tuple[str, str]]:
    return {(names[e.source], names[e.target]) for e in graph.edges}


def diff_flows(
    a: Mapping[str, Any], b: Mapping[str, Any], names: tuple[str, str] = ("A", "B")
) -> list[str]:
    """Return what differs between two exported flows (decoded JSON), one line a difference,
    in words; empty when they do the same thing (editor fields aside). ``names`` are how
    errors name the two.

    Raises:
        FlowFileError: either is not a valid flow (the message names which).
    """
    ga, gb = parse_flow(a, names[0]), parse_flow(b, names[1])
    pairs, only_a, only_b = _match(ga, gb)
    lines: list[str] = []
    for node in only_a:
        lines.append(f"removed {_KIND[node.type]} {_name(node)!r}")
    for node in only_b:
        lines.append(f"added {_KIND[node.type]} {_name(node)!r}")
        if isinstance(node, ActionNode | ImageNode):
            params = node.data.modelParams.as_dict()
            if "model" in params:
                lines.append(f"  with model {params['model']!r}")
    for old, new in pairs:
        lines += _node_changes(old, new)
    # Joins compared by the names of what they join, in B's names for nodes both have.
    in_b = {n.id: f"{_KIND[n.type]} {_name(n)!r}" for n in gb.nodes}
    in_a = {n.id: f"{_KIND[n.type]} {_name(n)!r}" for n in ga.nodes}
    in_a.update({old.id: in_b[new.id] for old, new in pairs})
    before, after = _joins(ga, in_a), _joins(gb, in_b)
    lines += [f"no longer joined: {s} -> {t}" for s, t in sorted(before - after)]
    lines += [f"newly joined: {s} -> {t}" for s, t in sorted(after - before)]
    ea, eb = extras_of(a).get("endpoint"), extras_of(b).get("endpoint")
    if ea != eb:
        lines.append(f"endpoint: {ea or 'none named'} -> {eb or 'none named'}")
    return lines
