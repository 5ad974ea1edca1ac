"""``flow.run_dataframe(ddf)`` for a Dask DataFrame: the same batch, one partition per task.

The result is lazy: a Dask DataFrame with the pandas path's columns (the input's, then one
text (``string``) column per output) and, unlike the pandas path, **always** the error column
(``<NA>`` where the row succeeded): a Dask DataFrame's columns are fixed before any partition
runs, so the column cannot depend on whether some row fails. The index is kept.

What travels to the workers is a :class:`~flownb.core.spec.FlowSpec` (the flow's JSON and run
configuration, never an API key: workers read ``OPENAI_API_KEY`` from their own environment) and a
:class:`~flownb.frames.dask.limits.ClusterLimits`. Each worker process builds the flow once per
spec and
reuses it for every partition it runs, and its provider calls go through the cluster-wide
``concurrency``, ``rpm`` and ``tpm`` limits.

Faults: when a worker dies, Dask runs its partitions again elsewhere. Workers commit each paid
answer to the call cache as it arrives (no buffering), so with FLOWNB_HOME on a disk every worker
shares, a recomputed partition pays only for calls that had not finished. Each partition logs its
rows under a run id fixed when the graph is built (``<run>-<partition>``), so a recomputed
partition's rows replace the first attempt's in :func:`flownb.runs` instead of adding to them.

Cells are checked per partition, when it runs: a missing (NaN) cell without ``fill`` fails that
partition's task with the pandas path's :class:`InputError`. Missing columns are refused at once.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Unpack

from ...core.flow import FlowCore
from ...core.local import LocalCore, local_of
from ...core.spec import FlowSpec, flow_from_spec
from ...errors import ConfigError
from ...providers.spend import SpendCap, SpendGate
from ...providers.tokens import chain
from ..options import FrameOptions
from ..run import TEXT, _output_columns, rows_to_variables
from ..run import run_dataframe as run_pandas
from .limits import ClusterLimits, hear_cap_lines, say_cap_line, start_meters

if TYPE_CHECKING:
    import dask.dataframe as dd
    import pandas as pd

__all__ = ["PartitionRunner", "run_dataframe"]


class PartitionRunner:
    """The function every partition runs (picklable: a spec, limits and plain options)."""

    def __init__(
        self,
        spec: FlowSpec,
        limits: ClusterLimits,
        columns: Mapping[str, str] | None,
        fill: str | None,
        error_column: str,
        out_cols: Mapping[str, str],
        run: str,
        parts: int = 1,
    ) -> None:
        self.spec = spec
        self.limits = limits
        self.columns = dict(columns) if columns else None
        self.fill = fill
        self.error_column = error_column
        self.out_cols = dict(out_cols)
        self.run = run
        self.parts = parts  # the frame's partitions: a capped run's line follows the last

    def __dask_tokenize__(self) -> str:
        return self.run

    def __call__(self, part: pd.DataFrame, partition_info: dict[str, Any] | None = None) -> Any:
        """Run the flow over one partition; returns it with the output and error columns. The
        last partition of a capped run to end, however it ends, says how much of the cap was
        used (see :func:`~flownb.frames.dask.limits.say_cap_line`)."""
        number = partition_info["number"] if partition_info else 0
        if self.limits.max_spend is None:
            return self._run(part, number)
        with self.limits.gate() as held:  # the run's ledger, whether or not this part buys
            gate: Any = held
            try:
                return self._run(part, number)
            finally:
                say_cap_line(self.limits, gate.ended(number, self.parts))

    def _run(self, part: pd.DataFrame, number: int) -> Any:
        import pandas as pd

        if len(part) == 0:
            return _empty_result(part, self.out_cols, self.error_column)
        flow = flow_from_spec(self.spec, LocalCore.from_spec)
        # Inline (offline) providers make no calls to limit: no cluster primitives for them.
        hold = self.limits.gate() if not flow.provider.inline else contextlib.nullcontext(None)
        with hold as limits:
            gate: Any = limits
            spend = getattr(limits, "spend", None)
            if spend is not None:  # within the run's one cap, after the cluster's limits
                gate = chain(limits, SpendGate(spend, flow.provider))
            view = flow.gated(gate, f"{self.run}-{number}")
            result = run_pandas(
                view,
                part,
                self.columns,
                fill=self.fill,
                progress=False,
                concurrency=self.spec.config.concurrency,
                error_column=self.error_column,
            )
        if self.error_column not in result.columns:
            result[self.error_column] = pd.Series([None] * len(part), index=part.index, dtype=TEXT)
        if flow.runlog is not None:
            # The partition's rows are committed before its frame leaves this worker: the
            # client sees every row in runs() once the frame is back, and a worker killed
            # after answering has lost none of them.
            flow.runlog.sync()
        return result


def _empty_result(part: pd.DataFrame, out_cols: Mapping[str, str], error_column: str) -> Any:
    import pandas as pd

    result = part.copy()
    for col in [*out_cols.values(), error_column]:
        result[col] = pd.Series([], index=part.index[:0], dtype=TEXT)
    return result


def run_dataframe(
    flow: FlowCore,
    ddf: dd.DataFrame,
    columns: Mapping[str, str] | None = None,
    *,
    rpm: float | None = None,
    tpm: float | None = None,
    max_spend: float | None = None,
    **options: Unpack[FrameOptions],
) -> dd.DataFrame:
    """Run ``flow`` once per row of the Dask DataFrame ``ddf``, lazily, one task per partition,
    with ``options`` (see :class:`~flownb.frames.options.FrameOptions`; no progress bar, no trace).

    ``concurrency``, ``rpm`` and ``tpm`` (default: the flow's own) hold across all workers
    together, for all partitions of this result, and so does ``max_spend`` (US dollars): one
    cap for the whole computation (see :mod:`flownb.frames.dask.spend`); the rows it stops are
    marked in ``error_column`` (``spend_cap_reached``), and once the computation's last
    partition ends, a line says how much of the cap was used, as the pandas path's does (on a
    distributed cluster, in the process that called this).

    Returns:
        A lazy Dask DataFrame: ``ddf``'s columns and index, one text (``string``) column
        per output (``<NA>`` where the row failed) and ``error_column`` (``<NA>`` where it
        succeeded).

    Raises:
        TypeError: ``flow`` does not run locally (a remote flow cannot travel to workers).
        InputError: a variable has no column.
        ConfigError: a limit is not positive, the flow's provider cannot be rebuilt by name,
            ``trace=True``, or ``max_spend`` with a call that cannot be priced (nothing runs).
    """
    if options.get("trace"):
        raise ConfigError("trace=True is for pandas frames; a Dask run returns outputs")
    fill, concurrency = options.get("fill"), options.get("concurrency")
    error_column = options.get("error_column", "error")
    local = local_of(flow)
    if local is None:
        raise TypeError(
            f"run_dataframe over a Dask DataFrame needs a local flow (load_flow), got "
            f"{type(flow).__name__}"
        )
    flow = local
    concurrency = concurrency if concurrency is not None else flow.concurrency
    for name, value in (("concurrency", concurrency), ("rpm", rpm), ("tpm", tpm)):
        if value is not None and value <= 0:
            raise ConfigError(f"{name} must be positive, got {value}")
    meta_in = ddf._meta
    rows_to_variables(meta_in, flow.variables, columns, fill)  # missing columns: refused now
    out_cols = _output_columns(meta_in, flow.outputs)
    if error_column in meta_in.columns or error_column in out_cols.values():
        raise ConfigError(
            f"error_column {error_column!r} is already a column; pass another error_column="
        )
    if max_spend is not None:
        flow.spend_gate(SpendCap(max_spend))  # an unpriced call is refused here, not on a worker
    run = uuid.uuid4().hex[:12]
    limits = ClusterLimits(
        name=f"flownb-{run}",
        concurrency=int(concurrency),
        rpm=rpm if rpm is not None else flow.config.rpm,
        tpm=tpm if tpm is not None else flow.config.tpm,
        max_spend=max_spend,
    )
    # The cluster gate applies the limits; the workers' engines add none of their own. The
    # cache commits each answer as it arrives, so a worker killed mid-batch has kept what it
    # paid for.
    spec = flow.to_spec(concurrency=int(concurrency), rpm=None, tpm=None)
    start_meters(limits)
    hear_cap_lines(limits)
    runner = PartitionRunner(
        spec, limits, columns, fill, error_column, out_cols, run, ddf.npartitions
    )
    meta = _empty_result(meta_in, out_cols, error_column)
    return ddf.map_partitions(runner, meta=meta, align_dataframes=False)
