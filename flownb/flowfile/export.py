"""A flow written back in the web tool's export format: what :meth:`LocalFlow.save` writes.

A flow keeps the exported JSON it was loaded from. A variant (``with_model``, ``with_params``,
``with_prompts``, ``with_system``) is written as that JSON with its changes put into the nodes'
own fields (``data.prompt``, ``data.modelParams``), so every editor field the web tool wrote
(ids, positions, sizes, edges, ``lastRundate``) survives and an unchanged flow is written as the
very JSON it came from. A value that did not change keeps its original spelling (``1`` stays
``1``, not ``1.0``).

What the web tool's format has no field for is kept under **one** extra top-level field,
``"flownb"``, which the web tool ignores and :func:`~flownb.flowfile.model.parse_flow` reads
back:

- ``"system"``: node id -> the node's system message (``flow.with_system``);
- ``"chosen"``: node id -> the model parameters set on purpose (``with_params``), which are
  sent even at a no-op value (see :func:`flownb.flowfile.params.to_send`);
- ``"endpoint"``: the name of the ``flownb.toml`` endpoint the flow runs on (written by
  :meth:`LocalFlow.save`; a key is never written, only the endpoint's name).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from ..errors import FlowFileError
from .model import EXTRA, ActionNode, FlowGraph, ImageNode, ModelParams, extras_of
from .template import Template

__all__ = ["EXTRA", "export_flow", "extras_of", "with_extras"]


def with_extras(data: Mapping[str, Any], **changes: Any) -> dict[str, Any]:
    """Return a copy of ``data`` whose ``"flownb"`` field has ``changes`` applied (a value of
    ``None`` or empty removes the key; the field itself is left out when nothing is in it)."""
    out = dict(data)
    extras = {**extras_of(data), **changes}
    extras = {k: v for k, v in extras.items() if v}
    if extras:
        out[EXTRA] = extras
    else:
        out.pop(EXTRA, None)
    return out


def _params(raw: Mapping[str, Any], new: ModelParams) -> dict[str, Any]:
    """Return ``raw`` (a node's exported ``modelParams``) changed to hold ``new``'s values: keys
    in their original order and spelling where the value is the same, removed where ``new`` has
    none, added at the end where ``new`` has one more."""
    wanted = new.as_dict()
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in wanted:
            if value is None and key in ModelParams.model_fields:
                out[key] = value  # an exported null stays null
            continue
        # 1 == 1.0, True for equal numbers: an unchanged value keeps how the file spelt it.
        same = value == wanted[key] and type(value) is not bool
        out[key] = value if same else wanted[key]
    for key, value in wanted.items():
        if key not in out:
            out[key] = value
    return out


def _uses(prompt: str, raw_nodes: list[Any], old: Any) -> list[Any]:
    """Return a node's ``variables`` list (the web tool's note of which variables its prompt
    uses) for a new ``prompt``: the variable nodes whose ``{label}`` it holds, in node order,
    each entry as the old list wrote it when it had one."""
    before = {
        ref.get("id"): ref
        for ref in (old if isinstance(old, list) else [])
        if isinstance(ref, dict)
    }
    variables = {
        raw["id"]: (raw.get("data") or {}).get("variable") or {}
        for raw in raw_nodes
        if raw.get("type") == "variableNode"
    }
    labels = [v["label"] for v in variables.values() if isinstance(v.get("label"), str)]
    # Which labels the prompt uses, by the substitution's own rule (flowfile.template).
    used = set(Template(prompt, labels).names)
    uses = []
    for node_id, variable in variables.items():
        label = variable.get("label")
        if label in used:
            uses.append(
                before.get(node_id)
                or {"id": node_id, "label": label, "value": variable.get("value") or ""}
            )
    return uses


def export_flow(graph: FlowGraph, origin: Mapping[str, Any] | None) -> dict[str, Any]:
    """Return ``graph`` in the web tool's export format, built on ``origin`` (the exported JSON
    it derives from) so that every editor field stays as it was; with no ``origin``, ``graph``
    as flownb holds it. Prompts and model parameters go into the nodes' own fields, system
    messages under the ``"flownb"`` field (see the module docstring).

    Returns:
        A new JSON-ready dict (``origin`` is not changed).

    Raises:
        FlowFileError: ``graph`` has nodes that ``origin`` lacks, or lacks nodes it has (a
            variant changes nodes, never which nodes there are).
    """
    if origin is None:
        skip = {"nodes": {"__all__": {"data": {"system", "chosenParams"}}}}
        origin = graph.model_dump(mode="json", by_alias=True, exclude=skip)
    out = copy.deepcopy(dict(origin))
    generation = {n.id: n for n in graph.nodes if isinstance(n, ActionNode | ImageNode)}
    raw_nodes = out.get("nodes") or []
    _check_same_nodes(graph, raw_nodes)
    system: dict[str, str] = {}
    chosen: dict[str, list[str]] = {}
    for raw in raw_nodes:
        node = generation.get(raw["id"])
        if node is None:
            continue
        _write_node(raw.setdefault("data", {}), node, raw_nodes)
        if node.data.system:
            system[node.id] = node.data.system
        if node.data.chosenParams:
            chosen[node.id] = list(node.data.chosenParams)
    return with_extras(out, system=system or None, chosen=chosen or None)


def _check_same_nodes(graph: FlowGraph, raw_nodes: list[Any]) -> None:
    """Check that the exported nodes ``raw_nodes`` are ``graph``'s, by id.

    Raises:
        FlowFileError: naming the ids only one of them has.
    """
    ids = {raw.get("id") for raw in raw_nodes if isinstance(raw, Mapping)}
    if ids != {n.id for n in graph.nodes}:
        missing = sorted({n.id for n in graph.nodes} - ids)
        extra = sorted(i for i in ids - {n.id for n in graph.nodes} if isinstance(i, str))
        raise FlowFileError(
            "the flow's nodes differ from the file it came from "
            f"(not in the file: {missing or 'none'}; only in the file: {extra or 'none'})"
        )


def _write_node(data: dict[str, Any], node: ActionNode | ImageNode, raw_nodes: list[Any]) -> None:
    """Put ``node``'s prompt and model parameters into its exported ``data`` where they
    changed (an unchanged field keeps how the file wrote it)."""
    data.pop("system", None)  # an older flownb kept it in the node; now under "flownb"
    data.pop("chosenParams", None)
    if data.get("prompt", "") != node.data.prompt:
        data["prompt"] = node.data.prompt
        data["variables"] = _uses(node.data.prompt, raw_nodes, data.get("variables"))
    params = data.get("modelParams")
    old = params if isinstance(params, Mapping) else {}
    if ModelParams.model_validate(old).as_dict() != node.data.modelParams.as_dict():
        data["modelParams"] = _params(old, node.data.modelParams)
