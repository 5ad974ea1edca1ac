"""The doors from the flow classes to the features built on them.

The flow classes (:mod:`flownb.flows.local`, and the remote flow in :mod:`flownb.flows.client`) sit
below the
features that use a flow: running over a pandas or Dask DataFrame (:mod:`flownb.frames.run`,
:mod:`flownb.frames.dask.run`), previewing (:mod:`flownb.frames.preview`), the notebook form
(:mod:`flownb.notebook.widgets`), the notebook's live results view
(:mod:`flownb.notebook.live`, which batches and evaluations open instead of a progress bar).
A flow's methods that open one of these (``run_dataframe``, ``preview``, ``form``) call the
function registered here under that name, with the flow first;
``import flownb`` registers them (:mod:`flownb.wiring`). So every import points down:
the features import the flows, never the reverse.

What goes through the ``run_dataframe`` doors is written here once: :class:`FrameOptions`, the
keyword options every runner of a flow over a frame takes (the pandas one, the Dask one, the
provider batches' one), and :class:`DataFrameOptions`, all of ``run_dataframe``'s.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypedDict

__all__ = ["HOOKS", "DataFrameOptions", "FrameOptions", "Hooks"]


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


class Hooks:
    """Named functions that take a flow first, registered from above the flow classes."""

    def __init__(self) -> None:
        self._functions: dict[str, Callable[..., Any]] = {}

    def register(self, name: str, function: Callable[..., Any]) -> None:
        """Make ``function`` the one the flows' ``name`` door calls (replacing any before)."""
        self._functions[name] = function

    def __getitem__(self, name: str) -> Callable[..., Any]:
        """Return the function registered under ``name``.

        Raises:
            LookupError: nothing is registered under ``name`` (flownb was not imported whole).
        """
        try:
            return self._functions[name]
        except KeyError:
            raise LookupError(f"no flow feature {name!r} is registered; import flownb") from None


HOOKS = Hooks()
