"""A flow's plan, computed once per flow (:class:`Plan`): the variables and outputs in node
order, and the generation nodes that feed an output (only those run) as :class:`Step` s, grouped
into levels so that independent nodes of one run execute concurrently; what each output joins;
and the one-line problem of a prompt over its provider's limit (:func:`prompt_problem`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import Problem
from ..flowfile.model import ActionNode, FlowGraph, ImageNode, OutputNode, VariableNode
from ..flowfile.template import Template
from ..flowfile.validate import VariableSpec
from ..providers.base import Kind, Provider
from ..providers.callplan import NodeCalls, node_calls

__all__ = ["Plan", "Step", "prompt_problem", "step_calls"]


@dataclass(frozen=True, slots=True)
class Step:
    """One generation node that runs: where its prompt's values come from and what it calls."""

    index: int
    node_id: str
    name: str
    kind: Kind
    template: Template
    params: Mapping[str, Any]
    upstream: tuple[int, ...]  # indices of steps whose outputs this prompt may use
    system: str | None = None  # the node's system message (flow.with_system)


class Plan:
    """What running a flow means: which nodes run, in which order, and what each output joins."""

    def __init__(self, graph: FlowGraph) -> None:
        self.graph = graph  # what a run's picture draws (RunResult.to_svg)
        nodes = {n.id: n for n in graph.nodes}
        var_nodes = [n for n in graph.nodes if isinstance(n, VariableNode)]
        self.variables: tuple[str, ...] = tuple(
            dict.fromkeys(n.data.variable.label for n in var_nodes)
        )
        defaults: dict[str, str] = {}
        for n in var_nodes:
            defaults.setdefault(n.data.variable.label, n.data.variable.value)
        self.defaults = defaults
        out_nodes = [n for n in graph.nodes if isinstance(n, OutputNode)]
        self.outputs: tuple[str, ...] = tuple(n.data.name for n in out_nodes)

        incoming: dict[str, list[str]] = {n: [] for n in nodes}
        for edge in graph.edges:
            incoming[edge.target].append(edge.source)

        needed = _needed(nodes, incoming, out_nodes)
        order, depth = _ordered(graph, needed, incoming)
        index = {node_id: i for i, node_id in enumerate(order)}
        steps = _steps(graph, order, needed, incoming, index, self.variables)
        self.steps: tuple[Step, ...] = tuple(steps)
        self.trace_names: tuple[str, ...] = _trace_names(steps)
        levels: dict[int, list[Step]] = {}
        for step in steps:
            levels.setdefault(depth[step.node_id], []).append(step)
        self.levels: tuple[tuple[Step, ...], ...] = tuple(tuple(levels[d]) for d in sorted(levels))
        self.chained = any(step.upstream for step in steps)

        sources, kinds = _output_sources(nodes, incoming, out_nodes, index, steps)
        self.output_sources = tuple(sources)
        self.direct: tuple[tuple[str, int], ...] | None = _direct(sources)
        self.output_kinds: Mapping[str, str] = kinds
        self.spec = VariableSpec(self.variables)
        # The image nodes that run, by name (else id): what a provider or endpoint without
        # images refuses at load.
        self.image_nodes = [s.name or s.node_id for s in steps if s.kind == "image"]


def step_calls(provider: Provider, step: Step) -> NodeCalls:
    """Return what ``step``'s calls with ``provider`` are (prompt, cache key, prices): the one
    author of them, :func:`flownb.providers.callplan.node_calls`, handed the step's node."""
    return node_calls(provider, step.kind, step.params, step.system, step.node_id, step.template)


def _needed(
    nodes: Mapping[str, Any], incoming: Mapping[str, list[str]], out_nodes: list[OutputNode]
) -> set[str]:
    """Return the generation nodes an output depends on (directly or through other nodes):
    only these run."""
    needed: set[str] = set()
    stack = [src for o in out_nodes for src in incoming[o.id]]
    while stack:
        node_id = stack.pop()
        if node_id not in needed and isinstance(nodes[node_id], ActionNode | ImageNode):
            needed.add(node_id)
            stack.extend(incoming[node_id])
    return needed


def _ordered(
    graph: FlowGraph, needed: set[str], incoming: Mapping[str, list[str]]
) -> tuple[list[str], dict[str, int]]:
    """Return the needed nodes in run order (by depth, export order within a level) and each
    one's depth: the longest chain of needed generation nodes above it."""
    # Iterative: flows can be deep. The graph is acyclic: parse_flow refused cycles.
    order = [n.id for n in graph.nodes if n.id in needed]
    ups = {n: [u for u in incoming[n] if u in needed] for n in order}
    depth: dict[str, int] = {}
    for root in order:
        stack = [root]
        while stack:
            node_id = stack[-1]
            if node_id in depth:
                stack.pop()
                continue
            todo = [u for u in ups[node_id] if u not in depth]
            if todo:
                stack.extend(todo)
            else:
                depth[node_id] = 1 + max((depth[u] for u in ups[node_id]), default=-1)
                stack.pop()
    order.sort(key=depth.__getitem__)  # stable: export order kept within a level
    return order, depth


def _steps(
    graph: FlowGraph,
    order: list[str],
    needed: set[str],
    incoming: Mapping[str, list[str]],
    index: Mapping[str, int],
    variables: tuple[str, ...],
) -> list[Step]:
    """Return one :class:`Step` per needed generation node, in run order."""
    generators = {
        n.id: n for n in graph.nodes if n.id in needed and isinstance(n, ActionNode | ImageNode)
    }
    steps = []
    for i, node_id in enumerate(order):
        node = generators[node_id]
        upstream = tuple(index[u] for u in incoming[node_id] if u in needed)
        labels = [*variables, *(generators[order[u]].data.name for u in upstream)]
        steps.append(
            Step(
                index=i,
                node_id=node_id,
                name=node.data.name,
                kind="image" if isinstance(node, ImageNode) else "text",
                template=Template(node.data.prompt, labels),
                params=node.data.sent_params(),
                upstream=upstream,
                system=node.data.system or None,
            )
        )
    return steps


def _trace_names(steps: list[Step]) -> tuple[str, ...]:
    """Return the key of each step's output in ``RunResult.trace``: its node name (its id when
    the name is empty or shared by another running node)."""
    counts: dict[str, int] = {}
    for step in steps:
        counts[step.name] = counts.get(step.name, 0) + 1
    return tuple(
        s.name if s.name and counts[s.name] == 1 else f"{s.name or 'node'} [{s.node_id}]"
        for s in steps
    )


def _output_sources(
    nodes: Mapping[str, Any],
    incoming: Mapping[str, list[str]],
    out_nodes: list[OutputNode],
    index: Mapping[str, int],
    steps: list[Step],
) -> tuple[list[tuple[str, tuple[tuple[str, Any], ...]]], dict[str, str]]:
    """Return what each output joins, in edge order (``("var", label)`` or ``("step", index)``),
    and each output's kind (an image when every source is an image step)."""
    sources: list[tuple[str, tuple[tuple[str, Any], ...]]] = []
    kinds: dict[str, str] = {}
    for o in out_nodes:
        srcs: list[tuple[str, Any]] = []
        for src_id in incoming[o.id]:
            src = nodes[src_id]
            if isinstance(src, VariableNode):
                srcs.append(("var", src.data.variable.label))
            else:
                srcs.append(("step", index[src_id]))
        sources.append((o.data.name, tuple(srcs)))
        is_image = bool(srcs) and all(
            kind == "step" and steps[ref].kind == "image" for kind, ref in srcs
        )
        kinds.setdefault(o.data.name, "image" if is_image else "text")
    return sources, kinds


def _direct(
    sources: list[tuple[str, tuple[tuple[str, Any], ...]]],
) -> tuple[tuple[str, int], ...] | None:
    """Return ``(output, step index)`` pairs when every output is fed by exactly one node and
    names are unique (the usual export: a result is then one dict comprehension), else None."""
    names = [name for name, _ in sources]
    if len(set(names)) == len(names) and all(
        len(srcs) == 1 and srcs[0][0] == "step" for _, srcs in sources
    ):
        return tuple((name, srcs[0][1]) for name, srcs in sources)
    return None


def _step_outputs(plan: Plan) -> tuple[tuple[str, ...], ...]:
    """Return, per step, the names of the outputs it feeds directly (for stream events)."""
    found: list[list[str]] = [[] for _ in plan.steps]
    for name, srcs in plan.output_sources:
        for kind, ref in srcs:
            if kind == "step" and name not in found[ref]:
                found[ref].append(name)
    return tuple(tuple(names) for names in found)


def prompt_problem(
    step: Step, size: int, limit: int, values: Mapping[str, str], index: int | None = None
) -> Problem:
    """Return the problem of ``step``'s prompt being ``size`` characters, over ``limit``: it
    names the node, both numbers and the longest variable the prompt uses (never a value)."""
    used = [name for name in step.template.names if name in values]
    longest = max(used, key=lambda name: len(values[name]), default=None)
    where = "" if index is None else f"element {index}: "
    blame = (
        f" (variable {longest!r} is {len(values[longest]):,} characters)"
        if longest is not None
        else ""
    )
    return Problem(
        "prompt_too_long",
        f"{where}the {step.kind} prompt of node {step.name or step.node_id!r} would be "
        f"{size:,} characters, over the limit of {limit:,} for {step.kind} prompts{blame}; "
        "shorten the variable values",
        index,
        longest,
    )
