"""The flow objects users hold: one interface for a local flow and a remote one.

:class:`BaseFlow` implements everything users call (``run``, ``run_batch``, ``run_dataframe``,
``form``, display) on top of two things a concrete flow supplies: its variable spec and a way to
execute a validated batch. :class:`LocalFlow` runs in-process with a provider; the client's
remote flow runs over HTTP.
"""

from __future__ import annotations

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
from .providers.limits import AdaptiveLimiter
from .providers.registry import make_provider
from .result import RunResult
from .runlog import RunRecorder, open_runlog
from .settings import get_settings
from .validate import VariableSpec

if TYPE_CHECKING:
    import pandas as pd

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
        trace: bool = False,
    ) -> pd.DataFrame:
        """Run the flow once per row of ``df``; see :func:`flownb.frame.run_dataframe`.

        Returns:
            A copy of ``df`` (index and columns kept) with one column per output (and, with
            ``trace=True``, one per generation node), and an ``error_column`` when some rows
            failed.
        """
        from .frame import run_dataframe

        return run_dataframe(
            self,
            df,
            columns,
            fill=fill,
            progress=progress,
            concurrency=concurrency,
            error_column=error_column,
            trace=trace,
        )

    def preview(
        self,
        data: Any,
        columns: Mapping[str, str] | None = None,
        *,
        fill: str | None = None,
    ) -> Any:
        """Return what running over ``data`` (a DataFrame, a list of variable mappings, or one
        mapping) would do, without calling the provider: a :class:`flownb.preview.Preview` with
        the rendered prompt of each call, ``n_calls`` (cache hits excluded) and ``est_tokens``.

        Raises:
            InputError: the data does not fit the flow's variables.
        """
        from .preview import preview_data

        return preview_data(self, data, columns, fill)

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
    ) -> None:
        settings = get_settings()
        media = MediaStore(settings.media_dir)
        if provider is None or isinstance(provider, str):
            provider = make_provider(provider, media=media)
        if concurrency is not None and concurrency < 1:
            raise ConfigError(f"concurrency must be at least 1, got {concurrency}")
        self.name = name
        self.graph = graph
        # What the flow was built with, so a variant (with_params/with_prompts) is rebuilt alike:
        # same provider instance (its connection pool), same knobs.
        self._options: dict[str, Any] = {
            "name": name,
            "provider": provider,
            "concurrency": concurrency,
            "media_url": media_url,
            "cache": cache,
            "rpm": rpm,
            "timeout": timeout,
            "retries": retries,
            "log": log,
        }
        self.plan = Plan(graph)
        self.provider = provider
        self.concurrency = concurrency or settings.concurrency
        # Call cache (on unless cache=False / FLOWNB_CACHE=0) and run log (FLOWNB_RUNLOG).
        use_cache = settings.cache if cache is None else cache
        self.engine = Engine(
            self.plan,
            provider,
            media_url or media.file_url,
            cache=open_cache(settings.home) if use_cache and provider.cacheable else None,
            rpm=rpm if rpm is not None else settings.requests_per_minute,
            timeout=timeout if timeout is not None else settings.openai_timeout,
            retries=retries if retries is not None else settings.retries,
        )
        use_log = settings.runlog if log is None else log
        self.runlog = open_runlog(settings.home) if use_log else None
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
        recorder = self._recorder(batch)
        if recorder is not None:
            on_result = recorder.wrap(on_result)
        try:
            if self.provider.inline:
                self.engine.run_inline(batch, on_result)
            else:
                run_sync(self.engine.run_async(batch, on_result, concurrency or self.concurrency))
        finally:
            if recorder is not None:
                recorder.flush()

    def _recorder(self, batch: Sequence[Mapping[str, str]]) -> RunRecorder | None:
        if self.runlog is None or not batch:
            return None
        return self.runlog.recorder(
            self.name, self.provider.name, batch, detailed=not self.provider.inline
        )

    def variant(self, graph: FlowGraph, *, name: str | None = None) -> LocalFlow:
        """Return a new flow running ``graph`` with this flow's provider and settings (and
        ``name``, else this flow's name)."""
        return LocalFlow(graph, **{**self._options, "name": name or self.name})

    def with_params(
        self, per_node: Mapping[str, Mapping[str, Any]] | None = None, /, **params: Any
    ) -> LocalFlow:
        """Return a variant with other model parameters; this flow is left untouched.

        ``with_params(temperature=0.2)`` sets them on every generation node;
        ``with_params({"Intro": {"temperature": 0.2}})`` on the node of that name (or id).
        ``None`` removes a parameter. Cache keys follow the parameters, so nothing is shared.

        Raises:
            ConfigError: an unknown node (the message lists the choices), or bad parameters.
        """
        from . import variants

        return self.variant(variants.with_params(self.graph, per_node, params))

    def with_prompts(self, prompts: Mapping[str, str]) -> LocalFlow:
        """Return a variant whose named nodes (name or id -> prompt) have other prompts, with
        the same ``{variable}`` rules; this flow is left untouched.

        Raises:
            ConfigError: an unknown node (the message lists the choices), or a non-string prompt.
        """
        from . import variants

        return self.variant(variants.with_prompts(self.graph, prompts))

    async def arun_each(
        self,
        batch: Sequence[Mapping[str, str]],
        on_result: OnResult,
        *,
        concurrency: int | None = None,
        limiter: AdaptiveLimiter | None = None,
    ) -> None:
        """Run an already-validated batch on the caller's loop, reporting each element to
        ``on_result`` as it ends (and to the run log, as :meth:`run_batch` does). ``limiter``
        shares one concurrency limit with other runs (see :func:`flownb.evaluate`)."""
        recorder = self._recorder(batch)
        if recorder is not None:
            on_result = recorder.wrap(on_result)
        try:
            await self.engine.run_async(
                batch, on_result, concurrency or self.concurrency, limiter=limiter
            )
        finally:
            if recorder is not None:
                recorder.flush()

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
) -> LocalFlow:
    """Load an exported flow (a path to its JSON file, or the decoded JSON) for local runs.

    ``provider`` is a provider name (``"offline"``, ``"openai"``) or instance; by default
    ``FLOWNB_PROVIDER``, else offline. ``concurrency`` bounds provider calls in flight
    (``FLOWNB_CONCURRENCY``, default 16); ``rpm`` caps requests per minute (``FLOWNB_RPM``);
    ``timeout`` is seconds per provider attempt (``FLOWNB_TIMEOUT``); ``retries`` per call after
    a 429/5xx/timeout (``FLOWNB_RETRIES``, default 8). ``cache=False`` bypasses the call cache
    (``FLOWNB_CACHE=0``); ``log=False`` keeps runs out of the run log (``FLOWNB_RUNLOG=0``).

    Returns:
        A :class:`LocalFlow`.

    Raises:
        FlowFileError: the file is missing, not JSON, or not a valid graph.
        ConfigError: the provider cannot be set up.
    """
    if isinstance(source, Mapping):
        graph, name = parse_flow(source, "flow"), "flow"
    else:
        graph, name = load_flow_file(source), Path(source).stem
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
    )
