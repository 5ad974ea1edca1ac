"""The one path every validated batch takes to the engine, wherever it comes from.

:func:`assemble` builds a flow's engine and :class:`Runner` from its run configuration: the one
place it is done, for local flows and the server alike. ``LocalFlow.run``/``run_batch``/
``run_dataframe``, their async twins, evaluations and the server's run route all hand a batch to
a runner, which

1. watches each element through the run's :class:`Observers` as it finishes: the run log and
   tracing, then whatever the caller added (its collector, progress bar, live view, meter),
2. picks how the engine runs: providers that answer without I/O (offline) run synchronously;
   from a running event loop, a small such batch runs on the loop and a larger one (or one that
   draws images) in a worker thread, so the loop stays responsive; every other provider runs
   on the event loop, flownb's background loop for synchronous callers,
3. so reports each element's outcome as it ends: nothing finished is lost when the run is
   interrupted.

:class:`Outcomes` is the usual collector: it keeps a batch's results in input order and raises
:class:`~flownb.errors.BatchError`, which keeps the successes, if some element failed.

The hand-over rule, enforced in one place (:meth:`Observers.close`): once a synchronous run
returns or raises (Ctrl-C), the caller's observers are never called again, so what they
collected is read by one thread only. A stopped run lets its provider calls in flight end (a
request sent is billed; see :meth:`flownb.runtime.engine.Engine.run_async`): the rows they
finish after the hand-over still reach the run log and the cache.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext

from ..config.settings import RunConfig
from ..errors import BatchError
from ..infra import tracing
from ..infra.aio import run_sync
from ..infra.media import pin_run
from ..providers.base import Provider
from ..providers.calls import Gate
from ..providers.limits import AdaptiveLimiter
from .cache import open_cache
from .columns import Answered, ColumnRun, column_run
from .engine import Emit, Engine, MediaUrl, Plan
from .result import OnResult, RunResult, report_all
from .runlog import RunLog, RunRecorder, open_runlog

__all__ = ["INLINE_ON_LOOP", "Handover", "Observers", "Outcomes", "Runner", "assemble"]

# Inline (offline) batches up to this size run on a caller's event loop; larger ones in a
# thread, so one big batch does not stall everything else the loop serves.
INLINE_ON_LOOP = 32


class Outcomes:
    """An ``on_result`` callback that keeps a batch's outcomes in input order.

    Call it as ``outcomes(i, result, exc)`` for each element (the runner does), then
    :meth:`value` for the list of results. ``results`` holds each element's result (``None``
    where it failed or has not finished) and ``errors`` maps each failed index to its exception.
    ``keep=False`` keeps only the failures, for callers that take each result as it comes (a
    100,000-row batch then does not hold every result twice).
    """

    __slots__ = ("errors", "keep", "results", "size")

    def __init__(self, size: int, *, keep: bool = True) -> None:
        self.size = size
        self.keep = keep
        self.results: list[RunResult | None] = [None] * size if keep else []
        self.errors: dict[int, BaseException] = {}

    def __call__(self, i: int, result: RunResult | None, exc: BaseException | None) -> None:
        if exc is not None:
            self.errors[i] = exc
        elif self.keep:
            self.results[i] = result

    def many(self, indexes: Sequence[int], results: Sequence[RunResult]) -> None:
        """Keep ``results``, those of elements ``indexes`` (see :func:`.result.report_all`)."""
        if self.keep:
            kept = self.results
            for i, result in zip(indexes, results, strict=True):
                kept[i] = result

    def value(self) -> list[RunResult]:
        """Return every element's result, in input order.

        Raises:
            BatchError: some elements failed; it keeps the others' results.
        """
        if self.errors:
            results = self.results if self.keep else [None] * self.size
            raise BatchError(results, self.errors)
        return self.results  # type: ignore[return-value]  # no error: every slot is filled


class Observers:
    """The observers of one run, in one list: each element's outcome is passed to every
    observer, in the order they were added.

    Observers added with ``always=True`` (the run log, tracing) see every element, even one
    that ends after the run was handed over; the others (the caller's collector, progress bar,
    live view, meter) see them until :meth:`close`. That is the hand-over rule: once ``close()``
    returns, none of them is called again and no call is in progress, so the thread that closed
    it may read what they collected, each element either reported completely or not at all.
    """

    __slots__ = ("_always", "_handed", "_lock", "_open")

    def __init__(self, *observers: OnResult) -> None:
        self._always: tuple[OnResult, ...] = ()
        self._handed: tuple[OnResult, ...] = observers
        self._lock = threading.Lock()
        self._open = True

    def add(self, observer: OnResult, *, always: bool = False) -> None:
        """Add ``observer`` last (``always``: last of those that see every element)."""
        if always:
            self._always = (*self._always, observer)
        else:
            self._handed = (*self._handed, observer)

    def __call__(self, i: int, result: RunResult | None, exc: BaseException | None) -> None:
        for observer in self._always:
            observer(i, result, exc)
        if self._handed:
            with self._lock:
                if self._open:
                    for observer in self._handed:
                        observer(i, result, exc)

    def many(self, indexes: Sequence[int], results: Sequence[RunResult]) -> None:
        """Pass elements ``indexes``, finished with ``results``, to every observer, as one call
        per element would, each observer taking them in bulk when it can (see
        :func:`.result.report_all`)."""
        for observer in self._always:
            report_all(observer, indexes, results)
        if self._handed:
            with self._lock:
                if self._open:
                    for observer in self._handed:
                        report_all(observer, indexes, results)

    def close(self) -> None:
        """Hand the run over: stop passing outcomes to the observers not added ``always``,
        after waiting for one being passed on now."""
        with self._lock:
            self._open = False


def observers_of(on_result: OnResult) -> Observers:
    """Return ``on_result`` if it is a run's :class:`Observers`, else new ones holding it."""
    return on_result if isinstance(on_result, Observers) else Observers(on_result)


# The name the hand-over had before it became the run's list of observers.
Handover = Observers


def assemble(
    plan: Plan, provider: Provider, config: RunConfig, *, name: str, media_url: MediaUrl
) -> Runner:
    """Return the runner of ``plan`` on ``provider``, with the engine ``config`` describes:
    its call cache (when on and the provider's answers may be cached), pacing, timeout,
    retries and token limit, and its run log (when on). The one place an engine and runner
    are built, for local flows and the server; ``media_url`` makes the URLs of images.

    Raises:
        ConfigError: the provider cannot run this plan (see :class:`Engine`).
    """
    engine = Engine(
        plan,
        provider,
        media_url,
        cache=open_cache(config.home) if config.cache and provider.cacheable else None,
        rpm=config.rpm,
        timeout=config.timeout,
        retries=config.retries,
        tpm=config.tpm,
    )
    runlog = open_runlog(config.home) if config.runlog else None
    return Runner(engine, name=name, concurrency=config.concurrency, runlog=runlog)


class Runner:
    """Runs validated batches of one flow on its engine (see the module docstring).

    ``runlog`` is where runs are recorded under the flow's ``name`` (``None``: not recorded);
    ``concurrency`` bounds provider calls in flight unless a run asks for another bound.
    """

    def __init__(
        self, engine: Engine, *, name: str, concurrency: int, runlog: RunLog | None = None
    ) -> None:
        self.engine = engine
        self.name = name
        self.concurrency = concurrency
        self.runlog = runlog
        self._images = any(step.kind == "image" for step in engine.plan.steps)

    def on_loop(self, size: int) -> bool:
        """Return whether :meth:`arun` runs a batch of ``size`` elements synchronously on the
        caller's loop (a small inline batch without images): quick, and not cancellable."""
        return self.engine.provider.inline and size <= INLINE_ON_LOOP and not self._images

    def _pinned(self) -> AbstractContextManager[None]:
        """Keep the run's images from the media cap while it runs (see :func:`pin_run`)."""
        return pin_run() if self._images else nullcontext()

    def _recorder(
        self, batch: Sequence[Mapping[str, str]], run_id: str | None = None
    ) -> RunRecorder | None:
        if self.runlog is None or not batch:
            return None
        provider = self.engine.provider
        return self.runlog.recorder(
            self.name, provider.name, batch, detailed=not provider.inline, run_id=run_id
        )

    def _watch(
        self, observers: Observers, recorder: RunRecorder | None, failures: tracing.RunFailures
    ) -> None:
        """Put the run log and tracing first among ``observers``: they see every element."""
        if recorder is not None:
            observers.add(recorder, always=True)
        if failures.active:
            observers.add(failures.note, always=True)  # failed elements are reported, not raised

    def run(
        self,
        batch: Sequence[Mapping[str, str]],
        on_result: OnResult,
        *,
        concurrency: int | None = None,
        gate: Gate | None = None,
        run_id: str | None = None,
    ) -> None:
        """Run ``batch`` from synchronous code (a Jupyter kernel's thread included), reporting
        each element to ``on_result`` (a run's :class:`Observers`, or one callback) as it ends.
        ``gate`` is entered around each provider attempt (cluster-wide or per-run limits);
        ``run_id`` names the batch in the run log (a Dask partition recomputed after its worker
        died logs under the same id).

        Raises:
            KeyboardInterrupt: Ctrl-C; every element finished before it was reported, and
                ``on_result`` is not called once this has raised (see :class:`Observers`).
        """
        engine = self.engine
        observers = observers_of(on_result)
        recorder = self._recorder(batch, run_id)
        with (
            self._pinned(),
            tracing.flow_span(self.name, engine.provider.name, len(batch)) as failures,
        ):
            self._watch(observers, recorder, failures)
            try:
                if engine.provider.inline:
                    engine.run_inline(batch, observers)
                else:
                    run_sync(
                        engine.run_async(
                            batch, observers, concurrency or self.concurrency, gate=gate
                        )
                    )
            finally:
                # A run on the loop may go on after Ctrl-C (its calls in flight end): what it
                # reports from now on reaches the run log, not the caller.
                observers.close()
                if recorder is not None:
                    recorder.flush()

    def run_columns(
        self, batch: Sequence[Mapping[str, str]], columns: Mapping[str, Sequence[str]]
    ) -> Iterator[Answered] | None:
        """Return ``batch``, whose variables ``columns`` also holds (variable -> one string per
        element), answered at once if the provider, the plan and the data allow it (see
        :mod:`flownb.runtime.columns`): an iterator that answers the batch a chunk at a time as
        it is read, recording each chunk in the run log; nothing is reported per element.

        Returns:
            The iterator of the chunks' answers, in row order, or ``None`` (nothing ran): run
            the batch with :meth:`run`.
        """
        if not batch:
            return None
        run = column_run(self.engine, columns, len(batch))
        if run is None:
            return None
        return self._recorded(run, self._recorder(batch))

    @staticmethod
    def _recorded(run: ColumnRun, recorder: RunRecorder | None) -> Iterator[Answered]:
        for answered in run:
            if recorder is not None:
                recorder.record_columns(
                    answered.inputs,
                    answered.outputs,
                    answered.model,
                    answered.seconds,
                    start=answered.start,
                    rows=answered.rows,
                )
            yield answered

    async def stream_one(
        self,
        values: Mapping[str, str],
        emit: Emit,
        *,
        concurrency: int | None = None,
        gate: Gate | None = None,
    ) -> RunResult:
        """Run one validated element on the caller's loop, handing ``emit`` its text as the
        provider streams it and its images when ready (see :meth:`Engine.stream_one`); the
        result is recorded in the run log as :meth:`arun` records it. ``gate`` is entered
        around each provider attempt (a spend cap).

        Returns:
            The element's result, as :meth:`arun` would report it.

        Raises:
            The element's error, as :meth:`arun` would report it.
        """
        engine = self.engine
        recorder = self._recorder([values])

        def ignore(i: int, result: RunResult | None, exc: BaseException | None) -> None:
            return None

        report = recorder.wrap(ignore) if recorder is not None else ignore
        with self._pinned(), tracing.flow_span(self.name, engine.provider.name, 1) as failures:
            report = failures.watch(report)  # the span names the element that failed
            try:
                # Reported by the engine: a run whose caller went away still ends its call in
                # flight (paid for), and the run log keeps it.
                return await engine.stream_one(
                    values,
                    emit,
                    concurrency=concurrency or self.concurrency,
                    on_result=report,
                    gate=gate,
                )
            finally:
                if recorder is not None:
                    recorder.flush()

    async def arun(
        self,
        batch: Sequence[Mapping[str, str]],
        on_result: OnResult,
        *,
        concurrency: int | None = None,
        limiter: AdaptiveLimiter | None = None,
        gate: Gate | None = None,
    ) -> None:
        """Run ``batch`` on the caller's event loop, reporting each element to ``on_result`` (a
        run's :class:`Observers`, or one callback). ``limiter`` shares one concurrency limit
        with other runs (an evaluation's variants and judges on one endpoint); ``concurrency``
        is then ignored. ``gate`` is entered around each provider attempt."""
        observers = observers_of(on_result)
        recorder = self._recorder(batch)
        with (
            self._pinned(),
            tracing.flow_span(self.name, self.engine.provider.name, len(batch)) as failures,
        ):
            self._watch(observers, recorder, failures)
            await self._arun(batch, observers, recorder, concurrency, limiter, gate)

    async def _arun(
        self,
        batch: Sequence[Mapping[str, str]],
        on_result: OnResult,
        recorder: RunRecorder | None,
        concurrency: int | None,
        limiter: AdaptiveLimiter | None,
        gate: Gate | None,
    ) -> None:
        engine = self.engine
        try:
            if not engine.provider.inline:
                await engine.run_async(
                    batch, on_result, concurrency or self.concurrency, limiter=limiter, gate=gate
                )
            elif self.on_loop(len(batch)):
                engine.run_inline(batch, on_result)
            else:
                await _inline_in_thread(engine, batch, on_result)
        finally:
            if recorder is not None:
                recorder.flush()


async def _inline_in_thread(
    engine: Engine, batch: Sequence[Mapping[str, str]], on_result: OnResult
) -> None:
    """Run an inline batch in a worker thread; when the caller is cancelled (a server's client
    went away, the server shuts down), the thread stops before its next element, and this
    returns (re-raising the cancellation) only once it has: nothing reports after the run."""
    stop = threading.Event()
    # to_thread copies the context: the server's media URLs read the current request there.
    worker = asyncio.ensure_future(asyncio.to_thread(engine.run_inline, batch, on_result, stop))
    try:
        await asyncio.shield(worker)
    except asyncio.CancelledError:
        stop.set()
        await asyncio.wait({worker})
        if not worker.cancelled():
            worker.exception()  # looked at: the cancellation is what this run reports
        raise
