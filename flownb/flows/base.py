"""The interface every flow users hold implements: :class:`BaseFlow` is the runnable core
(:class:`~flownb.core.flow.FlowCore`: ``run``, ``stream``, ``run_batch``, ``run_each``, their
async twins) with the features a flow opens on top: ``run_dataframe`` (pandas, polars, Dask,
the batch API), ``preview``, ``form``, and in a notebook the live views of a run.
:class:`~flownb.flows.local.LocalFlow` runs in-process with a provider;
:class:`~flownb.flows.remote.RemoteFlow` runs over HTTP.

The flows users hold stand above the features they open and import them directly; the features
take the core (a flow is a :class:`~flownb.core.flow.FlowCore`) and never import this module.
Notebook code (:mod:`flownb.views`) is imported only inside a Jupyter kernel, and each frame
runner when it is first used: a script that never runs a frame never imports pandas.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Unpack

from ..config.settings import live_view_mode
from ..core.flow import FlowCore, say_over_cap
from ..core.local import local_of
from ..errors import ConfigError
from ..frames.options import DataFrameOptions, FrameOptions
from ..providers.calls import announce
from ..runtime.result import RunResult

if TYPE_CHECKING:
    import pandas as pd

    from ..providers.calls import Gate

__all__ = ["BaseFlow"]


class BaseFlow(FlowCore):
    """What every flow offers, local or remote: the core's runs and the features on top."""

    def run(
        self,
        variables: Mapping[str, Any] | None = None,
        /,
        *,
        max_spend: float | None = None,
        **kwargs: Any,
    ) -> RunResult:
        """Run the flow once. Variables come as a mapping, keyword arguments, or both.
        ``max_spend`` (US dollars) caps what the call(s) may cost (see :meth:`run_batch`).

        In a notebook front end the text shows growing below the cell while the provider
        streams it (see :mod:`flownb.views.live_text`; ``FLOWNB_LIVE``); the result is the
        same either way.

        Returns:
            A :class:`RunResult`: output name -> text or image URL, with a rich display.

        Raises:
            InputError: variables missing, unknown or not strings (every problem listed).
            ProviderError: the provider failed.
            SpendCapReached: a call could have passed ``max_spend``: it was not sent.
            ConfigError: ``max_spend`` given and some call cannot be priced.
        """
        if max_spend is None and _live_text_wanted():
            values = {**(variables or {}), **kwargs}
            self.spec.check_one(values)
            # A notebook front end: the text is shown growing while it streams, then the
            # usual display of the returned result.
            from ..views.live_text import live_run

            return live_run(self, values)
        return super().run(variables, max_spend=max_spend, **kwargs)

    def open_bar(self, batch: Sequence[Mapping[str, Any]]) -> Any:
        """Return the bar a run of ``batch`` shows: in a notebook front end the live view (the
        bar and the finished rows), else the core's progress bar."""
        if _in_kernel():
            from ..views import live

            view = live.rows_view(self.name, batch, self.outputs)
            if view is not None:
                return view
        return super().open_bar(batch)

    def frame_slot(self, labels: Sequence[Any]) -> Any:
        """Return the notebook's slot for the frame a run over rows ``labels`` returns: the
        live view of those rows ends as that frame's table (``None`` outside a kernel)."""
        if not _in_kernel():
            return None
        from ..views import live

        return live.open_slot(labels)

    def preview_of(self, data: Any) -> Any:
        """Return the preview of running over ``data`` (see :meth:`preview`)."""
        from ..frames.preview import preview_data

        return preview_data(self, data, None, None)

    def run_dataframe(
        self,
        df: pd.DataFrame,
        columns: Mapping[str, str] | None = None,
        *,
        fill: str | None = None,
        progress: bool = True,
        concurrency: int | None = None,
        error_column: str = "error",
        trace: bool = False,
        rpm: float | None = None,
        tpm: float | None = None,
        batch_api: bool = False,
        poll: float | None = None,
        max_spend: float | None = None,
    ) -> pd.DataFrame:
        """Run the flow once per row of ``df``; see :func:`flownb.frames.run.run_dataframe`.

        ``max_spend`` (US dollars) caps what the run pays (see :meth:`run_batch`): the rows it
        stops are marked in ``error_column`` (``spend_cap_reached``), the cap's line says how
        much of it was used, and a re-run with a higher cap buys only what is missing.

        ``df`` may be a Dask DataFrame: the result is then a lazy Dask DataFrame (see
        :func:`flownb.frames.dask.run.run_dataframe`), and ``concurrency``, ``rpm``, ``tpm`` and
        ``max_spend`` hold across the whole cluster. On a pandas frame, ``rpm`` / ``tpm`` limit
        this run in addition to the flow's own limits (local flows only).

        ``batch_api=True`` sends the text calls the cache does not hold through the provider's
        batch API (half price, results within 24 hours; see :mod:`flownb.frames.batch_api.run`),
        waiting
        ``poll`` seconds at most (None: until done); the same call later picks the batches up.

        Returns:
            A copy of ``df`` (index and columns kept) with one column per output (and, with
            ``trace=True``, one per generation node), and an ``error_column`` when some rows
            failed (always, on a Dask frame).

        Raises:
            ConfigError: ``rpm`` / ``tpm`` given for a flow that does not run locally,
                ``trace=True`` on a Dask frame, or ``max_spend`` with a call that cannot be
                priced (nothing is sent).
        """
        options: FrameOptions = {
            "fill": fill,
            "progress": progress,
            "concurrency": concurrency,
            "error_column": error_column,
            "trace": trace,
        }
        self.say_notes()
        if _is_dask_frame(df):  # lazily: one cap (as one rpm) across the whole cluster
            return self._run_dask(df, columns, rpm, tpm, max_spend, options)
        if batch_api:
            return self._run_batched(df, columns, rpm or tpm, poll, max_spend, options)
        if (rpm or tpm) and not self.in_process:
            raise ConfigError("rpm= and tpm= per run apply to local flows only")
        from ..frames import run as pandas_frames
        from ..frames.preview import preview_data

        if max_spend is None:
            flow = self.gated(_run_limits(rpm, tpm)) if rpm or tpm else self
            return pandas_frames.run_dataframe(flow, df, columns, **options)
        flow, cap = self.capped(
            max_spend, preview_data(self, df, columns, fill), _run_limits(rpm, tpm)
        )
        try:
            return pandas_frames.run_dataframe(flow, df, columns, **options)
        finally:
            announce(cap.line())

    def _run_dask(
        self,
        df: Any,
        columns: Mapping[str, str] | None,
        rpm: float | None,
        tpm: float | None,
        max_spend: float | None,
        options: FrameOptions,
    ) -> Any:
        """:meth:`run_dataframe` over a Dask frame (see :mod:`flownb.frames.dask.run`)."""
        from ..frames.dask import run as dask_frames

        return dask_frames.run_dataframe(
            self, df, columns, rpm=rpm, tpm=tpm, max_spend=max_spend, **options
        )

    def _run_batched(
        self,
        df: pd.DataFrame,
        columns: Mapping[str, str] | None,
        limited: float | None,
        poll: float | None,
        max_spend: float | None,
        options: FrameOptions,
    ) -> pd.DataFrame:
        """:meth:`run_dataframe` through the provider's batch API (see
        :mod:`flownb.frames.batch_api.run`)."""
        local = local_of(self)
        if local is None or limited:
            raise ConfigError(
                "batch_api=True runs a local flow over a pandas frame (no rpm/tpm: the "
                "provider schedules a batch itself)"
            )
        from ..frames.batch_api.run import run_dataframe_batched
        from ..frames.kinds import takes_any_frame

        if max_spend is not None:
            from ..frames.preview import preview_data

            preview = preview_data(self, df, columns, options.get("fill"))
            say_over_cap(preview, max_spend, batch=True)
        # A polars frame through the batch API comes back as polars, as from the plain run.
        result: pd.DataFrame = takes_any_frame(run_dataframe_batched)(
            local, df, columns, poll=poll, max_spend=max_spend, **options
        )
        return result

    async def arun_dataframe(
        self,
        df: pd.DataFrame,
        columns: Mapping[str, str] | None = None,
        **options: Unpack[DataFrameOptions],
    ) -> pd.DataFrame:
        """Async :meth:`run_dataframe`, with the same arguments: the rows run on flownb's own
        background loop (as every sync run does) while the caller's event loop stays free.
        Cancelling the await does not stop the rows already sent (a call sent is a call paid):
        they finish and are cached, so a re-run pays only for what is missing.

        Returns:
            What :meth:`run_dataframe` returns.

        Raises:
            What :meth:`run_dataframe` raises.
        """
        return await asyncio.to_thread(self.run_dataframe, df, columns, **options)

    def preview(
        self,
        data: Any,
        columns: Mapping[str, str] | None = None,
        *,
        fill: str | None = None,
    ) -> Any:
        """Return what running over ``data`` (a DataFrame, a list of variable mappings, or one
        mapping) would do, without calling the provider: a :class:`flownb.frames.preview.Preview`
        with
        the rendered prompt of each call, ``n_calls`` (cache hits excluded) and ``est_tokens``.

        Raises:
            InputError: the data does not fit the flow's variables.
        """
        from ..frames.preview import preview_data

        self.say_notes()  # what a run would send: the same warnings a run gives
        return preview_data(self, data, columns, fill)

    def form(self) -> Any:
        """Return an ipywidgets form: an input per variable, a Run button, outputs below."""
        from ..views.widgets import FlowForm  # ipywidgets is imported when a form is asked for

        return FlowForm(self)


def _in_kernel() -> bool:
    # The live view lives in a Jupyter kernel; elsewhere (scripts, a terminal IPython, the CLI)
    # no notebook code is even imported, so nothing changes there.
    return "ipykernel.zmqshell" in sys.modules


def _live_text_wanted() -> bool:
    """Return whether a single run should show its text growing: only in a notebook kernel's
    main thread (a form's worker thread shows it in the form), and as ``FLOWNB_LIVE`` says
    (``auto``: when a notebook front end is there; ``1``/on: in any kernel; ``0``/off: never)."""
    if "ipykernel" not in sys.modules or threading.current_thread() is not threading.main_thread():
        return False  # cheap checks first: scripts and worker threads never pay for more
    mode = live_view_mode()
    if mode == "off":
        return False
    from ..views.live_text import wanted  # imported only inside a kernel

    return wanted(mode)


def _is_dask_frame(df: Any) -> bool:
    # Without importing dask: a Dask DataFrame exists only if dask.dataframe was imported.
    dd = sys.modules.get("dask.dataframe")
    return dd is not None and isinstance(df, dd.DataFrame)


def _run_limits(rpm: float | None, tpm: float | None) -> Gate | None:
    from ..providers.tokens import RequestGate, TokenGate, chain

    return chain(RequestGate(rpm) if rpm else None, TokenGate(tpm) if tpm else None)
