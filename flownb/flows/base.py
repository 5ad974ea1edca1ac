"""The interface every flow users hold implements: :class:`BaseFlow` (``run``, ``stream``,
``run_batch``, ``run_each``, ``run_dataframe``, ``preview``, ``form``, their async twins and the
notebook display) on top of two things a concrete flow supplies: its variable spec and a way to
execute a validated batch. :class:`~flownb.flows.local.LocalFlow` runs in-process with a
provider; :class:`~flownb.flows.remote.RemoteFlow` runs over HTTP.

The flows sit below the features built on them: ``run_dataframe``, ``preview`` and ``form``
open the function registered under that name in :data:`flownb.runtime.hooks.HOOKS` (DataFrames,
Dask, preview, the notebook form), so this module imports none of them.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Unpack

from ..config.settings import live_view_mode
from ..errors import BatchError, ConfigError
from ..flowfile.model import describe
from ..flowfile.validate import VariableSpec
from ..infra.aio import stream_async, stream_sync
from ..providers.calls import Notice, announce, notices_to
from ..runtime.events import StreamEvent
from ..runtime.hooks import HOOKS, DataFrameOptions, FrameOptions
from ..runtime.pipeline import Observers, Outcomes, observers_of
from ..runtime.result import OnResult, RunResult
from ..show.progress import Progress

if TYPE_CHECKING:
    import pandas as pd

    from ..providers.calls import Gate
    from ..providers.spend import SpendCap

__all__ = ["BaseFlow"]


class BaseFlow(ABC):
    """What every flow offers, local or remote."""

    # Whether the flow runs here, on a provider (a LocalFlow): what the batch API and per-run
    # rpm/tpm need. A remote flow runs on its server.
    in_process: ClassVar[bool] = False

    name: str

    @property
    @abstractmethod
    def spec(self) -> VariableSpec:
        """The flow's variables, for validation."""

    @property
    def variables(self) -> list[str]:
        """The names of the variables a run must supply, in node order."""
        return list(self.spec.names)

    @property
    @abstractmethod
    def outputs(self) -> list[str]:
        """The names of the outputs a run yields, in node order."""

    @property
    def defaults(self) -> dict[str, str]:
        """Each variable's default (editor) value; ``""`` where the flow gives none."""
        return dict.fromkeys(self.spec.names, "")

    def export(self, *, endpoint: bool = True) -> dict[str, Any]:
        """Return the flow in the web tool's export format (see :meth:`flownb.LocalFlow.export`).

        Raises:
            ConfigError: this flow has no flow file (a flow on a flow service: export it from
                the service's web tool).
        """
        raise ConfigError(
            f"flow {self.name!r} runs on a flow service and has no flow file here to save; "
            "export it from the web tool, or load a flow file with flownb.load_flow"
        )

    def save(self, path: str | Path, *, endpoint: bool = True) -> Path:
        """Write the flow to ``path`` as the web tool exports flows (:meth:`export`): an
        unchanged flow is written as the JSON it was loaded from; a variant keeps every id,
        position and edge and carries its own models, parameters and prompts. Load it back with
        :func:`flownb.load_flow`, serve it with ``flownb serve``, or open it in the web tool.

        Returns:
            The path written.

        Raises:
            ConfigError: the flow cannot be written as a file (see :meth:`export`).
            OSError: the file cannot be written.
        """
        import json

        text = json.dumps(self.export(endpoint=endpoint), indent=2, ensure_ascii=False) + "\n"
        target = Path(path)
        # Written whole or not at all: a file the web tool or a server reads is never half new.
        partial = target.with_name(f".{target.name}.partial")
        partial.write_text(text, encoding="utf-8")
        partial.replace(target)
        return target

    @abstractmethod
    def _execute(
        self, batch: Sequence[Mapping[str, str]], on_result: OnResult, concurrency: int | None
    ) -> None:
        """Run an already-validated batch, reporting each element to ``on_result`` as it ends."""

    async def _aexecute(
        self, batch: Sequence[Mapping[str, str]], on_result: OnResult, concurrency: int | None
    ) -> None:
        """:meth:`_execute` for the caller's event loop. This default runs it in a worker
        thread (a flow whose transport is synchronous); a flow with an async engine overrides
        it."""
        await asyncio.to_thread(self._execute, batch, on_result, concurrency)

    def describe(self) -> list[dict[str, str]]:
        """Return the contract's describe response: ``{"name", "type"}`` items, variables first."""
        return describe(self.variables, self.outputs)

    def say_notes(self) -> None:  # noqa: B027 - a hook: local flows say what they change
        """Warn, once, about what this flow's requests drop, replace or cannot price (see
        :mod:`flownb.runtime.notes`); a flow served elsewhere says nothing here."""

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
        streams it (see :mod:`flownb.notebook.live_text`; ``FLOWNB_LIVE``); the result is the
        same either way.

        Returns:
            A :class:`RunResult`: output name -> text or image URL, with a rich display.

        Raises:
            InputError: variables missing, unknown or not strings (every problem listed).
            ProviderError: the provider failed.
            SpendCapReached: a call could have passed ``max_spend``: it was not sent.
            ConfigError: ``max_spend`` given and some call cannot be priced.
        """
        values = {**(variables or {}), **kwargs}
        self.spec.check_one(values)
        if max_spend is None and _live_text_wanted():
            # A notebook front end: the text is shown growing while it streams (see
            # flownb.notebook.live_text), then the usual display of the returned result.
            result: RunResult = HOOKS["live_run"](self, values)
            return result
        outcome = Outcomes(1)
        self.run_each([values], outcome, check=False, max_spend=max_spend)
        try:
            return outcome.value()[0]
        except BatchError as exc:
            raise exc.errors[0] from None

    def stream(
        self,
        variables: Mapping[str, Any] | None = None,
        /,
        *,
        max_spend: float | None = None,
        **kwargs: Any,
    ) -> Iterator[StreamEvent | RunResult]:
        """Run the flow once, yielding its text as the provider streams it: a
        :class:`~flownb.runtime.events.StreamEvent` per piece of text (``kind="text"``, the node,
        the
        outputs it feeds, ``delta``) and per image when ready (``kind="image"``, ``url``), and
        last the :class:`RunResult`, exactly what :meth:`run` returns (cached and logged alike:
        a streamed run and a plain run of the same call share one cache entry). ``max_spend``
        (US dollars) caps what its calls may cost, as :meth:`run`'s.

        Raises:
            InputError, ProviderError: as :meth:`run` (after the events yielded before).
            SpendCapReached: a call could have passed ``max_spend``: it was not sent.
            ConfigError: ``max_spend`` given and some call cannot be priced (before any event).
        """
        values = {**(variables or {}), **kwargs}
        self.spec.check_one(values)
        self.say_notes()  # here, on the caller's thread: the warning names the caller's line
        if max_spend is None:
            # Each event goes from the loop straight to this thread's queue: nothing the run
            # does after it (caching, logging) holds it back.
            return stream_sync(lambda emit: self._stream_run(values, emit))
        flow, cap = self.capped(max_spend, [values])  # refused here, before the first event
        return _with_cap_line(flow.stream(values), cap)

    async def astream(
        self,
        variables: Mapping[str, Any] | None = None,
        /,
        *,
        max_spend: float | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[StreamEvent | RunResult]:
        """Async :meth:`stream` on the caller's event loop: ``async for ev in flow.astream()``.
        ``max_spend``: as :meth:`stream`.

        Raises:
            InputError, ProviderError, SpendCapReached, ConfigError: as :meth:`stream`.
        """
        values = {**(variables or {}), **kwargs}
        self.spec.check_one(values)
        self.say_notes()
        if max_spend is not None:  # the same stream, seen through the cap's gate
            flow, cap = self.capped(max_spend, [values])
            try:
                async for item in flow.astream(values):
                    yield item
            finally:
                announce(cap.line())
            return

        def start(emit: Callable[[StreamEvent], None]) -> Coroutine[Any, Any, RunResult]:
            return self._stream_run(values, emit)

        async for item in stream_async(start):
            yield item

    async def _stream_run(
        self, values: Mapping[str, str], emit: Callable[[StreamEvent], None]
    ) -> RunResult:
        """Run validated ``values`` once on the caller's loop, passing ``emit`` each event as
        it happens; return the result. This default runs it whole, then emits each output at
        once (a flow without a streaming engine).

        Raises:
            InputError, ProviderError: as :meth:`run`.
        """
        result = await self.arun(values)
        for name, output in result.entries:
            if result.is_image(name):
                emit(StreamEvent("image", name, (name,), url=output))
            elif output:
                emit(StreamEvent("text", name, (name,), output))
        return result

    async def arun_batch(
        self,
        batch: Sequence[Mapping[str, Any]],
        *,
        concurrency: int | None = None,
        max_spend: float | None = None,
    ) -> list[RunResult]:
        """Async :meth:`run_batch` on the caller's event loop (for async applications), with
        its ``max_spend``.

        Raises:
            InputError, BatchError, ConfigError: as :meth:`run_batch`.
        """
        batch = list(batch)
        self.spec.check_batch(batch)
        if max_spend is None:
            outcomes = Outcomes(len(batch))
            await self._aexecute(batch, outcomes, concurrency)
            return outcomes.value()
        self.say_notes()
        flow, cap = self.capped(max_spend, batch)  # the same run, seen through the cap's gate
        try:
            return await flow.arun_batch(batch, concurrency=concurrency)
        finally:
            announce(cap.line())

    async def arun(
        self,
        variables: Mapping[str, Any] | None = None,
        /,
        *,
        max_spend: float | None = None,
        **kwargs: Any,
    ) -> RunResult:
        """Async :meth:`run` on the caller's event loop, with its ``max_spend``.

        Raises:
            InputError, ProviderError, SpendCapReached, ConfigError: as :meth:`run`.
        """
        try:
            batch = [{**(variables or {}), **kwargs}]
            return (await self.arun_batch(batch, max_spend=max_spend))[0]
        except BatchError as exc:
            raise exc.errors[0] from None

    def run_batch(
        self,
        batch: Sequence[Mapping[str, Any]],
        *,
        progress: bool = False,
        concurrency: int | None = None,
        max_spend: float | None = None,
    ) -> list[RunResult]:
        """Run the flow once per element; the whole batch is validated before anything runs.

        ``max_spend`` (US dollars) caps what the run pays: a call is sent only if what was spent
        plus the most every call in flight could still cost stays within it (see
        :mod:`flownb.providers.spend`); the elements it stops fail with
        :class:`~flownb.errors.SpendCapReached`, cache hits are always served, and a run whose
        preview already exceeds the cap says so first.

        Returns:
            One :class:`RunResult` per element, in input order.

        Raises:
            InputError: some element's variables are wrong (every problem, with its index).
            BatchError: some elements failed at run time; ``.results`` keeps the others.
            ConfigError: ``max_spend`` given and some call cannot be priced (nothing is sent).
        """
        if isinstance(batch, Mapping) or not isinstance(batch, Sequence):
            raise TypeError("run_batch takes a list of variable mappings; use run() for one run")
        batch = list(batch)
        outcomes = Outcomes(len(batch))
        self.run_each(
            batch, outcomes, progress=progress, concurrency=concurrency, max_spend=max_spend
        )
        return outcomes.value()

    def run_each(
        self,
        batch: Sequence[Mapping[str, Any]],
        on_result: OnResult,
        *,
        progress: bool = False,
        concurrency: int | None = None,
        check: bool = True,
        max_spend: float | None = None,
    ) -> None:
        """Run the flow once per element, calling ``on_result(index, result, None)`` or
        ``on_result(index, None, exception)`` as each element finishes, in completion order.

        This is the hook batch consumers build on (the DataFrame path, evaluations, streaming
        into a file): nothing is kept here, and an element's failure does not stop the others.
        :class:`~flownb.runtime.pipeline.Outcomes` is the collector :meth:`run_batch` uses.
        ``check=False`` skips validation, for callers that built every element as a mapping of
        exactly the flow's variables to strings themselves. ``max_spend``: see
        :meth:`run_batch`.

        Raises:
            InputError: (``check=True``) some element's variables are wrong, before any runs.
            KeyboardInterrupt: Ctrl-C; every element that finished before it was reported.
            ConfigError: ``max_spend`` given and some call cannot be priced (nothing is sent).
        """
        if check:
            self.spec.check_batch(batch)
        self.say_notes()
        if max_spend is not None:
            capped, cap = self.capped(max_spend, batch)
            try:
                capped.run_each(
                    batch, on_result, progress=progress, concurrency=concurrency, check=False
                )
            finally:
                announce(cap.line())
            return
        # One list of observers for the run; the runner puts the run log and tracing first.
        observers = observers_of(on_result)
        bar: Any = None
        if progress:
            # In a notebook front end, the live view (bar and finished rows) instead of the bar.
            bar = HOOKS["live_rows"](self, batch) or _progress_bar(len(batch), self.name)
            _watch_with_bar(observers, bar)
        try:
            if bar is None:
                self._execute(batch, observers, concurrency)
            else:
                with notices_to(_bar_notice(bar)):  # a slow retry says so on the bar
                    self._execute(batch, observers, concurrency)
        finally:
            # The hand-over: whatever the flow runs on, no observer above is called once this
            # returns or raises (a run stopped by Ctrl-C may still end calls in flight).
            observers.close()
            if bar is not None:
                bar.close()

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
            return HOOKS["run_dask_dataframe"](
                self, df, columns, rpm=rpm, tpm=tpm, max_spend=max_spend, **options
            )
        if batch_api:
            if not self.in_process or _is_dask_frame(df) or rpm or tpm:
                raise ConfigError(
                    "batch_api=True runs a local flow over a pandas frame (no rpm/tpm: the "
                    "provider schedules a batch itself)"
                )
            if max_spend is not None:
                _say_over_cap(HOOKS["preview"](self, df, columns, fill), max_spend, batch=True)
            return HOOKS["run_dataframe_batched"](
                self, df, columns, poll=poll, max_spend=max_spend, **options
            )
        flow: BaseFlow = self
        if (rpm or tpm) and not self.in_process:
            raise ConfigError("rpm= and tpm= per run apply to local flows only")
        if max_spend is None:
            if rpm or tpm:
                flow = self.gated(_run_limits(rpm, tpm))
            return HOOKS["run_dataframe"](flow, df, columns, **options)
        flow, cap = self.capped(
            max_spend, HOOKS["preview"](self, df, columns, fill), _run_limits(rpm, tpm)
        )
        try:
            return HOOKS["run_dataframe"](flow, df, columns, **options)
        finally:
            announce(cap.line())

    def capped(
        self, max_spend: float, data: Any, gate: Gate | None = None
    ) -> tuple[BaseFlow, SpendCap]:
        """Return a view of this flow whose calls stay within ``max_spend`` US dollars (each
        attempt also entering ``gate``), and the cap; first, when the preview of running over
        ``data`` (or ``data`` itself, a preview) already exceeds the cap, say so with the
        estimate (the run proceeds until the cap).

        Raises:
            ConfigError: this flow's calls cannot be capped here (a served flow), or some cannot
                be priced: nothing is sent.
        """
        from ..providers.spend import SpendCap
        from ..providers.tokens import chain

        cap = SpendCap(max_spend)
        spend = self.spend_gate(cap)
        preview = (
            data if hasattr(data, "est_cost_known") else HOOKS["preview"](self, data, None, None)
        )
        _say_over_cap(preview, cap.cap)
        return self.gated(chain(gate, spend)), cap

    def spend_gate(self, cap: SpendCap, *, batch: bool = False) -> Gate:
        """Return the gate that keeps this flow's calls within ``cap`` (a local flow's).

        Raises:
            ConfigError: this flow runs its calls elsewhere (a served flow: its API key's cap
                applies there; see ``flownb keys create --max-spend``).
        """
        raise ConfigError(
            "max_spend= caps flows that run here; a served flow's spending is capped per API key "
            "on its server (flownb keys create --max-spend)"
        )

    def gated(self, gate: Gate | None, run_id: str | None = None) -> BaseFlow:
        """Return a view of this flow whose runs enter ``gate`` around each provider attempt
        (a local flow's; see :meth:`flownb.flows.local.LocalFlow.gated`).

        Raises:
            ConfigError: this flow does not run its calls here (a remote flow).
        """
        raise ConfigError("rpm= and tpm= per run apply to local flows only")

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
        self.say_notes()  # what a run would send: the same warnings a run gives
        return HOOKS["preview"](self, data, columns, fill)

    def form(self) -> Any:
        """Return an ipywidgets form: an input per variable, a Run button, outputs below."""
        return HOOKS["form"](self)

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} {self.name!r} variables={self.variables!r} "
            f"outputs={self.outputs!r}>"
        )

    def _repr_html_(self) -> str:
        from ..show.escape import html_text, no_math

        def names(items: list[str]) -> str:
            return ", ".join(f"<code>{html_text(n)}</code>" for n in items) or "<em>(none)</em>"

        return no_math(
            f"<b>Flow <code>{html_text(self.name)}</code></b><ul>"
            f"<li>variables: {names(self.variables)}</li>"
            f"<li>outputs: {names(self.outputs)}</li></ul>"
        )


def _with_cap_line(
    items: Iterator[StreamEvent | RunResult], cap: SpendCap
) -> Iterator[StreamEvent | RunResult]:
    """Yield ``items``, then say the cap's line (how much of it was used), however they end."""
    try:
        yield from items
    finally:
        announce(cap.line())


def _live_text_wanted() -> bool:
    """Return whether a single run should show its text growing: only in a notebook kernel's
    main thread (a form's worker thread shows it in the form), and as ``FLOWNB_LIVE`` says
    (``auto``: when a notebook front end is there; ``1``/on: in any kernel; ``0``/off: never)."""
    if "ipykernel" not in sys.modules or threading.current_thread() is not threading.main_thread():
        return False  # cheap checks first: scripts and worker threads never pay for more
    mode = live_view_mode()
    if mode == "off":
        return False
    wanted: bool = HOOKS["live_wanted"](mode)
    return wanted


def _is_dask_frame(df: Any) -> bool:
    # Without importing dask: a Dask DataFrame exists only if dask.dataframe was imported.
    dd = sys.modules.get("dask.dataframe")
    return dd is not None and isinstance(df, dd.DataFrame)


def _say_over_cap(preview: Any, cap: float, *, batch: bool = False) -> None:
    """Warn when ``preview``'s estimate (``batch``: at the batch API's price) is over ``cap``:
    the run proceeds, and stops at the cap."""
    estimate = preview.est_cost_batch if batch else preview.est_cost_known
    if estimate > cap:
        from ..show.meter import usd
        from ..show.notices import warn

        warn(
            f"the preview estimates about {usd(estimate)} for this run ({preview.n_calls} "
            f"call(s)), over the spend cap of {usd(cap)}: the run proceeds and stops at the cap"
        )


def _run_limits(rpm: float | None, tpm: float | None) -> Gate | None:
    from ..providers.tokens import RequestGate, TokenGate, chain

    return chain(RequestGate(rpm) if rpm else None, TokenGate(tpm) if tpm else None)


def _progress_bar(total: int, name: str) -> Progress:
    from ..show.progress import open_bar

    # Moved by one thread of its own: rows finish on the loop thread, the bar is a widget.
    return open_bar(total, name, "row")


def _watch_with_bar(observers: Observers, bar: Any) -> None:
    """Add the progress bar's observers: the live view's rows (in a notebook), the meter of
    money spent and saved beside the bar, and the bar's count."""
    from ..show.meter import show

    live = getattr(bar, "record", None)
    if live is not None:
        observers.add(live)

    def count(i: int, result: RunResult | None, exc: BaseException | None) -> None:
        show(bar, result)  # money spent so far and the cache's saving, beside the bar
        bar.update(1)

    observers.add(count)


def _bar_notice(bar: Any) -> Notice:
    """Return where a run with progress bar ``bar`` announces things: the bar's postfix, and
    in a terminal also a line on stderr above the bar (a postfix is easy to miss there)."""
    in_notebook = bar.in_notebook

    def notice(line: str) -> None:
        bar.notice(line)
        if not in_notebook:
            bar.write(f"flownb: {line}", file=sys.stderr)

    return notice
