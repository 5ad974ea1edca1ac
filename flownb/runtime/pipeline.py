"""The one path every validated batch takes to the engine, wherever it comes from.

``LocalFlow.run``/``run_batch``/``run_dataframe``, their async twins, evaluations and the server's
run route all hand a batch to a :class:`Runner`, which

1. records each element in the run log as it finishes (when the run log is on),
2. picks how the engine runs: providers that answer without I/O (offline) run synchronously;
   from a running event loop, a small such batch runs on the loop and a larger one (or one that
   draws images) in a worker thread, so the loop stays responsive; every other provider runs
   on the event loop, flownb's background loop for synchronous callers,
3. reports each element's outcome to the caller's ``on_result`` as it ends, so nothing finished
   is lost when the run is interrupted.

:class:`Outcomes` is the usual ``on_result``: it keeps a batch's results in input order and
raises :class:`~flownb.errors.BatchError`, which keeps the successes, if some element failed.

After Ctrl-C the cancelled coroutine may go on cleaning up on the loop thread for longer than
:data:`flownb.infra.aio.INTERRUPT_WAIT`; :class:`Handover` closes the caller's ``on_result`` before
the
caller reads what it collected, so what it returns is never written to at the same time. Rows
that finish that late still reach the run log and the cache.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping, Sequence

from ..errors import BatchError
from ..infra import tracing
from ..infra.aio import run_sync
from ..providers.calls import Gate
from ..providers.limits import AdaptiveLimiter
from .engine import Emit, Engine
from .result import OnResult, RunResult
from .runlog import RunLog, RunRecorder

__all__ = ["INLINE_ON_LOOP", "Handover", "Outcomes", "Runner"]

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

    def value(self) -> list[RunResult]:
        """Return every element's result, in input order.

        Raises:
            BatchError: some elements failed; it keeps the others' results.
        """
        if self.errors:
            results = self.results if self.keep else [None] * self.size
            raise BatchError(results, self.errors)
        return self.results  # type: ignore[return-value]  # no error: every slot is filled


class Handover:
    """An ``on_result`` that passes each outcome on to ``on_result`` until :meth:`close`.

    After ``close()`` returns, ``on_result`` is never called again and no call is in progress,
    so the thread that closed it may read what ``on_result`` collected: each element is then
    either reported completely or not at all, however long a cancelled run takes to unwind.
    """

    __slots__ = ("_lock", "_on_result", "_open")

    def __init__(self, on_result: OnResult) -> None:
        self._on_result = on_result
        self._lock = threading.Lock()
        self._open = True

    def __call__(self, i: int, result: RunResult | None, exc: BaseException | None) -> None:
        with self._lock:
            if self._open:
                self._on_result(i, result, exc)

    def close(self) -> None:
        """Stop passing outcomes on, after waiting for one being passed on now."""
        with self._lock:
            self._open = False


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

    def _recorder(
        self, batch: Sequence[Mapping[str, str]], run_id: str | None = None
    ) -> RunRecorder | None:
        if self.runlog is None or not batch:
            return None
        provider = self.engine.provider
        return self.runlog.recorder(
            self.name, provider.name, batch, detailed=not provider.inline, run_id=run_id
        )

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
        each element to ``on_result`` as it ends. ``gate`` is entered around each provider
        attempt (cluster-wide or per-run limits); ``run_id`` names the batch in the run log (a
        Dask partition recomputed after its worker died logs under the same id).

        Raises:
            KeyboardInterrupt: Ctrl-C; every element finished before it was reported, and
                ``on_result`` is not called once this has raised (see :class:`Handover`).
        """
        engine = self.engine
        # Inline runs report on this thread and are over when they return; a run on the loop
        # may go on after Ctrl-C gave up waiting for it, so its reports pass a hand-over.
        handover = None if engine.provider.inline else Handover(on_result)
        report = on_result if handover is None else handover
        recorder = self._recorder(batch, run_id)
        if recorder is not None:
            # The run log records every element, even one that ends after the hand-over closed.
            report = recorder.wrap(report)
        with tracing.flow_span(self.name, engine.provider.name, len(batch)) as failures:
            report = failures.watch(report)  # failed elements are reported, not raised
            try:
                if handover is None:
                    engine.run_inline(batch, report)
                else:
                    run_sync(
                        engine.run_async(batch, report, concurrency or self.concurrency, gate=gate)
                    )
            finally:
                if handover is not None:
                    handover.close()
                if recorder is not None:
                    recorder.flush()

    async def stream_one(
        self, values: Mapping[str, str], emit: Emit, *, concurrency: int | None = None
    ) -> RunResult:
        """Run one validated element on the caller's loop, handing ``emit`` its text as the
        provider streams it and its images when ready (see :meth:`Engine.stream_one`); the
        result is recorded in the run log as :meth:`arun` records it.

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
        with tracing.flow_span(self.name, engine.provider.name, 1) as failures:
            report = failures.watch(report)  # the span names the element that failed
            try:
                # Reported by the engine: a run whose caller went away still ends its call in
                # flight (paid for), and the run log keeps it.
                return await engine.stream_one(
                    values, emit, concurrency=concurrency or self.concurrency, on_result=report
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
        """Run ``batch`` on the caller's event loop, reporting each element to ``on_result``.
        ``limiter`` shares one concurrency limit with other runs (an evaluation's variants and
        judges on one endpoint); ``concurrency`` is then ignored. ``gate`` is entered around
        each provider attempt."""
        recorder = self._recorder(batch)
        if recorder is not None:
            on_result = recorder.wrap(on_result)
        with tracing.flow_span(self.name, self.engine.provider.name, len(batch)) as failures:
            on_result = failures.watch(on_result)  # failed elements are reported, not raised
            await self._arun(batch, on_result, recorder, concurrency, limiter, gate)

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
