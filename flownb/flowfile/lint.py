"""Flow lint: mistakes a valid flow graph can still hold (``flownb check``, and warnings on load).

What is checked, with the level reported:

- **error** ``no_outputs``: the flow has no output node, so a run returns nothing.
- **error** ``empty_prompt``: a generation node's prompt is empty (the model gets no text).
- **warning** ``unknown_label``: a ``{label}`` in a prompt that names no variable (nor a node
  feeding that prompt). Substitution leaves it as written (DESIGN.md section 1), which is right
  for literal braces, so this is only a warning; it says which name was probably meant
  (``{topc}``: did you mean ``{topic}``?). Braces holding quotes or a line break (JSON, code) and
  text that neither looks like a name nor is close to one are not reported.
- **warning** ``unused_variable``: a variable that no prompt uses and no output shows: a run
  must still supply it, and ignores it.
- **warning** ``unfed_output``: an output node no edge feeds; it is always ``""``.

A flow with no nodes at all is not linted: :func:`flownb.flowfile.model.parse_flow` refuses it.
"""

from __future__ import annotations

import difflib
import os
import re
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from ..show.notices import warn
from .model import ActionNode, FlowGraph, ImageNode, OutputNode, VariableNode

__all__ = ["Finding", "lint", "warn_on_load"]

# Text in braces that could be meant as a label: no nested braces, quotes or line breaks.
_BRACED = re.compile(r"\{([^{}\"\n]{1,100})\}")
# What a label usually looks like: word characters, with inner spaces, dots or dashes.
_NAME_LIKE = re.compile(r"[^\W\d]\w*(?:[ .\-]\w+)*")


@dataclass(frozen=True, slots=True)
class Finding:
    """One mistake found in a flow: its level, a stable code, and a one-line message."""

    level: Literal["error", "warning"]
    code: str
    message: str

    def __str__(self) -> str:
        return f"{self.level}: {self.message}"


def _node_name(node: ActionNode | ImageNode) -> str:
    return f"node {node.data.name!r}" if node.data.name else f"node {node.id!r}"


def _unknown_labels(prompt: str, known: list[str], where: str) -> Iterable[Finding]:
    """Yield a finding per distinct ``{text}`` in ``prompt`` that looks meant as a label."""
    seen: set[str] = set()
    for match in _BRACED.finditer(prompt):
        text = match.group(1)
        if text in known or text in seen:
            continue
        seen.add(text)
        stripped = text.strip()
        if stripped != text and stripped in known:
            yield Finding(
                "warning",
                "unknown_label",
                f"{where}: {{{text}}} has spaces inside the braces, so it is left as written; "
                f"write {{{stripped}}} to use the variable",
            )
            continue
        close = difflib.get_close_matches(text, known, n=1)
        if close:
            hint = f"did you mean {{{close[0]}}}?"
        elif _NAME_LIKE.fullmatch(text):
            hint = f"the variables: {', '.join(known) or 'none'}"
        else:
            continue  # literal braces, not a label
        yield Finding(
            "warning",
            "unknown_label",
            f"{where}: {{{text}}} names no variable and is left as written; {hint}",
        )


def lint(graph: FlowGraph) -> list[Finding]:
    """Return every mistake found in ``graph``, errors first, each in node order."""
    nodes = {n.id: n for n in graph.nodes}
    incoming: dict[str, list[str]] = {n: [] for n in nodes}
    for edge in graph.edges:
        incoming[edge.target].append(edge.source)
    variables = list(
        dict.fromkeys(n.data.variable.label for n in graph.nodes if isinstance(n, VariableNode))
    )
    outputs = [n for n in graph.nodes if isinstance(n, OutputNode)]
    found: list[Finding] = []
    if not outputs:
        found.append(
            Finding("error", "no_outputs", "the flow has no output node: a run returns nothing")
        )
    used: set[str] = set()  # the variables a prompt or an output reads
    for node in graph.nodes:
        if isinstance(node, ActionNode | ImageNode):
            found += _prompt_findings(node, nodes, incoming[node.id], variables, used)
    for out in outputs:
        found += _output_findings(out, nodes, incoming[out.id], used)
    found += (
        Finding(
            "warning",
            "unused_variable",
            f"variable {name!r} is used by no prompt or output: a run must supply it "
            "and ignores it",
        )
        for name in variables
        if name not in used
    )
    # Errors first; within each level, the order they were found in (node order).
    return [f for f in found if f.level == "error"] + [f for f in found if f.level != "error"]


def _prompt_findings(
    node: ActionNode | ImageNode,
    nodes: Mapping[str, Any],
    feeders: list[str],
    variables: list[str],
    used: set[str],
) -> list[Finding]:
    """Return what is wrong with a generation node's prompt (empty, or naming no variable or
    node feeding it), adding the variables it reads to ``used``."""
    where = _node_name(node)
    prompt = node.data.prompt
    if not prompt.strip():
        return [Finding("error", "empty_prompt", f"{where} has an empty prompt")]
    # A prompt may also name a generation node feeding it (the engine's chaining).
    upstream = [
        src.data.name
        for src_id in feeders
        if isinstance(src := nodes[src_id], ActionNode | ImageNode) and src.data.name
    ]
    known = list(dict.fromkeys([*variables, *upstream]))
    used.update(v for v in variables if f"{{{v}}}" in prompt)
    return list(_unknown_labels(prompt, known, where))


def _output_findings(
    out: OutputNode, nodes: Mapping[str, Any], feeders: list[str], used: set[str]
) -> list[Finding]:
    """Return what is wrong with an output (fed by no node), adding the variables feeding it
    to ``used``."""
    used.update(n.data.variable.label for f in feeders if isinstance(n := nodes[f], VariableNode))
    if feeders:
        return []
    return [
        Finding(
            "warning",
            "unfed_output",
            f"output {out.data.name!r} is fed by no node: it is always empty",
        )
    ]


# (source, message) pairs already warned about in this process: a notebook re-running a cell
# that loads the same file sees each problem once.
_warned: set[tuple[str, str]] = set()
_warned_lock = threading.Lock()


def warn_on_load(graph: FlowGraph, source: str) -> None:
    """Warn about each of ``graph``'s lint findings once per flow file in this process (the
    file ``source`` names, however it is spelled), each as one ``source: message`` (the flow
    loaded, so no finding is an error here; ``flownb check`` grades them)."""
    key = os.path.realpath(source)
    for finding in lint(graph):
        with _warned_lock:
            if (key, str(finding)) in _warned:
                continue
            _warned.add((key, str(finding)))
        warn(f"{source}: {finding.message}")
