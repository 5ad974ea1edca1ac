"""DataFrame in, DataFrame out: each row one batch element.

Numbers become strings (``3`` -> ``"3"``; a float that holds a whole number in a column pandas
made float only because of gaps, such as ``3.0``, becomes ``"3"``); NaN/None is refused with an
error naming the rows unless ``fill`` says what to use. Outputs are appended as columns to a copy
of the frame (index and input columns kept). Rows that fail at run time get a message in the
error column and the rest still run. Ctrl-C stops the batch and returns what finished, with the
unfinished rows marked, so nothing paid for is lost (and with the cache, re-running is free):
the calls already sent finish in the background, into the cache and the run log.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from itertools import repeat
from typing import TYPE_CHECKING, Any, Unpack, cast, overload

from ..errors import ConfigError, InputError, Problem, one_line
from ..flowfile.inputs import PYTHON, Spelling, to_text
from ..flowfile.validate import unknown_advice
from ..providers.inflight import calls_in_flight
from ..show.display import IMAGE_COLUMNS_ATTR
from ..show.frame_views import in_notebook
from ..show.notices import warn
from .kinds import takes_any_frame
from .options import FrameOptions

if TYPE_CHECKING:
    import pandas as pd

    from ..core.flow import FlowCore
    from ..runtime.columns import Answered
    from ..show.meter import CostMeter

__all__ = ["INTERRUPTED", "ColumnRows", "rows_to_variables", "run_dataframe"]

INTERRUPTED = "interrupted before this row finished; run again to complete it"
# The column naming, per row, the nodes whose text stopped at the token limit (only present
# when some did).
TRUNCATED = "truncated"
# The dtype of every text column a run adds: pandas' string dtype (missing cells are <NA>),
# about half the memory of object columns of str (pyarrow storage, where pyarrow is installed).
TEXT = "string"


def rows_to_variables(
    df: pd.DataFrame,
    variables: list[str],
    columns: Mapping[str, str] | None = None,
    fill: str | None = None,
    *,
    spelling: Spelling = PYTHON,
) -> ColumnRows:
    """Return the rows of ``df`` as a sequence of variables mappings (made as they are read).

    ``columns`` maps a variable to the column that holds it, where the names differ; cells
    become text with :func:`flownb.flowfile.inputs.to_text`. ``spelling`` words the advice in
    errors for
    the surface the user is on (``columns=``/``fill=`` in Python, ``--map``/``--fill`` on the
    command line).

    Raises:
        InputError: a variable has no column, a mapping names an unknown variable or column, or
            cells are missing (NaN/None) and no ``fill`` is given; the message names the rows.
    """
    mapping = dict(columns or {})
    _check_columns(df, variables, mapping, spelling)
    source = {var: mapping.get(var, var) for var in variables}
    converted = {var: _texts(df[col].tolist(), fill) for var, col in source.items()}
    problems = [
        problem
        for var, cells in converted.items()
        if None in cells  # the common case, checked in C: no row to name
        and (problem := _empty_cells(df.index, source[var], var, cells)) is not None
    ]
    if problems:
        raise InputError(problems, hint=f"{spelling.fill} to run them anyway")
    return ColumnRows(cast("dict[str, list[str]]", converted), len(df))  # no None left


def _check_columns(
    df: pd.DataFrame, variables: list[str], mapping: Mapping[str, str], spelling: Spelling
) -> None:
    """Check that every variable has a column and that ``mapping`` names known variables and
    columns.

    Raises:
        InputError: every problem found, with the data's columns when a variable has none.
    """
    problems = [
        problem
        for var, col in mapping.items()
        if (problem := _mapping_problem(df, variables, var, col, spelling)) is not None
    ]
    unmapped = [var for var in variables if var not in mapping and var not in df.columns]
    problems += [
        Problem("missing_variable", f"no column for variable {var!r}", variable=var)
        for var in unmapped
    ]
    if not problems:
        return
    hint = None
    if unmapped:
        hint = (
            f"the data's columns: "
            f"{', '.join(map(repr, map(str, df.columns))) or 'none'}; "
            f"map one with {spelling.map_example(unmapped[0])}"
        )
    raise InputError(problems, hint=hint)


def _mapping_problem(
    df: pd.DataFrame, variables: list[str], var: str, col: str, spelling: Spelling
) -> Problem | None:
    """Return what is wrong with mapping variable ``var`` to column ``col``, or ``None``."""
    if var not in variables:
        return Problem(
            "unknown_variable",
            f"{spelling.map_option} maps unknown variable {var!r} "
            f"({unknown_advice(str(var), variables)})",
            variable=var,
        )
    if col not in df.columns:
        return Problem(
            "missing_variable",
            f"{spelling.map_option} maps variable {var!r} to column {col!r}, which the data lacks",
            variable=var,
        )
    return None


def _empty_cells(index: pd.Index, col: str, var: str, cells: list[str | None]) -> Problem | None:
    """Return the problem naming the rows (by ``index``) where ``cells`` of column ``col`` are
    missing, or ``None`` when none is."""
    missing = [index[i] for i, v in enumerate(cells) if v is None]
    if not missing:
        return None
    shown = ", ".join(map(str, missing[:10])) + (" ..." if len(missing) > 10 else "")
    return Problem(
        "missing_variable",
        f"column {col!r} (variable {var!r}) is empty (NaN/None) in "
        f"{len(missing)} row{'s' * (len(missing) > 1)}, index {shown}",
        variable=var,
    )


def _texts(cells: list[Any], fill: str | None) -> list[str | None]:
    """Return ``cells`` as :func:`~flownb.flowfile.inputs.to_text` makes them, a missing one
    as ``fill`` (``None`` when not given)."""
    if set(map(type, cells)) <= {str}:  # a column of text: nothing to convert, nothing missing
        return cells
    return [fill if (text := to_text(v)) is None else text for v in cells]


class ColumnRows(Sequence[dict[str, str]]):
    """Rows of string columns, each made into a variables dict only when the engine reaches it,
    so a 100,000-row batch does not hold 100,000 dicts at once."""

    def __init__(self, columns: dict[str, list[str]], length: int) -> None:
        self._names = tuple(columns)
        self._columns = tuple(columns.values())
        self._length = length

    def __len__(self) -> int:
        return self._length

    @property
    def columns(self) -> dict[str, list[str]]:
        """Variable -> its value in every row, in row order (the lists themselves, not copies:
        read them only)."""
        return dict(zip(self._names, self._columns, strict=True))

    @overload
    def __getitem__(self, i: int) -> dict[str, str]: ...

    @overload
    def __getitem__(self, i: slice) -> list[dict[str, str]]: ...

    def __getitem__(self, i: int | slice) -> dict[str, str] | list[dict[str, str]]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self._length))]
        if not -self._length <= i < self._length:
            raise IndexError(i)
        return {name: col[i] for name, col in zip(self._names, self._columns, strict=True)}

    def __iter__(self) -> Iterator[dict[str, str]]:
        names = self._names
        for row in zip(*self._columns, strict=True) if names else ((),) * self._length:
            yield dict(zip(names, row, strict=True))


def _output_columns(df: pd.DataFrame, outputs: list[str]) -> dict[str, str]:
    """Map each output to its column name; an output named like an input column gets a suffix."""
    names: dict[str, str] = {}
    for out in dict.fromkeys(outputs):
        col = out
        while col in df.columns:
            col = f"{col}_output"
        if col != out:
            warn(f"output {out!r} is also an input column; writing it to {col!r}")
        names[out] = col
    return names


@takes_any_frame
def run_dataframe(
    flow: FlowCore,
    df: pd.DataFrame,
    columns: Mapping[str, str] | None = None,
    *,
    spelling: Spelling = PYTHON,
    meter: CostMeter | None = None,
    **options: Unpack[FrameOptions],
) -> pd.DataFrame:
    """Run ``flow`` once per row of ``df`` (pandas, or polars: the result is the kind given;
    see :mod:`flownb.frames.kinds`) with ``options`` (``fill``, ``progress``, ``concurrency``,
    ``error_column``, ``trace``: see :class:`~flownb.frames.options.FrameOptions`). ``spelling``
    words
    input errors for the surface calling (see :func:`rows_to_variables`); ``meter`` counts each
    finished row's cost.

    ``trace=True`` adds one column per generation node that runs (its output, intermediate
    nodes included; see :attr:`RunResult.trace`), named like the node (`` (node)`` appended
    where that name is already a column).

    Returns:
        A copy of ``df`` with a text column (pandas' ``string`` dtype; polars ``String``)
        per output (missing, ``<NA>``, where the row failed; a row where
        one node failed keeps the outputs of the others) and, when some rows failed or were
        interrupted, ``error_column`` holding each such row's message; when some answers
        stopped at the token limit, a ``truncated`` column naming those nodes per row. With
        ``fill``, the empty cells of the variables' columns hold ``fill`` (what the flow got).

    Raises:
        TypeError: ``df`` is not a pandas or polars DataFrame (or is a lazy one).
        InputError: columns missing or cells empty without ``fill`` (see
            :func:`rows_to_variables`).
        ConfigError: ``trace=True`` for a flow that does not report its nodes (a remote flow).
    """
    import pandas as pd

    fill, concurrency = options.get("fill"), options.get("concurrency")
    progress, trace = options.get("progress", True), options.get("trace", False)
    error_column = options.get("error_column", "error")
    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"run_dataframe takes a pandas DataFrame, got {type(df).__name__}")
    batch = rows_to_variables(df, flow.variables, columns, fill, spelling=spelling)
    out_cols = _output_columns(df, flow.outputs)
    trace_cols = _trace_columns(flow, [*df.columns, *out_cols.values()]) if trace else {}
    got = _Filled(len(batch), out_cols, trace_cols, meter)
    interrupted = False
    # In a notebook's live view, the returned frame's table is what the view ends as.
    slot = flow.frame_slot(df.index) if progress else None
    try:
        # A provider that answers a whole batch at once (offline) is asked so, a chunk of rows
        # at a time: no call, result or report per row, whatever watches the run (the bar,
        # the meter and the live view advance by chunks).
        chunks = _in_bulk(flow, batch)
        if chunks is not None:
            for part in _watched(flow, batch, chunks, progress=progress, meter=meter):
                got.take(part)
        else:
            # The rows were made from the frame's columns as strings: no second validation
            # pass. run_each hands the run over before it returns or raises: a row the loop
            # finishes after Ctrl-C (or a form's Stop) cannot change the lists below while
            # they are read.
            flow.run_each(
                batch, got.record, progress=progress, concurrency=concurrency, check=False
            )
    except KeyboardInterrupt:
        interrupted = True
    result = df.copy()
    if fill is not None:
        _show_fill(result, [(columns or {}).get(var, var) for var in flow.variables], fill)
    got.put_in(result, error_column, interrupted=interrupted)
    result.attrs[IMAGE_COLUMNS_ATTR] = _image_columns(flow, out_cols, trace_cols, got.seen)
    in_notebook()  # shown with flownb's views, not pandas' (which typesets "$" as math)
    if slot is not None:
        slot.show(result)
    return result


class _Filled:
    """What a run over ``n`` rows has filled in so far: each output's and traced node's text,
    each row's error and truncated nodes, which rows are done, and the outputs results called
    images; ``meter`` counts each finished row's cost."""

    def __init__(
        self,
        n: int,
        out_cols: Mapping[str, str],
        trace_cols: Mapping[str, str],
        meter: CostMeter | None,
    ) -> None:
        self.n = n
        self.out_cols = out_cols
        self.trace_cols = trace_cols
        self.meter = meter
        self.values: dict[str, list[str | None]] = {out: [None] * n for out in out_cols}
        self.traced: dict[str, list[str | None]] = {node: [None] * n for node in trace_cols}
        self.errors: list[str | None] = [None] * n
        self.truncated: list[str | None] = [None] * n
        self.done = [False] * n
        self.seen: set[str] = set()  # outputs a result called images (a remote flow's say)

    def record(self, i: int, result: Any, exc: BaseException | None) -> None:
        """Take row ``i``'s result or error (the run's ``on_result``)."""
        # The row's values first, then "done": a row is never seen done without its outputs.
        if exc is not None:
            self.errors[i] = one_line(exc, code=True)
            if self.meter is not None:
                self.meter.add_failed(exc)  # what its failed calls were paid (an image lost)
            # A row where one node failed keeps the outputs of the nodes that succeeded.
            result = getattr(exc, "partial", None)
        if result is not None:
            self._fill(i, result)
        self.done[i] = True

    def _fill(self, i: int, result: Any) -> None:
        for out, column in self.values.items():
            column[i] = result.get(out)
        self.seen.update(_images_of(result))
        if self.traced:
            for node, output in result.trace.items():
                self.traced[node][i] = output
        cut = getattr(result, "truncated", ())
        if cut:
            self.truncated[i] = ", ".join(cut)
        if self.meter is not None:
            self.meter.add(result)

    def take(self, part: Answered) -> None:
        """Take a chunk of rows answered at once."""
        start, end = part.start, part.start + part.rows
        for out, column in self.values.items():
            column[start:end] = part.outputs[out]
        for node, column in self.traced.items():
            column[start:end] = part.trace[node]
        self.done[start:end] = [True] * part.rows

    def put_in(self, result: pd.DataFrame, error_column: str, *, interrupted: bool) -> None:
        """Add the columns filled in to ``result``: outputs, traced nodes, and the error and
        truncated columns when some row has one (``interrupted``: the unfinished rows marked)."""
        index, n = result.index, self.n
        for out, col in self.out_cols.items():
            result[col] = _text_column(self.values[out], index)
        for node, col in self.trace_cols.items():
            result[col] = _text_column(self.traced[node], index)
        if interrupted:
            _mark_interrupted(self.errors, self.done, error_column)
        if self.errors.count(None) < n:  # some row has an error (counted in C: no row loop)
            result[error_column] = _text_column(self.errors, index)
        if self.truncated.count(None) < n:
            col = TRUNCATED
            while col in result.columns:
                col = f"{col}_output"
            result[col] = _text_column(self.truncated, index)


def _text_column(values: list[str | None], index: pd.Index) -> pd.Series[Any]:
    """Return ``values`` as a column of pandas' ``string`` dtype (``None``: ``<NA>``) on
    ``index``; with pyarrow storage, handed to pyarrow in one go (half the time pandas' own
    conversion takes, which checks every value first)."""
    import pandas as pd

    if pd.StringDtype().storage == "pyarrow":
        import pyarrow as pa

        array = pd.arrays.ArrowStringArray(pa.array(values, type=pa.large_string()))
        return pd.Series(array, index=index, copy=False)
    return pd.Series(values, index=index, dtype=TEXT)


def _in_bulk(flow: FlowCore, batch: ColumnRows) -> Iterator[Answered] | None:
    """Return ``batch`` answered at once by ``flow``'s runner, a chunk at a time as it is read
    (see :meth:`flownb.runtime.pipeline.Runner.run_columns`), or ``None``: nothing ran, run it
    row by row (a remote flow, or a provider, flow or data that needs that)."""
    runner = getattr(flow, "runner", None)
    run_columns = getattr(runner, "run_columns", None)
    if run_columns is None:
        return None
    chunks: Iterator[Answered] | None = run_columns(batch, batch.columns)
    if chunks is not None:
        flow.say_notes()  # what the row-by-row run would have said
    return chunks


def _watched(
    flow: FlowCore,
    batch: ColumnRows,
    chunks: Iterator[Answered],
    *,
    progress: bool,
    meter: CostMeter | None,
) -> Iterator[Answered]:
    """Yield ``chunks``, moving the run's bar (``progress``: a live view of the rows in a
    notebook, else a progress bar) and ``meter`` by each chunk's rows once it is answered; the
    bar is closed when the chunks end or the run stops."""
    from ..show.meter import attach

    bar: Any = None
    if progress:
        bar = flow.open_bar(batch)
    shown = attach(bar) if bar is not None else None
    try:
        for part in chunks:
            yield part
            for counting in (meter, shown):
                if counting is not None:
                    counting.add_answered(part.rows, priced=part.priced)
            if bar is None:
                continue
            live = getattr(bar, "record", None)
            if live is not None:  # the live view's rows, each as the outputs it got
                names, columns = tuple(part.outputs), tuple(part.outputs.values())
                rows = zip(*columns, strict=True) if columns else repeat((), part.rows)
                for r, row in enumerate(rows, part.start):
                    live(r, dict(zip(names, row, strict=True)), None)
            if shown is not None:
                bar.set_postfix_str(shown.text(), refresh=False)
            bar.update(part.rows)
    finally:
        if bar is not None:
            bar.close()


def _show_fill(result: pd.DataFrame, used: list[str], fill: str) -> None:
    """Put ``fill`` in the empty cells of the ``used`` columns of ``result``: a filled input
    column becomes the text the flow was given, a ``string`` column as the outputs are
    (``fill=""``: empty text, not NaN; a number as the text it was sent as: ``3``, not
    ``3.0``), not a mix of numbers and text. Polars gives ``String`` the same way."""
    for col in dict.fromkeys(used):
        missing = result[col].isna()
        if missing.any():
            cells = result[col].tolist()
            texts = [fill if gap else to_text(v) for v, gap in zip(cells, missing, strict=True)]
            result[col] = _text_column(texts, result.index)


def _mark_interrupted(errors: list[str | None], done: list[bool], error_column: str) -> None:
    """Mark each unfinished row of an interrupted run in ``errors`` and say so, with the calls
    that were in flight and finish in the background (paid for, so kept)."""
    for i, finished in enumerate(done):
        if not finished:
            errors[i] = INTERRUPTED
    sent = calls_in_flight()
    late = (
        f" {sent} call{'s' * (sent != 1)} already sent finish in the background and are "
        "cached, so the next run does not pay for them again."
        if sent
        else ""
    )
    warn(
        f"interrupted: {sum(done)} of {len(done)} rows finished and are kept; the other rows "
        f"are marked in column {error_column!r}. Run again to complete them.{late}"
    )


def _images_of(result: Any) -> list[str]:
    """The outputs of ``result`` that image nodes made (its kinds say)."""
    kinds = getattr(result, "kinds", None) or {}
    return [name for name, kind in kinds.items() if kind == "image"]


def _image_columns(
    flow: FlowCore, out_cols: Mapping[str, str], trace_cols: Mapping[str, str], seen: set[str]
) -> list[str]:
    """Return the columns that hold images: an image node's outputs (as the flow's plan or its
    results say) and traced image nodes; never a text that looks like an image URL."""
    plan = getattr(flow, "plan", None)
    kinds = dict(getattr(plan, "output_kinds", None) or {})
    images = [col for out, col in out_cols.items() if kinds.get(out) == "image" or out in seen]
    image_nodes = set(getattr(plan, "image_nodes", ()))
    return images + [col for node, col in trace_cols.items() if node in image_nodes]


def _trace_columns(flow: FlowCore, taken: Sequence[Any]) -> dict[str, str]:
    """Map each traced node name to its column (`` (node)`` appended on a clash)."""
    plan = getattr(flow, "plan", None)
    if plan is None:
        raise ConfigError(
            f"trace=True needs a local flow; {flow.name!r} runs remotely and reports only outputs"
        )
    return {name: name if name not in taken else f"{name} (node)" for name in plan.trace_names}
