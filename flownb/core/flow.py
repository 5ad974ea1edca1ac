"""What every loaded flow is and runs, local or remote: :class:`FlowCore` (``run``,
``stream``, ``run_batch``, ``run_each``, their async twins, the spend cap and the run's bar) on
top of two things a concrete flow supplies: its variable spec and a way to execute a validated
batch. :class:`~flownb.core.local.LocalCore` runs in-process with a provider.

This is the runnable core the features below the surface use (frames, scorers, evaluation, the
server). The objects users hold (:class:`flownb.BaseFlow`, :class:`flownb.LocalFlow`, the
remote flow) are composed from it at the top floor, in :mod:`flownb.flows`, where the features a
flow opens (``run_dataframe``, ``preview``, ``form``, the notebook's live views) are imported
directly; this module imports none of them. What a feature asks of a flow it asks the flow:
:meth:`FlowCore.open_bar`, :meth:`FlowCore.preview_of`, and the capabilities below.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from ..errors import BatchError, ConfigError
from ..flowfile.model import describe
from ..flowfile.validate import VariableSpec
from ..infra.aio import stream_async, stream_sync
from ..providers.calls import announce
from ..runtime import batchrun
from ..runtime.events import StreamEvent
from ..runtime.pipeline import Outcomes
from ..runtime.result import OnResult, RunResult
from ..show.progress import Progress

if TYPE_CHECKING:
    from ..providers.calls import Gate
    from ..providers.spend import SpendCap

__all__ = ["FlowCore"]


class FlowCore(ABC):
    """What every loaded flow is and runs, local or remote (the surface's
    :class:`flownb.BaseFlow` adds the features a flow opens)."""

    # Whether the flow runs here, on a provider (a local flow): what the batch API and per-run
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
        :meth:`run_batch`. ``progress`` shows :meth:`open_bar`'s bar, with the money meter and
        slow retries' notices on it. The batch is handed down whole to
        :func:`flownb.runtime.batchrun.run_each`, which does all of that from there, with this
        flow's :meth:`_execute`.

        Raises:
            InputError: (``check=True``) some element's variables are wrong, before any runs.
            KeyboardInterrupt: Ctrl-C; every element that finished before it was reported.
            ConfigError: ``max_spend`` given and some call cannot be priced (nothing is sent).
        """
        batchrun.run_each(
            self,
            self._execute,
            batch,
            on_result,
            progress=progress,
            concurrency=concurrency,
            check=check,
            max_spend=max_spend,
        )

    def capped(
        self, max_spend: float, data: Any, gate: Gate | None = None
    ) -> tuple[FlowCore, SpendCap]:
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
        preview = data if hasattr(data, "est_cost_known") else self.preview_of(data)
        if preview is not None:
            say_over_cap(preview, cap.cap)
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

    def gated(self, gate: Gate | None, run_id: str | None = None) -> FlowCore:
        """Return a view of this flow whose runs enter ``gate`` around each provider attempt
        (a local flow's; see :meth:`flownb.core.local.LocalCore.gated`).

        Raises:
            ConfigError: this flow does not run its calls here (a remote flow).
        """
        raise ConfigError("rpm= and tpm= per run apply to local flows only")

    def preview_of(self, data: Any) -> Any:
        """Return what running over ``data`` would call (a preview; see
        :meth:`flownb.BaseFlow.preview`), or ``None`` where this core cannot tell: the spend
        cap then warns of nothing before the run (it still stops at the cap). The surface's
        flows answer with :mod:`flownb.frames.preview`."""
        return None

    def open_bar(self, batch: Sequence[Mapping[str, Any]]) -> Any:
        """Return the progress bar a run of ``batch`` shows: a terminal or widget bar here;
        the surface's flows show the notebook's live view of the rows instead, in a notebook
        front end. A bar has ``update``, ``close``, ``notice``, ``write`` and
        ``set_postfix_str``; one with ``record`` also shows each finished row."""
        return _progress_bar(len(batch), self.name)

    def frame_slot(self, labels: Sequence[Any]) -> Any:
        """Return where the frame a run over rows ``labels`` returns is shown at its end (a
        slot with ``show(frame)``), or ``None``: nothing to show here (the surface's flows show
        it in the notebook's live view)."""
        return None

    # What a feature asks of a flow instead of its type (no feature names a flow class).

    def local(self) -> FlowCore | None:
        """Return this flow when it plans and runs its calls in this process (its plan,
        provider, run configuration and runner: a :class:`~flownb.core.local.LocalCore`, which
        :func:`~flownb.core.local.local_of` gives typed), or ``None``: its calls are made
        elsewhere (a flow on a flow service), or it is a view (a gated flow runs every row
        through its gate)."""
        return None

    @property
    def served(self) -> bool:
        """Whether the flow runs on a flow service (its calls are made and priced there)."""
        return not self.in_process

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


def say_over_cap(preview: Any, cap: float, *, batch: bool = False) -> None:
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


def _progress_bar(total: int, name: str) -> Progress:
    from ..show.progress import open_bar

    # Moved by one thread of its own: rows finish on the loop thread, the bar is a widget.
    return open_bar(total, name, "row")
