"""A whole batch answered at once, column by column, where the provider allows it.

A provider that answers text without I/O and can answer many prompts in one go (offline: its
answer is the prompt; see :meth:`~flownb.providers.base.Provider.texts_inline`) needs no call,
generation or result per row: each node's prompts are rendered for the whole batch from the
variables' columns, answered in one call, and the outputs assembled as columns. The answers are
exactly those of the row-by-row path; :func:`answer_columns` says ``None`` whenever that path is
needed instead (a node reading another node, an image node, a prompt over the provider's limit,
tracing on), and the caller then runs the batch row by row.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..infra import tracing

if TYPE_CHECKING:
    from .engine import Engine

__all__ = ["Answered", "answer_columns"]


@dataclass(slots=True)
class Answered:
    """A batch answered as columns (each list one value per row, in row order).

    Attributes:
        outputs: output name -> its values (the first output node of a name, as a row's
            result keeps it).
        trace: generation node name -> its output (see :attr:`RunResult.trace`).
        model: the model that answered every call.
        seconds: the time the batch took here.
    """

    outputs: dict[str, list[str]]
    trace: dict[str, list[str]]
    model: str | None
    seconds: float


def answer_columns(
    engine: Engine, columns: Mapping[str, Sequence[str]], rows: int
) -> Answered | None:
    """Return the answers of ``engine``'s plan for each of ``rows`` rows of ``columns``
    (variable -> one string per row, every variable the flow reads), or ``None`` when the
    batch must run row by row (see the module docstring). Nothing is reported or logged here.

    Raises:
        KeyError: ``columns`` lacks a variable a prompt uses (the caller validated them).
    """
    started = time.perf_counter()
    plan, provider = engine.plan, engine.provider
    if not provider.inline or plan.chained or tracing.tracer() is not None:
        return None
    texts: list[list[str]] = [[] for _ in plan.steps]  # by step index
    # The longest value of each variable bounds every prompt's length: measured once here,
    # each prompt is measured only when a bound is over its limit.
    longest = {name: max(map(len, column), default=0) for name, column in columns.items()}
    model: str | None = None
    for step in plan.steps:
        if step.kind != "text":
            return None
        node = engine.nodes[step.index]
        prompts = node.render_columns(columns, rows)
        # A prompt over the limit fails its row: the row-by-row path reports it, naming it.
        limit = engine.limits[step.index]
        bound = step.template.length_of(longest)  # the longest values in every slot
        if bound > limit and prompts and max(map(len, prompts)) > limit:
            return None
        answer = provider.texts_inline(node.call(""), prompts)
        if answer is None:
            return None
        texts[step.index], model = answer
    outputs: dict[str, list[str]] = {}
    for name, srcs in plan.output_sources:
        if name in outputs:
            continue
        parts = [texts[ref] if kind == "step" else columns[ref] for kind, ref in srcs]
        if len(parts) == 1:
            outputs[name] = list(parts[0])
        else:  # several nodes feed the output: their texts joined as a row's result joins them
            outputs[name] = (
                list(map("\n\n".join, zip(*parts, strict=True))) if parts else [""] * rows
            )
    trace = dict(zip(plan.trace_names, texts, strict=True))
    return Answered(outputs, trace, model, time.perf_counter() - started)
