"""The flow objects users hold: one interface for a local flow and a remote one.

:class:`BaseFlow` implements everything users call (``run``, ``run_batch``, ``run_dataframe``,
``form``, display) on top of two things a concrete flow supplies: its variable spec and a way to
execute a validated batch. :class:`LocalFlow` runs in-process with a provider; the client's
remote flow runs over HTTP.
"""

from __future__ import annotations

import sys
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .aio import run_sync
from .cache import open_cache
from .engine import Engine, OnResult, Outcomes, Plan
from .errors import BatchError, ConfigError
from .media import MediaStore
from .model import FlowGraph, load_flow_file, parse_flow
from .providers.base import Provider
from .providers.registry import make_provider
from .result import RunResult
from .runlog import RunRecorder, open_runlog
from .settings import get_settings
from .validate import VariableSpec

if TYPE_CHECKING:
    import pandas as pd

    from .providers.calls import Gate
    from .scale.spec import FlowSpec

__all__ = ["BaseFlow", "LocalFlow", "load_flow"]


class BaseFlow(ABC):
    """What every flow offers, local or remote."""

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

    @abstractmethod
    def _execute(
        self, batch: Sequence[Mapping[str, str]], on_result: OnResult, concurrency: int | None
    ) -> None:
        """Run an already-validated batch, reporting each element to ``on_result`` as it ends."""

    def describe(self) -> list[dict[str, str]]:
        """Return the contract's describe response: ``{"name", "type"}`` items, variables first."""
        return [{"name": v, "type": "variable"} for v in self.variables] + [
            {"name": o, "type": "output"} for o in self.outputs
        ]

    def run(self, variables: Mapping[str, Any] | None = None, /, **kwargs: Any) -> RunResult:
        """Run the flow once. Variables come as a mapping, keyword arguments, or both.

        Returns:
            A :class:`RunResult`: output name -> text or image URL, with a rich display.

        Raises:
            InputError: variables missing, unknown or not strings (every problem listed).
            ProviderError: the provider failed.
        """
        values = {**(variables or {}), **kwargs}
        self.spec.check_one(values)
        try:
            return self._run_validated([values], progress=False, concurrency=None)[0]
        except BatchError as exc:
            raise exc.errors[0] from None

    def run_batch(
        self,
        batch: Sequence[Mapping[str, Any]],
        *,
        progress: bool = False,
        concurrency: int | None = None,
    ) -> list[RunResult]:
        """Run the flow once per element; the whole batch is validated before anything runs.

        Returns:
            One :class:`RunResult` per element, in input order.

        Raises:
            InputError: some element's variables are wrong (every problem, with its index).
            BatchError: some elements failed at run time; ``.results`` keeps the others.
        """
        if isinstance(batch, Mapping) or not isinstance(batch, Sequence):
            raise TypeError("run_batch takes a list of variable mappings; use run() for one run")
        batch = list(batch)
        self.spec.check_batch(batch)
        return self._run_validated(batch, progress=progress, concurrency=concurrency)

    def _run_validated(
        self,
        batch: Sequence[Mapping[str, str]],
        *,
        progress: bool,
        concurrency: int | None,
        on_result: OnResult | None = None,
        keep: bool = True,
    ) -> list[RunResult]:
        # keep=False: the caller takes what it needs in on_result (a 100,000-row DataFrame
        # batch must not hold every RunResult as well).
        outcomes = Outcomes(len(batch), keep=keep)
        bar = _progress_bar(len(batch), self.name) if progress else None

        def collect(i: int, result: RunResult | None, exc: BaseException | None) -> None:
            outcomes(i, result, exc)
            if bar is not None:
                bar.update(1)
            if on_result is not None:
                on_result(i, result, exc)

        if bar is None and on_result is None:
            collect = outcomes  # type: ignore[assignment]  # one call less per row
        try:
            self._execute(batch, collect, concurrency)
        finally:
            if bar is not None:
                bar.close()
        return outcomes.value()

    def run_dataframe(
        self,
        df: pd.DataFrame,
        columns: Mapping[str, str] | None = None,
        *,
        fill: str | None = None,
        progress: bool = True,
        concurrency: int | None = None,
        error_column: str = "error",
        rpm: float | None = None,
        tpm: float | None = None,
    ) -> pd.DataFrame:
        """Run the flow once per row of ``df``; see :func:`flownb.frame.run_dataframe`.

        ``df`` may be a Dask DataFrame: the result is then a lazy Dask DataFrame (see
        :func:`flownb.scale.dask.run_dataframe`), and ``concurrency``, ``rpm`` and ``tpm`` hold
        across the whole cluster. On a pandas frame, ``rpm`` / ``tpm`` limit this run in
        addition to the flow's own limits (local flows only).

        Returns:
            A copy of ``df`` (index and columns kept) with one column per output, and an
            ``error_column`` when some rows failed (always, on a Dask frame).

        Raises:
            ConfigError: ``rpm`` / ``tpm`` given for a flow that does not run locally.
        """
        from .frame import run_dataframe

        if _is_dask_frame(df):
            from .scale.dask import run_dataframe as run_dask

            return run_dask(
                self,
                df,
                columns,
                fill=fill,
                concurrency=concurrency,
                rpm=rpm,
                tpm=tpm,
                error_column=error_column,
            )
        flow: BaseFlow = self
        if rpm or tpm:
            if not isinstance(self, LocalFlow):
                raise ConfigError("rpm= and tpm= per run apply to local flows only")
            flow = self.gated(_run_limits(rpm, tpm))
        return run_dataframe(
            flow,
            df,
            columns,
            fill=fill,
            progress=progress,
            concurrency=concurrency,
            error_column=error_column,
        )

    def form(self) -> Any:
        """Return an ipywidgets form: an input per variable, a Run button, outputs below."""
        from .notebook.widgets import FlowForm

        return FlowForm(self)

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} {self.name!r} variables={self.variables!r} "
            f"outputs={self.outputs!r}>"
        )

    def _repr_markdown_(self) -> str:
        def names(items: list[str]) -> str:
            return ", ".join(f"`{n}`" for n in items) or "*(none)*"

        return (
            f"**Flow `{self.name}`**\n\n- variables: {names(self.variables)}\n"
            f"- outputs: {names(self.outputs)}"
        )


def _is_dask_frame(df: Any) -> bool:
    # Without importing dask: a Dask DataFrame exists only if dask.dataframe was imported.
    dd = sys.modules.get("dask.dataframe")
    return dd is not None and isinstance(df, dd.DataFrame)


def _run_limits(rpm: float | None, tpm: float | None) -> Gate | None:
    from .providers.tokens import RequestGate, TokenGate, chain

    return chain(RequestGate(rpm) if rpm else None, TokenGate(tpm) if tpm else None)


def _progress_bar(total: int, name: str) -> Any:
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=name, unit="row", leave=True)


class LocalFlow(BaseFlow):
    """A flow executed in-process by the engine."""

    def __init__(
        self,
        graph: FlowGraph,
        *,
        name: str = "flow",
        provider: Provider | str | None = None,
        concurrency: int | None = None,
        media_url: Callable[[str], str] | None = None,
        cache: bool | None = None,
        rpm: float | None = None,
        timeout: float | None = None,
        retries: int | None = None,
        log: bool | None = None,
        tpm: float | None = None,
        home: str | Path | None = None,
        source: Mapping[str, Any] | None = None,
    ) -> None:
        settings = get_settings()
        home = Path(home) if home is not None else settings.home
        media = MediaStore(home / "media")
        if provider is None or isinstance(provider, str):
            provider = make_provider(provider, media=media)
        if concurrency is not None and concurrency < 1:
            raise ConfigError(f"concurrency must be at least 1, got {concurrency}")
        self.name = name
        self.graph = graph
        # The exported JSON, kept so the flow can travel by value (pickling, Dask workers).
        self.source: dict[str, Any] = (
            dict(source) if source is not None else graph.model_dump(mode="json", by_alias=True)
        )
        self.plan = Plan(graph)
        self.provider = provider
        self.concurrency = concurrency or settings.concurrency
        # Call cache (on unless cache=False / FLOWNB_CACHE=0) and run log (FLOWNB_RUNLOG).
        use_cache = settings.cache if cache is None else cache
        use_log = settings.runlog if log is None else log
        # What the flow was set up with, resolved: the knobs a FlowSpec carries to workers.
        self.home = home
        self.knobs: dict[str, Any] = {
            "rpm": rpm if rpm is not None else settings.requests_per_minute,
            "tpm": tpm if tpm is not None else settings.tokens_per_minute,
            "timeout": timeout if timeout is not None else settings.openai_timeout,
            "retries": retries if retries is not None else settings.retries,
            "cache": use_cache,
            "log": use_log,
        }
        self.engine = Engine(
            self.plan,
            provider,
            media_url or media.file_url,
            cache=open_cache(home) if use_cache and provider.cacheable else None,
            rpm=self.knobs["rpm"],
            timeout=self.knobs["timeout"],
            retries=self.knobs["retries"],
            tpm=self.knobs["tpm"],
        )
        self.runlog = open_runlog(home) if use_log else None
        if not provider.supports_images and any(s.kind == "image" for s in self.plan.steps):
            raise ConfigError(f"provider {provider.name!r} cannot run this flow's image nodes")

    @property
    def spec(self) -> VariableSpec:
        """The flow's variables, for validation."""
        return self.plan.spec

    @property
    def outputs(self) -> list[str]:
        """The names of the outputs a run yields, in node order."""
        return list(self.plan.outputs)

    @property
    def defaults(self) -> dict[str, str]:
        """Each variable's default value as the web tool exported it."""
        return dict(self.plan.defaults)

    def _execute(
        self, batch: Sequence[Mapping[str, str]], on_result: OnResult, concurrency: int | None
    ) -> None:
        self._execute_with(batch, on_result, concurrency)

    def _execute_with(
        self,
        batch: Sequence[Mapping[str, str]],
        on_result: OnResult,
        concurrency: int | None,
        *,
        gate: Gate | None = None,
        run_id: str | None = None,
    ) -> None:
        """:meth:`_execute` with an extra ``gate`` around each provider attempt and the run
        log's ``run_id`` for this batch (both used by Dask partitions and per-run limits)."""
        recorder = self._recorder(batch, run_id)
        if recorder is not None:
            on_result = recorder.wrap(on_result)
        try:
            if self.provider.inline:
                self.engine.run_inline(batch, on_result)
            else:
                run_sync(
                    self.engine.run_async(
                        batch, on_result, concurrency or self.concurrency, gate=gate
                    )
                )
        finally:
            if recorder is not None:
                recorder.flush()

    def _recorder(
        self, batch: Sequence[Mapping[str, str]], run_id: str | None = None
    ) -> RunRecorder | None:
        if self.runlog is None or not batch:
            return None
        return self.runlog.recorder(
            self.name, self.provider.name, batch, detailed=not self.provider.inline, run_id=run_id
        )

    def gated(self, gate: Gate | None, run_id: str | None = None) -> BaseFlow:
        """Return a view of this flow whose runs enter ``gate`` around each provider attempt
        and log under ``run_id`` (the engine and its caches are shared, nothing is copied)."""
        return _GatedFlow(self, gate, run_id)

    def to_spec(self, **changes: Any) -> FlowSpec:
        """Return the flow as a small picklable :class:`~flownb.scale.spec.FlowSpec` (its JSON,
        name, provider name and run knobs; never a key), with ``changes`` applied.

        Raises:
            ConfigError: the provider is an instance that cannot be rebuilt from its name.
        """
        from .scale.spec import spec_of

        return spec_of(self, **changes)

    def __reduce__(self) -> tuple[Any, ...]:
        # By value: the spec, rebuilt (once per process) on the other side. Threads, sockets
        # and SQLite handles never travel.
        from .scale.spec import flow_from_spec

        return (flow_from_spec, (self.to_spec(),))

    def __copy__(self) -> LocalFlow:
        # A shallow copy shares the engine, as it did before pickling went by spec.
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        return new

    def __deepcopy__(self, memo: dict[int, Any]) -> LocalFlow:
        # A deep copy is a flow of its own (fresh engine), not the process's shared one.
        return self.to_spec().build()

    async def arun_batch(
        self, batch: Sequence[Mapping[str, Any]], *, concurrency: int | None = None
    ) -> list[RunResult]:
        """Async :meth:`run_batch` on the caller's event loop (for async applications).

        Raises:
            InputError, BatchError: as :meth:`run_batch`.
        """
        batch = list(batch)
        self.spec.check_batch(batch)
        collect = Outcomes(len(batch))
        recorder = self._recorder(batch)
        try:
            on_result = recorder.wrap(collect) if recorder is not None else collect
            await self.engine.run_async(batch, on_result, concurrency or self.concurrency)
        finally:
            if recorder is not None:
                recorder.flush()
        return collect.value()

    async def arun(self, variables: Mapping[str, Any] | None = None, /, **kwargs: Any) -> RunResult:
        """Async :meth:`run` on the caller's event loop.

        Raises:
            InputError, ProviderError: as :meth:`run`.
        """
        try:
            return (await self.arun_batch([{**(variables or {}), **kwargs}]))[0]
        except BatchError as exc:
            raise exc.errors[0] from None


def load_flow(
    source: str | Path | Mapping[str, Any],
    *,
    provider: Provider | str | None = None,
    concurrency: int | None = None,
    cache: bool | None = None,
    rpm: float | None = None,
    timeout: float | None = None,
    retries: int | None = None,
    log: bool | None = None,
    tpm: float | None = None,
) -> LocalFlow:
    """Load an exported flow (a path to its JSON file, or the decoded JSON) for local runs.

    ``provider`` is a provider name (``"offline"``, ``"openai"``) or instance; by default
    ``FLOWNB_PROVIDER``, else offline. ``concurrency`` bounds provider calls in flight
    (``FLOWNB_CONCURRENCY``, default 16); ``rpm`` caps requests per minute (``FLOWNB_RPM``);
    ``timeout`` is seconds per provider attempt (``FLOWNB_TIMEOUT``); ``retries`` per call after
    a 429/5xx/timeout (``FLOWNB_RETRIES``, default 8); ``tpm`` caps tokens per minute
    (``FLOWNB_TPM``; estimated before each call, corrected by the usage reported).
    ``cache=False`` bypasses the call cache (``FLOWNB_CACHE=0``); ``log=False`` keeps runs out
    of the run log (``FLOWNB_RUNLOG=0``).

    Returns:
        A :class:`LocalFlow`.

    Raises:
        FlowFileError: the file is missing, not JSON, or not a valid graph.
        ConfigError: the provider cannot be set up.
    """
    if isinstance(source, Mapping):
        graph, name, data = parse_flow(source, "flow"), "flow", dict(source)
    else:
        graph, name, data = load_flow_file(source), Path(source).stem, None
    return LocalFlow(
        graph,
        name=name,
        provider=provider,
        concurrency=concurrency,
        cache=cache,
        rpm=rpm,
        timeout=timeout,
        retries=retries,
        log=log,
        tpm=tpm,
        source=data,
    )


class _GatedFlow(BaseFlow):
    """A :class:`LocalFlow` seen through a gate and a run id (see :meth:`LocalFlow.gated`)."""

    def __init__(self, flow: LocalFlow, gate: Gate | None, run_id: str | None) -> None:
        self.flow = flow
        self.name = flow.name
        self.gate = gate
        self.run_id = run_id

    @property
    def spec(self) -> VariableSpec:
        """The flow's variables, for validation."""
        return self.flow.spec

    @property
    def outputs(self) -> list[str]:
        """The names of the outputs a run yields, in node order."""
        return self.flow.outputs

    def _execute(
        self, batch: Sequence[Mapping[str, str]], on_result: OnResult, concurrency: int | None
    ) -> None:
        self.flow._execute_with(batch, on_result, concurrency, gate=self.gate, run_id=self.run_id)
