"""Pydantic models of an exported flow graph and of the contract's API items, plus loading.

Flows are accepted exactly as the web tool exports them: editor-only fields (position, width,
selected, dragging, lastRundate, ...) are accepted and ignored. :func:`parse_flow` is the one
place a flow is checked as a graph; every problem it finds names the file and the node or edge.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)

from ..errors import FlowFileError
from ..infra.files import read_capped
from ..infra.unicode import surrogates_in
from .params import RULES, params_problem, to_send

__all__ = [
    "EXTRA",
    "MAX_FLOW_BYTES",
    "ActionNode",
    "Edge",
    "FlowGraph",
    "ImageNode",
    "ModelParams",
    "Node",
    "OutputNode",
    "VariableNode",
    "describe",
    "extras_of",
    "first_error",
    "load_flow_file",
    "parse_flow",
    "read_flow_file",
]

# The largest flow file read: exported flows are kilobytes; anything this big is a mistake.
MAX_FLOW_BYTES = 5 * 1024 * 1024

NODE_TYPES = ("variableNode", "actionNode", "imageNode", "outputNode")

# The one field of flownb's own in a saved flow (see the module docstring).
EXTRA = "flownb"
EXTRA_KEYS = ("system", "endpoint", "chosen")


def _maps_to_strings(value: Any) -> bool:
    return isinstance(value, Mapping) and all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    )


def _maps_to_names(value: Any) -> bool:
    return isinstance(value, Mapping) and all(
        isinstance(k, str) and isinstance(v, list) and all(isinstance(n, str) for n in v)
        for k, v in value.items()
    )


def _a_name_or_none(value: Any) -> bool:
    return value is None or (isinstance(value, str) and bool(value.strip()))


# What each key of the "flownb" field must hold, and how a refusal says so.
_EXTRA_RULES: tuple[tuple[str, Callable[[Any], bool], str], ...] = (
    ("system", _maps_to_strings, "must map node ids to strings"),
    ("chosen", _maps_to_names, "must map node ids to lists of names"),
    ("endpoint", _a_name_or_none, "must be an endpoint's name"),
)


def extras_of(data: Mapping[str, Any], where: str = "") -> dict[str, Any]:
    """Return the ``"flownb"`` field of an exported flow, checked (``{}`` when there is none).

    Raises:
        FlowFileError: the field is not an object, has an unknown key, a system message that is
            not a string, or an endpoint name that is not a non-empty string.
    """
    raw = data.get(EXTRA)
    if raw is None:
        return {}
    prefix = f"{where}: " if where else ""
    if not isinstance(raw, Mapping):
        raise FlowFileError(f"{prefix}the {EXTRA!r} field must be an object")
    unknown = sorted(set(raw) - set(EXTRA_KEYS))
    if unknown:
        raise FlowFileError(
            f"{prefix}the {EXTRA!r} field has unknown key(s) {', '.join(map(repr, unknown))}; "
            f"it may hold {', '.join(map(repr, EXTRA_KEYS))}"
        )
    for key, fits, rule in _EXTRA_RULES:
        if key in raw and not fits(raw[key]):
            raise FlowFileError(f"{prefix}{EXTRA}.{key} {rule}")
    system, chosen, endpoint = raw.get("system", {}), raw.get("chosen", {}), raw.get("endpoint")
    out: dict[str, Any] = {}
    if system:
        out["system"] = dict(system)
    if chosen:
        out["chosen"] = {k: list(v) for k, v in chosen.items()}
    if endpoint is not None:
        out["endpoint"] = endpoint.strip()
    return out


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


def _none_to_empty(value: Any) -> Any:
    return "" if value is None else value


class VariableRef(_Model):
    """A generation node's note of a variable it uses (editor bookkeeping; not authoritative)."""

    id: str = ""
    label: str = ""
    value: str = ""

    _empty = field_validator("label", "value", mode="before")(_none_to_empty)


class Variable(_Model):
    label: str
    value: str = ""

    _empty = field_validator("value", mode="before")(_none_to_empty)


class ModelParams(BaseModel):
    """Model parameters of a generation node. Unknown fields are kept (passed to the provider's
    mapping, which decides deliberately what to do with each)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    model: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    top_p: float | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    n: int | None = None
    best_of: int | None = None

    @field_validator(
        "temperature",
        "max_tokens",
        "top_p",
        "frequency_penalty",
        "presence_penalty",
        "n",
        "best_of",
        mode="before",
    )
    @classmethod
    def _no_bool(cls, value: Any) -> Any:
        # pydantic would read true as 1: a flag is never a number here.
        if isinstance(value, bool):
            raise ValueError(f"expected a number, got {str(value).lower()}")
        return value

    @model_validator(mode="after")
    def _in_range(self) -> ModelParams:
        # Every parameter in its documented range, NaN and infinity nowhere (flowfile/params.py).
        problem = params_problem(self.model_dump())
        if problem is not None:
            raise ValueError(problem)
        return self

    def as_dict(self) -> dict[str, Any]:
        """Return the set parameters (``None`` left out), extras included."""
        return {k: v for k, v in self.model_dump().items() if v is not None}


class VariableData(_Model):
    variable: Variable


class GenerationData(_Model):
    name: str = ""
    prompt: str = ""
    modelParams: ModelParams = Field(default_factory=ModelParams)
    variables: list[VariableRef] = Field(default_factory=list)
    # A flownb extension (flow.with_system): the node's system message; exports have none.
    system: str | None = None
    # A flownb extension (with_params, an eval TOML, the CLI): the modelParams set on purpose,
    # sent even at a no-op value (flowfile/params.py's to_send); exports have none. A saved
    # flow keeps them under the "flownb" field's "chosen" (node id -> names).
    chosenParams: list[str] | None = None

    def sent_params(self) -> dict[str, Any]:
        """Return the model parameters this node's calls send (see :func:`~.params.to_send`)."""
        return to_send(self.modelParams.as_dict(), self.chosenParams or ())

    _empty = field_validator("name", "prompt", mode="before")(_none_to_empty)


class OutputData(_Model):
    name: str
    output: dict[str, Any] = Field(default_factory=dict)


class _NodeBase(_Model):
    id: str


class VariableNode(_NodeBase):
    type: Literal["variableNode"]
    data: VariableData


class ActionNode(_NodeBase):
    type: Literal["actionNode"]
    data: GenerationData


class ImageNode(_NodeBase):
    type: Literal["imageNode"]
    data: GenerationData


class OutputNode(_NodeBase):
    type: Literal["outputNode"]
    data: OutputData


Node = Annotated[VariableNode | ActionNode | ImageNode | OutputNode, Field(discriminator="type")]


class Edge(_Model):
    source: str
    target: str
    id: str = ""
    sourceHandle: str | None = None
    targetHandle: str | None = None

    def describe(self, index: int) -> str:
        """Return how error messages name this edge: its id, or its position and ends."""
        return f"edge {self.id!r}" if self.id else f"edge #{index} ({self.source} -> {self.target})"


class FlowGraph(_Model):
    nodes: list[Node]
    edges: list[Edge] = Field(default_factory=list)


def describe(variables: Sequence[str], outputs: Sequence[str]) -> list[dict[str, str]]:
    """Return the contract's describe response: ``{"name", "type"}`` items, the variables, then
    the outputs, each in node order."""
    return [{"name": v, "type": "variable"} for v in variables] + [
        {"name": o, "type": "output"} for o in outputs
    ]


_NODES: TypeAdapter[Node] = TypeAdapter(Node)
_EDGES: TypeAdapter[list[Edge]] = TypeAdapter(list[Edge])


def _where(source: str) -> str:
    return f"{source}: " if source else ""


def _node_label(raw: Mapping[str, Any], index: int) -> str:
    node_id = raw.get("id")
    return f"node {node_id!r}" if isinstance(node_id, str) else f"node #{index}"


def first_error(exc: ValidationError) -> str:
    """Return a validation error's first problem on one line: where, then what (a model
    parameter's problem says its allowed values)."""
    err = exc.errors(include_url=False)[0]
    parts = [str(p) for p in err["loc"]]
    if parts and parts[0] in NODE_TYPES:  # the union's tag: the caller names the node type
        parts = parts[1:]
    if parts[:1] == ["data"]:
        parts = parts[1:]
    msg = str(err["msg"]).removeprefix("Value error, ")
    if parts and parts[-1] in RULES and parts[:-1] in ([], ["modelParams"]):
        name = parts[-1]
        where = "modelParams: " if len(parts) == 2 else ""
        return f"{where}{name} must be {RULES[name].allowed()}, got {err.get('input')!r}"
    loc = ".".join(parts)
    return f"{loc}: {msg}" if loc else msg


def parse_flow(data: Any, source: str = "") -> FlowGraph:
    """Validate an exported flow (already decoded from JSON) as a graph.

    Returns:
        The parsed :class:`FlowGraph`.

    Raises:
        FlowFileError: the data is not a flow, the flow has no nodes, a node has an unknown type,
            bad fields or text that is not valid Unicode (a lone surrogate), node ids repeat, an
            edge names a missing node or joins nodes that cannot be joined, or the edges form a
            cycle. The message names ``source`` and the node or edge.
    """
    where = _where(source)
    if not isinstance(data, Mapping) or not isinstance(data.get("nodes"), list):
        raise FlowFileError(f"{where}not a flow: expected a JSON object with a 'nodes' array")
    if not data["nodes"]:
        raise FlowFileError(f"{where}the flow is empty: it has no nodes")
    nodes = []
    for i, raw in enumerate(data["nodes"]):
        if not isinstance(raw, Mapping):
            raise FlowFileError(f"{where}node #{i} is not a JSON object")
        if raw.get("type") not in NODE_TYPES:
            raise FlowFileError(
                f"{where}{_node_label(raw, i)} has unknown type {raw.get('type')!r}; "
                f"expected one of {', '.join(NODE_TYPES)}"
            )
        for field, bad in surrogates_in(raw):
            raise FlowFileError(
                f"{where}{_node_label(raw, i)} ({raw['type']}) holds text that is not valid "
                f"Unicode: a lone surrogate {bad} in {field}"
            )
        try:
            nodes.append(_NODES.validate_python(raw))
        except ValidationError as exc:
            raise FlowFileError(
                f"{where}{_node_label(raw, i)} ({raw['type']}) is invalid: {first_error(exc)}"
            ) from None
    for field, bad in surrogates_in(data.get("edges") or [], "edges"):
        raise FlowFileError(
            f"{where}edges are invalid: a lone surrogate {bad} in {field} is not valid Unicode"
        )
    try:
        edges = _EDGES.validate_python(data.get("edges") or [])
    except ValidationError as exc:
        raise FlowFileError(f"{where}edges are invalid: {first_error(exc)}") from None
    extras = extras_of(data, source)
    system = extras.get("system", {})
    if system:
        nodes = _with_system(nodes, system, where)
    chosen = extras.get("chosen", {})
    if chosen:  # the modelParams set on purpose (with_params), sent even at a no-op value
        nodes = [
            n.model_copy(update={"data": n.data.model_copy(update={"chosenParams": chosen[n.id]})})
            if n.id in chosen and isinstance(n, ActionNode | ImageNode)
            else n
            for n in nodes
        ]
    graph = FlowGraph.model_construct(nodes=nodes, edges=edges)
    _check_graph(graph, where)
    return graph


def _with_system(nodes: list[Any], system: Mapping[str, str], where: str) -> list[Any]:
    """Return ``nodes`` with the system messages of a saved flow's ``"flownb"`` field (node id
    -> message) put on their text nodes.

    Raises:
        FlowFileError: an id that is not a text generation node.
    """
    text_nodes = {n.id for n in nodes if isinstance(n, ActionNode)}
    unknown = [i for i in system if i not in text_nodes]
    if unknown:
        raise FlowFileError(
            f"{where}{EXTRA}.system names {', '.join(map(repr, unknown))}, which is not a text "
            "generation node of this flow"
        )
    return [
        n.model_copy(update={"data": n.data.model_copy(update={"system": system[n.id]})})
        if n.id in system
        else n
        for n in nodes
    ]


def _check_graph(graph: FlowGraph, where: str) -> None:
    by_id: dict[str, Any] = {}
    for node in graph.nodes:
        if node.id in by_id:
            raise FlowFileError(f"{where}node id {node.id!r} is used by more than one node")
        by_id[node.id] = node
    successors: dict[str, list[str]] = {n: [] for n in by_id}
    for i, edge in enumerate(graph.edges):
        name = edge.describe(i)
        for end, node_id in (("source", edge.source), ("target", edge.target)):
            if node_id not in by_id:
                raise FlowFileError(f"{where}{name} has {end} {node_id!r}, which is not a node")
        if by_id[edge.target].type == "variableNode":
            raise FlowFileError(
                f"{where}{name} points into variable node {edge.target!r}; variables have no inputs"
            )
        if by_id[edge.source].type == "outputNode":
            raise FlowFileError(
                f"{where}{name} leaves output node {edge.source!r}; outputs feed nothing"
            )
        successors[edge.source].append(edge.target)
    cycle = _find_cycle(successors)
    if cycle:
        raise FlowFileError(f"{where}the edges form a cycle: {' -> '.join(cycle)}")


def _find_cycle(successors: dict[str, list[str]]) -> list[str] | None:
    """Return one cycle as a list of node ids (first id repeated at the end), or None."""
    white, grey, black = 0, 1, 2
    colour = dict.fromkeys(successors, white)
    for start in successors:
        if colour[start] != white:
            continue
        # Iterative DFS: deep flows must not hit the recursion limit.
        path: list[str] = [start]
        stack = [iter(successors[start])]
        colour[start] = grey
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                colour[path.pop()] = black
                stack.pop()
            elif colour[nxt] == grey:
                return [*path[path.index(nxt) :], nxt]
            elif colour[nxt] == white:
                colour[nxt] = grey
                path.append(nxt)
                stack.append(iter(successors[nxt]))
    return None


def read_flow_file(path: str | Path, label: str | None = None) -> Any:
    """Read and decode an exported flow JSON file; the one reader of flow files (the CLI, the
    notebook and the server all come here). ``label`` is how messages name the file (default:
    its path; the server names the flow id instead of its own paths).

    Only a regular file of at most :data:`MAX_FLOW_BYTES` is read: a FIFO, a device (a symlink
    to ``/dev/zero``) or a huge file is refused without being read, never waited on.

    Returns:
        The decoded JSON, not yet checked as a graph (see :func:`parse_flow`).

    Raises:
        FileNotFoundError: there is no such file (callers say what that means for them).
        FlowFileError: the file is not a regular file, too big, unreadable, not UTF-8, not JSON
            (with line and column), or nested too deeply.
    """
    where = label or str(path)
    try:
        raw = read_capped(
            path, MAX_FLOW_BYTES, what="the flow file", where=where, error=FlowFileError
        )
    except IsADirectoryError:
        raise FlowFileError(f"{where}: the flow file is not a regular file") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise FlowFileError(f"{where}: the flow file cannot be read (UnicodeDecodeError)") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise FlowFileError(
            f"{where}: the flow file is not JSON: malformed JSON at line {exc.lineno} "
            f"column {exc.colno}: {exc.msg}"
        ) from None
    except RecursionError:
        raise FlowFileError(f"{where}: the flow file is nested too deeply") from None


def load_flow_file(path: str | Path) -> FlowGraph:
    """Read and validate an exported flow JSON file.

    Returns:
        The parsed :class:`FlowGraph`.

    Raises:
        FlowFileError: the file cannot be read, is not JSON, or is not a valid graph; the message
            names the file (and the line and column of a JSON syntax error).
    """
    try:
        data = read_flow_file(path)
    except FileNotFoundError:
        raise FlowFileError(f"{path}: no such flow file") from None
    return parse_flow(data, str(path))
