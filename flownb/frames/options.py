"""What passes through the doors of a run over a frame, written once: :class:`FrameOptions`,
the keyword options every runner of a flow over a frame takes (the pandas one, the Dask one,
the provider batches' one), and :class:`DataFrameOptions`, all of
:meth:`flownb.BaseFlow.run_dataframe`'s (what ``df.flownb.run`` and ``arun_dataframe`` pass on).
"""

from __future__ import annotations

from typing import TypedDict

__all__ = ["DataFrameOptions", "FrameOptions"]


class FrameOptions(TypedDict, total=False):
    """The keyword options every run of a flow over a frame takes, as ``**options`` (the
    runner that reads an option supplies its default)."""

    fill: str | None
    """Text for the empty cells of the variables' columns (default: such cells are refused)."""
    progress: bool
    """Show a progress bar (default ``True``); it never changes how the rows are run."""
    concurrency: int | None
    """Provider calls in flight at once (default: the flow's own)."""
    error_column: str
    """The column naming each failed row's error (default ``"error"``)."""
    trace: bool
    """One more column per generation node (default ``False``; pandas frames only)."""


class DataFrameOptions(FrameOptions, total=False):
    """Every keyword option of :meth:`flownb.BaseFlow.run_dataframe` (what ``df.flownb.run``
    passes on): :class:`FrameOptions` and the run's own limits and batch API."""

    rpm: float | None
    """Requests per minute for this run (local flows; across the cluster on a Dask frame)."""
    tpm: float | None
    """Tokens per minute for this run (local flows; across the cluster on a Dask frame)."""
    batch_api: bool
    """Send the calls through the provider's batch API (default ``False``)."""
    poll: float | None
    """With ``batch_api``: seconds to wait for the batches (``None``: until they end)."""
    max_spend: float | None
    """US dollars the run may spend at most (see :mod:`flownb.providers.spend`)."""
