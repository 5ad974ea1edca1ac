"""How an evaluation's variants run together: local flows with an async provider on flownb's
background loop, one :class:`~flownb.providers.limits.AdaptiveLimiter` per endpoint (variants on
one endpoint share it), one bound on the sum of calls in flight and one set of calls in flight
(a call two variants make alike is paid once); remote flows in a thread, inline (offline) flows
on the calling thread. What each variant's rows gave is collected in a :class:`_Collected`.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...config.pricing import Money
from ...core.flow import FlowCore
from ...core.local import LocalCore, local_of
from ...errors import ConfigError, one_line
from ...frames.run import INTERRUPTED
from ...infra.aio import run_sync
from ...providers.calls import SHARED_TWINS
from ...providers.limits import AdaptiveLimiter
from ...providers.repeat import unrepeated
from ...providers.spend import SpendCap
from ...providers.tokens import chain
from ...runtime.pipeline import Observers
from ...scorers import Block, Scorer
from ...scorers.judge import JudgeScorer
from ..figures.money import Charged, money_of_result, prompt_cache_saved_of
from ..figures.speed import row_speed

if TYPE_CHECKING:
    import pandas as pd


OnResult = Callable[[int, Any, BaseException | None], None]


class _Collected(Charged):
    """One variant's outcomes as columns, filled as rows finish (no RunResult kept), and the
    judges' bill for grading them."""

    def __init__(self, n: int, outputs: Sequence[str], plan: Any = None) -> None:
        super().__init__(n)
        self.outputs = list(dict.fromkeys(outputs))
        self.plan = plan  # the flow's plan: which calls wait for which (the critical path)
        # Per row (see .speed.row_speed): provider time on the critical path, and the output
        # tokens and provider seconds of the calls that went to the provider.
        self.speed: list[tuple[float, float, float]] = [(math.nan, 0.0, 0.0)] * n
        self.values: dict[str, list[Any]] = {o: [None] * n for o in self.outputs}
        self.latency: list[float] = [math.nan] * n
        self.tokens: list[float] = [math.nan] * n
        # Spent, saved and the row's price, kept apart (see .money).
        self.money: list[Money | None] = [None] * n
        self.prompt_cache: list[float] = [math.nan] * n  # what providers' prompt caches saved
        self.cached: list[bool] = [False] * n
        self.error: list[str | None] = [None] * n
        self.done: list[bool] = [False] * n
        # The models that answered, per generation node (its position in the plan).
        self.models: dict[int, set[str]] = {}

    def __call__(self, i: int, result: Any, exc: BaseException | None) -> None:
        if exc is not None:
            self.error[i] = one_line(exc, code=True)
            self.done[i] = True
            return
        for out, column in self.values.items():
            column[i] = result.get(out)
        self.latency[i] = result.latency
        self.money[i] = money_of_result(result)
        self.prompt_cache[i] = prompt_cache_saved_of(result)
        self.cached[i] = bool(result) and len(result.cached) >= len(result)
        tokens = 0
        reported = False
        models = self.models
        for k, g in enumerate(result.generations):
            model = g.model
            if model:
                seen = models.get(k)
                if seen is None:
                    models[k] = {model}
                else:
                    seen.add(model)
            usage = g.usage
            if usage and not g.cached:
                reported = True
                tokens += usage.get("total_tokens", 0)
        if reported:
            self.tokens[i] = float(tokens)
        self.speed[i] = row_speed(self.plan, result.generations)
        self.done[i] = True  # last: a row is never seen done without its values

    def mark_interrupted(self) -> int:
        """Mark every unfinished row as interrupted; return how many finished."""
        for i, done in enumerate(self.done):
            if not done:
                self.error[i] = INTERRUPTED
        return sum(self.done)


def _paid(result: Any) -> int:
    """Return how many provider calls a finished local run made (cache hits and repeats
    excluded): what the preview counted for it."""
    return sum(1 for g in result.generations if not g.cached)


def _with_bar(
    on_result: OnResult,
    bar: Any,
    *,
    remote: bool = False,
    key: str | None = None,
    judge: bool = False,
) -> OnResult:
    """Return ``on_result`` that also advances ``bar`` by the provider calls each run made (the
    bar counts calls, as the preview does, not rows; a served flow's run is one call). With
    ``key`` (a variant's name), a live view's summary also gets the run; ``judge``: the runs
    are a judge's calls, whose money the bar's meter keeps apart."""
    if bar is None:
        return on_result

    from ...show.meter import show

    live = getattr(bar, "record", None) if key is not None else None

    def report(i: int, result: Any, exc: BaseException | None) -> None:
        on_result(i, result, exc)
        if live is not None:
            live(key, i, result, exc)
        if exc is None:
            show(bar, result, judge=judge)  # money spent so far and saved, beside the bar
            made = 1 if remote else _paid(result)
            if made:
                bar.update(made)

    return report


def _bind_judges(judges: Sequence[JudgeScorer], variants: Mapping[str, FlowCore]) -> None:
    """Bind each judge to the flow it grades (the first variant giving its output, else the
    first variant), and refuse, before any call, one that would run offline.

    Raises:
        ConfigError: a judge would run on a provider that cannot judge.
    """
    flows = list(variants.values())
    for j in judges:
        graded = next((f for f in flows if j.output in f.outputs), flows[0])
        j.grades(graded)
        j.check()


def _uses_loop(flow: FlowCore) -> bool:
    local = local_of(flow)
    return local is not None and not local.provider.inline


def _endpoint_key(flow: LocalCore) -> str:
    """Return what tells one endpoint from another (its name and identity; never the key)."""
    endpoint = flow.config.endpoint
    return json.dumps(
        # Repeats of one flow call one endpoint: one limiter for them all.
        [endpoint.name if endpoint is not None else "", dict(unrepeated(flow.provider).identity())],
        sort_keys=True,
        default=str,
    )


class _Bound:
    """The evaluation's bound on provider calls in flight, summed over every endpoint: a gate
    (see :data:`flownb.providers.calls.Gate`) entered after each endpoint's own limiter."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._slots: asyncio.Semaphore | None = None

    def __call__(self, call: Any) -> _Bound:
        return self

    async def __aenter__(self) -> Callable[[Any], None]:
        if self._slots is None:  # made on the loop that runs the calls
            self._slots = asyncio.Semaphore(self.limit)
        await self._slots.acquire()
        return _settled

    async def __aexit__(self, *exc: object) -> None:
        assert self._slots is not None
        self._slots.release()


def _settled(gen: Any) -> None:
    return None


class _Limits:
    """Concurrency for an evaluation: each endpoint its own :class:`AdaptiveLimiter` (its own
    back-off: a 429 from one endpoint never slows another), and ``total`` bounding the sum.

    ``concurrency`` given: every endpoint may use up to it, and the sum stays within it. Not
    given: each endpoint gets the largest limit of its flows, and ``total`` is their sum.
    """

    def __init__(
        self, concurrency: int | None, flows: Sequence[FlowCore], cap: SpendCap | None = None
    ) -> None:
        self.cap = cap  # the spend cap every variant and judge shares (None: none)
        if concurrency is not None and concurrency < 0:
            raise ConfigError(f"concurrency must be at least 1, got {concurrency}")
        self.concurrency = concurrency or None  # 0: the default, as before
        self._limiters: dict[str, AdaptiveLimiter] = {}
        self._sizes: dict[str, int] = {}
        for local in filter(None, map(local_of, flows)):
            key = _endpoint_key(local)
            self._sizes[key] = max(self._sizes.get(key, 0), local.concurrency)
        self.total = concurrency or sum(self._sizes.values()) or 16

    def limiter(self, flow: LocalCore) -> AdaptiveLimiter:
        """Return the limiter of ``flow``'s endpoint (made on first use)."""
        key = _endpoint_key(flow)
        limiter = self._limiters.get(key)
        if limiter is None:
            size = self.concurrency or self._sizes.get(key) or flow.concurrency
            limiter = self._limiters[key] = AdaptiveLimiter(size, flow.engine.pacer)
        return limiter


def _run_all(
    jobs: Sequence[tuple[FlowCore, Sequence[Mapping[str, str]], OnResult]],
    limits: _Limits,
) -> None:
    """Run every job together: inline flows here first (no I/O to overlap), then the others
    on the background loop under their endpoint's limiter and ``limits.total`` (remote flows in
    a thread each). Once this returns or raises (Ctrl-C), no job's ``on_result`` is called
    again (see :class:`Observers`)."""
    handovers = [Observers(on_result) for _, _, on_result in jobs]
    jobs = [(flow, batch, h) for (flow, batch, _), h in zip(jobs, handovers, strict=True)]
    try:
        _run_jobs(jobs, limits)
    finally:
        for handover in handovers:
            handover.close()


def _run_jobs(
    jobs: Sequence[tuple[FlowCore, Sequence[Mapping[str, str]], OnResult]],
    limits: _Limits,
) -> None:
    total = limits.total
    for flow, batch, on_result in jobs:
        if not _uses_loop(flow) and local_of(flow) is not None:
            _run_sync(flow, batch, on_result, total)
    rest = [job for job in jobs if local_of(job[0]) is None or _uses_loop(job[0])]
    if not rest:
        return
    local = [f for job in rest if (f := local_of(job[0])) is not None]
    # The sum needs a bound of its own only when several endpoints run at once.
    several = len({_endpoint_key(f) for f in local}) > 1

    async def together() -> None:
        # A call two variants (or judges) make alike is paid once, even when both are in
        # flight at the same moment: what the preview counts.
        SHARED_TWINS.set({})
        # Each SDK's first-use set-up, done before any call is in flight: it blocks the loop,
        # and would otherwise be counted in the time of every answer then awaited.
        for provider in {id(f.provider): f.provider for f in local}.values():
            provider.warm()
        bound = _Bound(total) if several else None
        tasks = []
        for flow, batch, on_result in rest:
            here = local_of(flow)
            if here is not None:
                limiter = limits.limiter(here)
                gate = bound if limits.cap is None else chain(bound, here.spend_gate(limits.cap))
                tasks.append(
                    here.arun_each(
                        batch, on_result, concurrency=limiter.limit, limiter=limiter, gate=gate
                    )
                )
            else:
                tasks.append(asyncio.to_thread(_run_sync, flow, batch, on_result, total))
        await asyncio.gather(*tasks)

    run_sync(together())


def _run_sync(
    flow: FlowCore, batch: Sequence[Mapping[str, str]], on_result: OnResult, limit: int
) -> None:
    flow.run_each(batch, on_result, concurrency=limit, check=False)


@dataclass
class _Round:
    """One repeat of the evaluation: the variants and scorers (judges among them) whose calls
    are keyed with its repeat number."""

    variants: dict[str, FlowCore]
    graders: list[Scorer]
    judges: list[JudgeScorer]


def _input_block(data: pd.DataFrame) -> dict[str, list[Any]]:
    return {str(c): data[c].tolist() for c in data.columns}


def _input_rows(data: pd.DataFrame) -> list[dict[str, Any]]:
    """Return the data's rows as the judges see them (column name -> value)."""
    block = _input_block(data)
    names = list(block)
    if not names:
        return [{} for _ in range(len(data))]
    return [dict(zip(names, values, strict=True)) for values in zip(*block.values(), strict=True)]


def _block(inputs: Mapping[str, list[Any]], got: _Collected) -> Block:
    return Block({**inputs, **got.values}, len(got.done), [e is not None for e in got.error])
