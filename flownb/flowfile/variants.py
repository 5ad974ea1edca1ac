"""Variants of a flow without editing its JSON: other model parameters, models, prompts or
system messages.

Each function takes a parsed :class:`~flownb.flowfile.model.FlowGraph` and returns a new one (the
models
are frozen; ``model_copy`` shares every untouched node), so the original flow is never changed.
A generation node is named by its ``name`` or its ``id``; an unknown or ambiguous name is a
:class:`~flownb.errors.ConfigError` listing the choices.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from ..errors import ConfigError
from .model import ActionNode, FlowGraph, ImageNode, ModelParams, first_error
from .params import NO_OP

__all__ = [
    "generation_nodes",
    "resolve_node",
    "with_model",
    "with_params",
    "with_prompts",
    "with_system",
]


def generation_nodes(graph: FlowGraph) -> list[ActionNode | ImageNode]:
    """Return the graph's text and image generation nodes, in node order."""
    return [n for n in graph.nodes if isinstance(n, ActionNode | ImageNode)]


def resolve_node(graph: FlowGraph, ref: str) -> str:
    """Return the id of the generation node named ``ref`` (its name, else its id).

    Raises:
        ConfigError: no generation node has that name or id, or several share the name.
    """
    nodes = generation_nodes(graph)
    by_name = [n for n in nodes if n.data.name == ref]
    if len(by_name) == 1:
        return by_name[0].id
    by_id = [n for n in nodes if n.id == ref]
    if by_id:
        return by_id[0].id
    if by_name:
        ids = ", ".join(repr(n.id) for n in by_name)
        raise ConfigError(f"{len(by_name)} generation nodes are named {ref!r}; use an id: {ids}")
    choices = ", ".join(f"{n.data.name!r} (id {n.id!r})" for n in nodes) or "none"
    raise ConfigError(f"no generation node {ref!r}; the flow's generation nodes are: {choices}")


def _merged(params: ModelParams, update: Mapping[str, Any], where: str) -> ModelParams:
    if not isinstance(update, Mapping):
        raise ConfigError(f"parameters for {where} must be a mapping, got {type(update).__name__}")
    # Validated afresh (not model_copy(update=...)), so a wrong type (temperature="hot") or a
    # value out of range (temperature=nan, n=1000000) is refused here, and extra parameters
    # stay extras. None removes a parameter.
    merged = {**params.model_dump(), **update}
    try:
        return ModelParams.model_validate({k: v for k, v in merged.items() if v is not None})
    except ValidationError as exc:
        problem = first_error(exc).removeprefix("modelParams: ")
        raise ConfigError(f"invalid model parameters for {where}: {problem}") from None


def _replace(graph: FlowGraph, changes: Mapping[str, Mapping[str, Any]]) -> FlowGraph:
    """Return ``graph`` with node id -> data field updates applied."""
    nodes = []
    for node in graph.nodes:
        change = changes.get(node.id)
        if change is None:
            nodes.append(node)
        else:
            nodes.append(node.model_copy(update={"data": node.data.model_copy(update=change)}))
    return graph.model_copy(update={"nodes": nodes})


def with_params(
    graph: FlowGraph, per_node: Mapping[str, Mapping[str, Any]] | None, params: Mapping[str, Any]
) -> FlowGraph:
    """Return ``graph`` with modelParams updated: ``params`` on every generation node, then
    ``per_node`` (node name or id -> parameters) on the nodes it names.

    Raises:
        ConfigError: a node is unknown or ambiguous, or a parameter has the wrong type.
    """
    if per_node is not None and not isinstance(per_node, Mapping):
        raise ConfigError(
            "with_params takes parameters as keywords (temperature=0.2) or a mapping of node "
            f"name -> parameters, got {type(per_node).__name__}"
        )
    if not params and not per_node:
        raise ConfigError("with_params needs parameters: with_params(temperature=0.2, ...)")
    nodes = generation_nodes(graph)
    current = {n.id: n.data.modelParams for n in nodes}
    names = {n.id: n.data.name or n.id for n in nodes}
    # Knobs set on purpose, so sent even at a no-op value (flowfile/params.py's to_send).
    chosen = {n.id: set(n.data.chosenParams or ()) for n in nodes}
    if params:
        current = {i: _merged(p, params, f"node {names[i]!r}") for i, p in current.items()}
        for keys in chosen.values():
            _choose(keys, params)
    for ref, update in (per_node or {}).items():
        node_id = resolve_node(graph, ref)
        current[node_id] = _merged(current[node_id], update, f"node {ref!r}")
        _choose(chosen[node_id], update)
    return _replace(
        graph,
        {
            i: {"modelParams": p, "chosenParams": sorted(chosen[i]) or None}
            for i, p in current.items()
        },
    )


def _choose(keys: set[str], update: Mapping[str, Any]) -> None:
    """Mark in ``keys`` the no-op knobs ``update`` sets (and unmark the ones it removes): only
    they need marking, since every other parameter is sent whenever it is set."""
    for name, value in update.items():
        if name in NO_OP:
            (keys.discard if value is None else keys.add)(name)


def with_prompts(graph: FlowGraph, prompts: Mapping[str, str]) -> FlowGraph:
    """Return ``graph`` with the prompts of the named nodes (name or id -> prompt) replaced.

    Raises:
        ConfigError: a node is unknown or ambiguous, or a prompt is not a string.
    """
    if not isinstance(prompts, Mapping) or not prompts:
        raise ConfigError('with_prompts takes a mapping of node name -> prompt: {"Intro": "..."}')
    changes: dict[str, dict[str, Any]] = {}
    for ref, prompt in prompts.items():
        if not isinstance(prompt, str):
            raise ConfigError(
                f"the prompt for {ref!r} must be a string, got {type(prompt).__name__}"
            )
        changes[resolve_node(graph, ref)] = {"prompt": prompt}
    return _replace(graph, changes)


def with_model(
    graph: FlowGraph, model: str | Mapping[str, str] | None, image: str | None
) -> FlowGraph:
    """Return ``graph`` with other models: ``model`` (a string) on every text node, ``image``
    on every image node, or ``model`` as a mapping (node name or id -> model) on those nodes.

    Raises:
        ConfigError: nothing to change, a node is unknown, or a model is not a string.
    """
    per_node: dict[str, dict[str, Any]] = {}
    if isinstance(model, Mapping):
        for ref, name in model.items():
            per_node[ref] = {"model": _model_name(name, f"node {ref!r}")}
    elif model is not None:
        name = _model_name(model, "with_model")
        for node in generation_nodes(graph):
            if isinstance(node, ActionNode):
                per_node[node.id] = {"model": name}
    if image is not None:
        name = _model_name(image, "with_model(image=...)")
        for node in generation_nodes(graph):
            if isinstance(node, ImageNode):
                per_node[node.id] = {"model": name}
    if model is None and image is None:
        raise ConfigError('with_model needs a model: with_model("gpt-4o-mini"), image="..."')
    if not per_node:
        return graph  # e.g. a text model for a flow with only image nodes: nothing to change
    return with_params(graph, per_node, {})


def _model_name(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{where}: a model must be a non-empty string, got {value!r}")
    return value


def with_system(graph: FlowGraph, system: str | Mapping[str, str | None] | None) -> FlowGraph:
    """Return ``graph`` with a system message: ``system`` (a string) on every text node, or a
    mapping (node name or id -> message) on those nodes; ``None`` removes it.

    Raises:
        ConfigError: a node is unknown, names an image node (images take no system message), or
            a message is not a string.
    """
    changes: dict[str, dict[str, Any]] = {}
    if system is None or isinstance(system, str):
        for node in generation_nodes(graph):
            if isinstance(node, ActionNode):
                changes[node.id] = {"system": system or None}
    elif isinstance(system, Mapping):
        if not system:
            raise ConfigError('with_system takes a message, or {"Node": "message"}')
        nodes = {n.id: n for n in generation_nodes(graph)}
        for ref, text in system.items():
            if text is not None and not isinstance(text, str):
                raise ConfigError(
                    f"the system message for {ref!r} must be a string, got {type(text).__name__}"
                )
            node_id = resolve_node(graph, ref)
            if isinstance(nodes[node_id], ImageNode):
                raise ConfigError(f"node {ref!r} draws images, which take no system message")
            changes[node_id] = {"system": text or None}
    else:
        raise ConfigError(
            f"with_system takes a string or a mapping of node -> string, got "
            f"{type(system).__name__}"
        )
    return _replace(graph, changes)
