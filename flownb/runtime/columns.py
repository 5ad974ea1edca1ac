"""A whole batch answered at once, column by column, where the provider allows it.

A provider that answers text without I/O and can answer many prompts in one go (offline: its
answer is the prompt; see :meth:`~flownb.providers.base.Provider.texts_inline`) needs no call,
generation or result per row: each node's prompts are rendered from the variables' columns,
answered in one call, and the outputs assembled as columns. The answers are exactly those of the
row-by-row path; :func:`column_run` says ``None`` whenever that path is needed instead (a node
reading another node, an image node, a prompt that could be over the provider's limit, tracing
on), and the caller then runs the batch row by row.

What may run this way is decided by the provider, the plan and the data alone, never by what
watches the run: the batch is answered a chunk of rows at a time (:func:`chunk_rows`), so a
progress bar, a cost meter, a live view and the run log all advance chunk by chunk.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..infra import tracing
from .logrows import inline_tail

if TYPE_CHECKING:
    from .engine import Engine

__all__ = ["CHUNK_MAX", "CHUNK_MIN", "Answered", "ColumnRun", "chunk_rows", "column_run"]

# The rows of one chunk: about a twentieth of the batch (a bar moves in steps of 5%), never
# fewer than CHUNK_MIN (the fixed cost of a chunk stays small beside its rows) nor more than
# CHUNK_MAX (a live view shows rows at least every 50,000, and a chunk's memory stays bounded).
CHUNK_MIN = 1_000
CHUNK_MAX = 50_000


def chunk_rows(rows: int) -> int:
    """Return how many rows a chunk of a ``rows``-row batch holds (see :data:`CHUNK_MIN`)."""
    return max(CHUNK_MIN, min(CHUNK_MAX, -(-rows // 20)))


@dataclass(slots=True)
class Answered:
    """Rows answered as columns (each list one value per row, in row order).

    Attributes:
        outputs: output name -> its values (the first output node of a name, as a row's
            result keeps it).
        trace: generation node name -> its output (see :attr:`RunResult.trace`).
        model: the model that answered every call.
        seconds: the time the rows took here.
        inputs: variable -> its values in these rows (what the rows were given).
        start: the index of the first of these rows in the batch.
        rows: how many rows these are.
        priced: whether their calls' price is known (the offline provider's: free; another
            inline provider's is unknown), as the run log says.
    """

    outputs: dict[str, list[str]]
    trace: dict[str, list[str]]
    model: str | None
    seconds: float
    inputs: Mapping[str, Sequence[str]]
    start: int
    rows: int
    priced: bool


class ColumnRun:
    """A batch that may be answered at once (made by :func:`column_run`): iterate it for each
    chunk's :class:`Answered`, in row order."""

    def __init__(self, engine: Engine, columns: Mapping[str, Sequence[str]], rows: int) -> None:
        self.engine = engine
        self.columns = columns
        self.rows = rows
        self.chunk = chunk_rows(rows)
        self.priced = inline_tail(engine.provider.name)[6] is not None  # what the log says

    def __iter__(self) -> Iterator[Answered]:
        rows, columns = self.rows, self.columns
        for start in range(0, rows, self.chunk):
            end = min(rows, start + self.chunk)
            part = (
                columns
                if start == 0 and end == rows
                else {name: column[start:end] for name, column in columns.items()}
            )
            yield self._answer(part, start, end - start)

    def _answer(self, columns: Mapping[str, Sequence[str]], start: int, rows: int) -> Answered:
        started = time.perf_counter()
        engine = self.engine
        plan, provider = engine.plan, engine.provider
        texts: list[list[str]] = [[] for _ in plan.steps]  # by step index
        model: str | None = None
        for step in plan.steps:
            node = engine.nodes[step.index]  # what a call of this node is (providers.callplan)
            prompts = node.render_columns(columns, rows)
            answer = provider.texts_inline(node.call(""), prompts)
            if answer is None:  # checked by column_run: a provider that changed its mind
                raise RuntimeError(f"{provider.name} stopped answering text in bulk")
            texts[step.index], model = answer
        outputs: dict[str, list[str]] = {}
        for name, srcs in plan.output_sources:
            if name in outputs:
                continue
            parts = [texts[ref] if kind == "step" else columns[ref] for kind, ref in srcs]
            if len(parts) == 1:
                outputs[name] = list(parts[0])
            else:  # several nodes feed the output: their texts joined as a row's result does
                outputs[name] = (
                    list(map("\n\n".join, zip(*parts, strict=True))) if parts else [""] * rows
                )
        trace = dict(zip(plan.trace_names, texts, strict=True))
        seconds = time.perf_counter() - started
        return Answered(outputs, trace, model, seconds, columns, start, rows, self.priced)


def column_run(engine: Engine, columns: Mapping[str, Sequence[str]], rows: int) -> ColumnRun | None:
    """Return how ``engine``'s plan answers each of ``rows`` rows of ``columns`` (variable ->
    one string per row, every variable the flow reads) at once, or ``None`` when the batch must
    run row by row (see the module docstring). Nothing runs, is reported or is logged here.

    Raises:
        KeyError: ``columns`` lacks a variable a prompt uses (the caller validated them).
    """
    plan, provider = engine.plan, engine.provider
    if not provider.inline or plan.chained or tracing.tracer() is not None:
        return None
    # The longest value of each variable bounds every prompt's length: a batch where some
    # prompt could be over its limit runs row by row, where that row fails naming it.
    longest = {name: max(map(len, column), default=0) for name, column in columns.items()}
    for step in plan.steps:
        if step.kind != "text" or step.template.length_of(longest) > engine.limits[step.index]:
            return None
        if provider.texts_inline(engine.nodes[step.index].call(""), []) is None:
            return None
    return ColumnRun(engine, columns, rows)
