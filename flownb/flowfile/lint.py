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
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

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
    generators = [n for n in graph.nodes if isinstance(n, ActionNode | ImageNode)]

    errors: list[Finding] = []
    warnings: list[Finding] = []
    if not outputs:
        errors.append(
            Finding("error", "no_outputs", "the flow has no output node: a run returns nothing")
        )
    used: set[str] = set()
    for node in generators:
        where = _node_name(node)
        prompt = node.data.prompt
        if not prompt.strip():
            errors.append(Finding("error", "empty_prompt", f"{where} has an empty prompt"))
            continue
        # A prompt may also name a generation node feeding it (the engine's chaining).
        upstream = [
            src.data.name
            for src_id in incoming[node.id]
            if isinstance(src := nodes[src_id], ActionNode | ImageNode) and src.data.name
        ]
        known = list(dict.fromkeys([*variables, *upstream]))
        used.update(v for v in variables if f"{{{v}}}" in prompt)
        warnings.extend(_unknown_labels(prompt, known, where))
    for out in outputs:
        feeders = incoming[out.id]
        used.update(
            n.data.variable.label for f in feeders if isinstance(n := nodes[f], VariableNode)
        )
        if not feeders:
            warnings.append(
                Finding(
                    "warning",
                    "unfed_output",
                    f"output {out.data.name!r} is fed by no node: it is always empty",
                )
            )
    for name in variables:
        if name not in used:
            warnings.append(
                Finding(
                    "warning",
                    "unused_variable",
                    f"variable {name!r} is used by no prompt or output: a run must supply it "
                    "and ignores it",
                )
            )
    return errors + warnings


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
