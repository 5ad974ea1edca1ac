"""Running an evaluation: every variant over the same rows, then the model-graded scorers, all
under one concurrency limit and one progress bar.

1. Every variant's rows are validated before anything runs.
2. Variants run together: local flows with an async provider on flownb's background loop, with
   one :class:`~flownb.providers.limits.AdaptiveLimiter` per endpoint (variants on one endpoint
   share it; a 429 from one endpoint never slows another), one bound on the sum of calls in
   flight and one set of calls in flight (a call two variants make alike is paid once); remote
   flows in a thread (the service has its own limits); inline (offline) flows on the calling
   thread (no I/O).
3. Judges (``judge``: one call per variant and row; ``pick_best``: one per row) run after, through
   their own one-node flows, so their calls are cached, limited and logged like any other. A
   judge without ``provider=`` borrows the provider of the flow it grades; one that would run
   offline is refused before anything runs.
   The progress bar counts provider calls; its total is the dry run's count (see
   :func:`flownb.frames.preview.preview_many`).
4. Deterministic scorers grade each variant's columns; everything lands in one long frame.

With ``repeats=k`` each repeat is a round of steps 2-4 whose calls carry the repeat number in
their cache keys (:mod:`.repeats`); the rounds' variants run together, then their judges, and
the report is made of the per-row means of the rounds.

Ctrl-C keeps what finished (the rest is marked as interrupted) and, with the cache, a re-run
pays only for what is missing.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config.settings import resolve_run_config
from ..errors import ConfigError, one_line
from ..flows.local import BaseFlow, LocalFlow
from ..frames.batch_api.paid import paid_once
from ..frames.batch_api.run import prefill
from ..frames.run import INTERRUPTED, rows_to_variables
from ..infra.aio import run_sync
from ..providers.calls import SHARED_TWINS
from ..providers.limits import AdaptiveLimiter
from ..providers.repeat import unrepeated
from ..runtime.hooks import HOOKS
from ..runtime.pipeline import Handover
from ..scorers import Block, JudgeScorer, PickBest, Scorer
from ..show.notices import warn
from ..show.progress import Progress
from .params import variant_params
from .repeats import check_repeats, order_runs, repeat_flow, repeat_judge
from .report import EvalReport, ScorerInfo
from .speed import row_speed

if TYPE_CHECKING:
    import pandas as pd

    from ..frames.preview import Preview

__all__ = ["evaluate"]

OnResult = Callable[[int, Any, BaseException | None], None]
# Scorer name -> variant -> (scores, reasons), one of each per input row: the judges' answers.
Judged = dict[str, dict[str, tuple[list[Any], list[str | None]]]]


def _variants(
    flows: BaseFlow | Mapping[str, BaseFlow] | Sequence[BaseFlow],
) -> dict[str, BaseFlow]:
    if isinstance(flows, BaseFlow):
        return {flows.name: flows}
    if isinstance(flows, Sequence) and not isinstance(flows, str):
        # A list of flows: named after the flows, numbered where names repeat.
        named: dict[str, BaseFlow] = {}
        for i, flow in enumerate(flows):
            if not isinstance(flow, BaseFlow):
                raise ConfigError(f"flows[{i}] is a {type(flow).__name__}, not a flow")
            named[flow.name if flow.name not in named else f"{flow.name}_{i}"] = flow
        flows = named
    if not isinstance(flows, Mapping) or not flows:
        raise ConfigError("evaluate takes a flow or a non-empty {variant name: flow} mapping")
    for name, flow in flows.items():
        if not isinstance(name, str) or not isinstance(flow, BaseFlow):
            raise ConfigError(
                f"variant {name!r}: expected a variant name mapped to a flow, got "
                f"{type(flow).__name__}"
            )
    return dict(flows)


def _scorers(scorers: Scorer | Sequence[Scorer] | None) -> list[Scorer]:
    if scorers is None:
        return []
    items = [scorers] if isinstance(scorers, Scorer) else list(scorers)
    seen: set[str] = set()
    for s in items:
        if not isinstance(s, Scorer):
            raise ConfigError(f"not a scorer: {s!r}; build one with flownb.scorers")
        if s.name in seen:
            raise ConfigError(f"two scorers are named {s.name!r}; pass name= to tell them apart")
        seen.add(s.name)
    return items


class _Collected:
    """One variant's outcomes as columns, filled as rows finish (no RunResult kept)."""

    def __init__(self, n: int, outputs: Sequence[str], plan: Any = None) -> None:
        self.outputs = list(dict.fromkeys(outputs))
        self.plan = plan  # the flow's plan: which calls wait for which (the critical path)
        # Per row (see .speed.row_speed): provider time on the critical path, and the output
        # tokens and provider seconds of the calls that went to the provider.
        self.speed: list[tuple[float, float, float]] = [(math.nan, 0.0, 0.0)] * n
        self.values: dict[str, list[Any]] = {o: [None] * n for o in self.outputs}
        self.latency: list[float] = [math.nan] * n
        self.tokens: list[float] = [math.nan] * n
        self.cost: list[float] = [math.nan] * n
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
        self.cost[i] = result.cost
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
    on_result: OnResult, bar: Any, *, remote: bool = False, key: str | None = None
) -> OnResult:
    """Return ``on_result`` that also advances ``bar`` by the provider calls each run made (the
    bar counts calls, as the preview does, not rows; a served flow's run is one call). With
    ``key`` (a variant's name), a live view's summary also gets the run."""
    if bar is None:
        return on_result

    from ..show.meter import show

    live = getattr(bar, "record", None) if key is not None else None

    def report(i: int, result: Any, exc: BaseException | None) -> None:
        on_result(i, result, exc)
        if live is not None:
            live(key, i, result, exc)
        if exc is None:
            show(bar, result)  # money spent so far and the cache's saving, beside the bar
            made = 1 if remote else _paid(result)
            if made:
                bar.update(made)

    return report


def _bind_judges(judges: Sequence[JudgeScorer], variants: Mapping[str, BaseFlow]) -> None:
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


def _uses_loop(flow: BaseFlow) -> bool:
    return isinstance(flow, LocalFlow) and not flow.provider.inline


def _endpoint_key(flow: LocalFlow) -> str:
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

    def __init__(self, concurrency: int | None, flows: Sequence[BaseFlow]) -> None:
        if concurrency is not None and concurrency < 0:
            raise ConfigError(f"concurrency must be at least 1, got {concurrency}")
        self.concurrency = concurrency or None  # 0: the default, as before
        self._limiters: dict[str, AdaptiveLimiter] = {}
        self._sizes: dict[str, int] = {}
        for flow in flows:
            if isinstance(flow, LocalFlow):
                key = _endpoint_key(flow)
                self._sizes[key] = max(self._sizes.get(key, 0), flow.concurrency)
        self.total = concurrency or sum(self._sizes.values()) or 16

    def limiter(self, flow: LocalFlow) -> AdaptiveLimiter:
        """Return the limiter of ``flow``'s endpoint (made on first use)."""
        key = _endpoint_key(flow)
        limiter = self._limiters.get(key)
        if limiter is None:
            size = self.concurrency or self._sizes.get(key) or flow.concurrency
            limiter = self._limiters[key] = AdaptiveLimiter(size, flow.engine.pacer)
        return limiter


def _run_all(
    jobs: Sequence[tuple[BaseFlow, Sequence[Mapping[str, str]], OnResult]],
    limits: _Limits,
) -> None:
    """Run every job together: inline flows here first (no I/O to overlap), then the others
    on the background loop under their endpoint's limiter and ``limits.total`` (remote flows in
    a thread each). Once this returns or raises (Ctrl-C), no job's ``on_result`` is called
    again (see :class:`Handover`)."""
    handovers = [Handover(on_result) for _, _, on_result in jobs]
    jobs = [(flow, batch, h) for (flow, batch, _), h in zip(jobs, handovers, strict=True)]
    try:
        _run_jobs(jobs, limits)
    finally:
        for handover in handovers:
            handover.close()


def _run_jobs(
    jobs: Sequence[tuple[BaseFlow, Sequence[Mapping[str, str]], OnResult]],
    limits: _Limits,
) -> None:
    total = limits.total
    for flow, batch, on_result in jobs:
        if not _uses_loop(flow) and isinstance(flow, LocalFlow):
            _run_sync(flow, batch, on_result, total)
    rest = [job for job in jobs if not isinstance(job[0], LocalFlow) or _uses_loop(job[0])]
    if not rest:
        return
    local = [job[0] for job in rest if isinstance(job[0], LocalFlow)]
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
            if isinstance(flow, LocalFlow):
                limiter = limits.limiter(flow)
                tasks.append(
                    flow.arun_each(
                        batch, on_result, concurrency=limiter.limit, limiter=limiter, gate=bound
                    )
                )
            else:
                tasks.append(asyncio.to_thread(_run_sync, flow, batch, on_result, total))
        await asyncio.gather(*tasks)

    run_sync(together())


def _run_sync(
    flow: BaseFlow, batch: Sequence[Mapping[str, str]], on_result: OnResult, limit: int
) -> None:
    flow.run_each(batch, on_result, concurrency=limit, check=False)


def evaluate(
    flows: BaseFlow | Mapping[str, BaseFlow] | Sequence[BaseFlow],
    data: pd.DataFrame,
    scorers: Scorer | Sequence[Scorer] | None = None,
    *,
    columns: Mapping[str, str] | None = None,
    fill: str | None = None,
    concurrency: int | None = None,
    progress: bool = True,
    dry_run: bool = False,
    log: bool = True,
    batch_api: bool = False,
    poll: float | None = None,
    repeats: int = 1,
) -> EvalReport | Preview:
    """Run every variant over every row of ``data`` and grade the outputs with ``scorers``.

    ``flows`` is one flow or ``{variant name: flow}`` (local, varied with ``with_params`` /
    ``with_prompts``, or remote; a list of flows is named after them). ``columns`` and ``fill``
    are as in ``run_dataframe``; ``data.attrs["name"]``, when set, names the data set in the
    report.
    ``concurrency`` bounds the provider calls in flight across every variant and judge (default:
    the sum over endpoints of the largest limit of each endpoint's flows). Each endpoint keeps
    its own limit and back-off, so a 429 from one endpoint never slows another.
    ``dry_run=True`` returns a :class:`~flownb.frames.preview.Preview` of the calls instead, making
    none: its ``n_calls`` is the number of calls the run then makes on the same cache state
    (judges included), and the progress bar's total. A judge without ``provider=`` uses the
    provider of the flow it grades. ``batch_api=True`` first sends the calls the cache lacks
    through the providers' batch APIs (half price, results within 24 hours; waiting ``poll``
    seconds at most, None: until done): the variants' calls, then the judges' in a second
    stage; the evaluation then runs from the cache (what a batch did not answer runs live).
    ``log=False`` keeps the evaluation out of the run log
    (``report.diff(id)`` reads it back from there).
    ``repeats=k`` runs each (variant, row), and its judges, k times, each repeat cached apart
    (the repeat is part of the cache key; repeat 0's key is a plain run's), so a re-run pays
    nothing; the preview counts k times the calls. ``report.results`` then holds per-row means
    (and ``flips``), ``report.runs`` every run, ``report.spread`` the spread per row, and the
    summary the spread per variant (see :mod:`flownb.evaluation.repeats`).

    Returns:
        An :class:`EvalReport` (``results``, ``summary``, ``compare()``, ``plot()``,
        ``save()``, ``diff()``).

    Raises:
        TypeError: ``data`` is not a DataFrame.
        ConfigError: no variants, duplicate scorer names, a scorer reads a column that no
            input or output provides, a judge would run on the offline provider, or
            ``repeats`` is not a whole number of at least 1 (or asks a served flow to repeat).
        InputError: a variant's variables are missing from ``data`` (before anything runs).
    """
    import pandas as pd

    if not isinstance(data, pd.DataFrame):
        raise TypeError(f"evaluate takes a pandas DataFrame, got {type(data).__name__}")
    setup = _prepare(flows, data, scorers, columns, fill, repeats)
    if batch_api and not dry_run:
        _through_batches(setup, data, poll, progress)
    preview = _preview(setup, data) if dry_run or progress else None
    if dry_run:
        assert preview is not None
        return preview
    collected, judged = _run(
        setup, data, concurrency, preview if progress else None, batch_api and not dry_run
    )
    variants = setup.variants
    context = describe_evaluation(setup.names, variants, data, collected[0])
    reports = [
        _assemble(data, variants, got, setup.graders, answers, context)
        for got, answers in zip(collected, judged, strict=True)
    ]
    report = reports[0]
    if setup.repeats > 1:
        report.context["repeats"] = setup.repeats
        report.set_runs(order_runs([r.results for r in reports], report.variants))
    report.variant_params = {name: variant_params(f) for name, f in variants.items()}
    if log:
        report.store(_home(variants))
    return report


@dataclass
class _Setup:
    """What an evaluation runs, checked before any call: the variants (renamed for the run
    log), their names as given, each variant's rows, the scorers and, among them, the judges
    (bound to the flows they grade)."""

    variants: dict[str, BaseFlow]
    names: dict[str, str]
    batches: Mapping[str, Sequence[Mapping[str, str]]]
    graders: list[Scorer]
    judges: list[JudgeScorer]
    # One per repeat (repeat 0: the variants and judges above); see .repeats.
    rounds: list[_Round] = field(default_factory=list)

    @property
    def repeats(self) -> int:
        return len(self.rounds)


@dataclass
class _Round:
    """One repeat of the evaluation: the variants and scorers (judges among them) whose calls
    are keyed with its repeat number."""

    variants: dict[str, BaseFlow]
    graders: list[Scorer]
    judges: list[JudgeScorer]


def _rounds(
    variants: Mapping[str, BaseFlow], graders: Sequence[Scorer], repeats: int
) -> list[_Round]:
    """Return one :class:`_Round` per repeat (judges bound already)."""
    rounds = []
    for r in range(repeats):
        scorers = [repeat_judge(s, r) if isinstance(s, JudgeScorer) else s for s in graders]
        rounds.append(
            _Round(
                {name: repeat_flow(flow, r) for name, flow in variants.items()},
                scorers,
                [s for s in scorers if isinstance(s, JudgeScorer)],
            )
        )
    return rounds


def _prepare(
    flows: BaseFlow | Mapping[str, BaseFlow] | Sequence[BaseFlow],
    data: pd.DataFrame,
    scorers: Scorer | Sequence[Scorer] | None,
    columns: Mapping[str, str] | None,
    fill: str | None,
    repeats: int = 1,
) -> _Setup:
    """Return the evaluation's :class:`_Setup`, every check made before anything runs.

    Raises:
        ConfigError: see :func:`evaluate`.
        InputError: a variant's variables are missing from ``data``.
    """
    variants = _variants(flows)
    repeats = check_repeats(repeats, list(variants.values()))
    graders = _scorers(scorers)
    batches = {
        name: rows_to_variables(data, flow.variables, columns, fill)
        for name, flow in variants.items()
    }
    _check_scorer_columns(graders, variants, data)
    names = {name: flow.name for name, flow in variants.items()}  # before the renaming below
    # In the run log, a variant's runs go under "<flow>:<variant>" so variants stay apart.
    variants = {
        name: flow.variant(flow.graph, name=f"{flow.name}:{name}")
        if isinstance(flow, LocalFlow) and name != flow.name
        else flow
        for name, flow in variants.items()
    }
    judges = [s for s in graders if isinstance(s, JudgeScorer)]
    _bind_judges(judges, variants)
    return _Setup(variants, names, batches, graders, judges, _rounds(variants, graders, repeats))


def _check_scorer_columns(
    graders: Sequence[Scorer], variants: Mapping[str, BaseFlow], data: pd.DataFrame
) -> None:
    """Refuse a scorer reading a column that is neither an output nor a column of the data.

    Raises:
        ConfigError: naming the scorer and the columns it lacks.
    """
    outputs = list(dict.fromkeys(o for f in variants.values() for o in f.outputs))
    known = set(map(str, data.columns)) | set(outputs)
    for s in graders:
        missing = [c for c in s.columns() if c not in known]
        if missing:
            raise ConfigError(
                f"scorer {s.name!r} reads {', '.join(map(repr, missing))}, which is neither an "
                f"output ({', '.join(map(repr, outputs))}) nor a column of the data"
            )


def _preview(setup: _Setup, data: pd.DataFrame) -> Preview:
    """Return the evaluation's dry run: its calls on the cache's state now (judges included),
    every repeat's (a ``repeat`` column in its calls when there are several)."""
    from ..frames.preview import Preview, preview_many

    inputs = _input_rows(data) if setup.judges else None
    previews = [preview_many(r.variants, setup.batches, r.graders, inputs) for r in setup.rounds]
    if len(previews) == 1:
        return previews[0]
    import pandas as pd

    calls = pd.concat([p.calls.assign(repeat=r) for r, p in enumerate(previews)], ignore_index=True)
    calls.insert(2, "repeat", calls.pop("repeat"))
    return Preview(
        calls,
        {k: v for p in previews for k, v in p.providers.items()},
        frozenset().union(*(p.batchable for p in previews)),
    )


def _run(
    setup: _Setup,
    data: pd.DataFrame,
    concurrency: int | None,
    preview: Preview | None,
    batch_api: bool = False,
) -> tuple[list[dict[str, _Collected]], list[Judged]]:
    """Run the variants, then the judges, every repeat together, under one limit and (with
    ``preview``: its count as the total) one progress bar. Return per repeat each variant's
    outcomes and the judges' answers; on Ctrl-C, what finished (the rest marked as interrupted,
    and a warning said so)."""
    rounds = setup.rounds
    flows = [f for r in rounds for f in r.variants.values()]
    judge_flows = [j.flow() for r in rounds for j in r.judges]
    limiter = _Limits(concurrency, [*flows, *judge_flows])
    n = len(data)
    bar: Any = None
    if preview is not None:
        # In a notebook front end, the live view: the bar and the running summary per variant.
        bar = HOOKS["live_evaluate"](
            list(setup.variants), data, setup.graders, preview.n_calls, len(rounds)
        )
    if preview is not None and bar is None:
        from tqdm.auto import tqdm

        # The bar counts provider calls: its total is the preview's count on this cache state.
        # Moved by one thread of its own: calls finish on the loop thread, the bar is a widget.
        bar = Progress(tqdm(total=preview.n_calls, desc="evaluate", unit="call", leave=True))
    collected = [
        {name: _Collected(n, f.outputs, getattr(f, "plan", None)) for name, f in r.variants.items()}
        for r in rounds
    ]
    interrupted = False
    judged: list[Judged] = [{} for _ in rounds]
    paid_log = ExitStack()
    if batch_api:  # the answers the batches brought are logged as paid calls, once
        paid_log.enter_context(paid_once([*flows, *judge_flows]))
    try:
        try:
            _run_all(
                [
                    (
                        flow,
                        setup.batches[name],
                        _with_bar(got[name], bar, remote=not isinstance(flow, LocalFlow), key=name),
                    )
                    for r, got in zip(rounds, collected, strict=True)
                    for name, flow in r.variants.items()
                ],
                limiter,
            )
        except KeyboardInterrupt:
            interrupted = True
        if setup.judges and not interrupted:
            try:
                judged = _run_judges(
                    [(r.judges, got) for r, got in zip(rounds, collected, strict=True)],
                    data,
                    bar,
                    limiter,
                )
            except _Interrupted as stop:
                interrupted = True
                judged = stop.partial
    finally:
        paid_log.close()
        if bar is not None:
            # Fewer calls than counted (failed runs, outputs that repeated): end at what ran.
            bar.close(end_at_count=True)
    if interrupted:
        finished = sum(c.mark_interrupted() for got in collected for c in got.values())
        warn(
            f"interrupted: {finished} of {len(flows) * n} runs finished and are kept (judges "
            "that did not answer score NaN). Run again to complete them; the cache makes the "
            "finished ones free."
        )
    return collected, judged


class _Interrupted(Exception):
    def __init__(self, partial: list[Judged]) -> None:
        super().__init__("interrupted")
        self.partial = partial


def _input_block(data: pd.DataFrame) -> dict[str, list[Any]]:
    return {str(c): data[c].tolist() for c in data.columns}


def _through_batches(setup: _Setup, data: pd.DataFrame, poll: float | None, progress: bool) -> None:
    """Fill the cache through the providers' batch APIs before the evaluation runs: first every
    variant's calls (every repeat's), then (a second stage, once the outputs they grade are in)
    the judges'.
    What the batches did not answer (a failed line, a batch still running when ``poll`` ran out)
    is then run live by the evaluation, as any uncached call is."""
    batches = setup.batches
    for r in setup.rounds:
        for name, flow in r.variants.items():
            if _batchable(flow):
                prefill(flow, batches[name], poll=poll, progress=progress)  # type: ignore[arg-type]
    if setup.judges:
        for r in setup.rounds:
            _judges_through_batches(r, batches, data, poll, progress)


def _judges_through_batches(
    r: _Round,
    batches: Mapping[str, Sequence[Mapping[str, str]]],
    data: pd.DataFrame,
    poll: float | None,
    progress: bool,
) -> None:
    """Send one repeat's judge calls through the batch APIs (the outputs they grade cached)."""
    from ..frames.preview import preview_many

    # The judges' prompts, rendered from the outputs now in the cache, as the run renders them.
    calls = preview_many(r.variants, batches, r.graders, _input_rows(data)).calls
    for judge in r.judges:
        flow = judge.flow()
        if not _batchable(flow):
            continue
        mine = calls[(calls["variant"] == f"judge:{judge.name}") & calls["prompt"].notna()]
        prompts = list(dict.fromkeys(mine["prompt"]))
        if prompts:
            rows = [{flow.variables[0]: prompt} for prompt in prompts]
            prefill(flow, rows, poll=poll, progress=progress)


def _batchable(flow: BaseFlow) -> bool:
    """Whether ``flow``'s calls can go through its provider's batch API (into its cache)."""
    return (
        isinstance(flow, LocalFlow)
        and flow.provider.supports_batches
        and flow.engine.cache is not None
    )


def _input_rows(data: pd.DataFrame) -> list[dict[str, Any]]:
    """Return the data's rows as the judges see them (column name -> value)."""
    block = _input_block(data)
    names = list(block)
    if not names:
        return [{} for _ in range(len(data))]
    return [dict(zip(names, values, strict=True)) for values in zip(*block.values(), strict=True)]


def _block(inputs: Mapping[str, list[Any]], got: _Collected) -> Block:
    return Block({**inputs, **got.values}, len(got.done), [e is not None for e in got.error])


def _run_judges(
    rounds: Sequence[tuple[Sequence[JudgeScorer], Mapping[str, _Collected]]],
    data: pd.DataFrame,
    bar: Any,
    limiter: _Limits,
) -> list[Judged]:
    """Ask every judge of every repeat (its judges, its variants' outcomes), all together;
    return per repeat scorer name -> variant -> (scores, reasons).

    Raises:
        _Interrupted: Ctrl-C, with the answers given so far.
    """
    jobs: list[tuple[BaseFlow, Sequence[Mapping[str, str]], OnResult]] = []
    finishers = []
    for judges, collected in rounds:
        more, finish = _judge_jobs(judges, collected, data, bar)
        jobs += more
        finishers.append(finish)
    stopped = False
    try:
        _run_all(jobs, limiter)
    except KeyboardInterrupt:
        stopped = True
    out = [finish() for finish in finishers]
    if stopped:
        raise _Interrupted(out)
    return out


def _judge_jobs(
    judges: Sequence[JudgeScorer],
    collected: Mapping[str, _Collected],
    data: pd.DataFrame,
    bar: Any,
) -> tuple[list[tuple[BaseFlow, Sequence[Mapping[str, str]], OnResult]], Callable[[], Judged]]:
    """Return the judges' jobs over one repeat's outcomes, and what reads their answers once
    they ran (scorer name -> variant -> (scores, reasons))."""
    inputs = _input_block(data)
    n = len(data)
    names = list(collected)
    jobs: list[tuple[BaseFlow, Sequence[Mapping[str, str]], OnResult]] = []
    answers: dict[str, list[str | None]] = {}
    where: dict[str, list[Any]] = {}
    for j in judges:
        if isinstance(j, PickBest):
            columns = [collected[v].values.get(j.output, [None] * n) for v in names]
            rows = _block(inputs, next(iter(collected.values()))).rows()
            prompts = [j.prompt_all(row, [c[i] for c in columns]) for i, row in enumerate(rows)]
            keys: list[Any] = list(range(n))
        else:
            prompts, keys = [], []
            for v in names:
                for i, row in enumerate(_block(inputs, collected[v]).rows()):
                    prompts.append(j.prompt(row) if collected[v].error[i] is None else None)
                    keys.append((v, i))
        asked = [(k, p) for k, p in zip(keys, prompts, strict=True) if p is not None]
        got: list[str | None] = [None] * len(asked)
        answers[j.name] = got
        where[j.name] = [k for k, _ in asked]

        def keep(i: int, result: Any, exc: BaseException | None, got: list = got) -> None:
            failed = f"(judge call failed: {one_line(exc, code=True)})" if exc is not None else ""
            got[i] = result["answer"] if exc is None else failed

        jobs.append((j.flow(), [{"q": p} for _, p in asked], _with_bar(keep, bar)))
    return jobs, lambda: _parse_answers(judges, names, n, where, answers)


def _parse_answers(
    judges: Sequence[JudgeScorer],
    names: Sequence[str],
    n: int,
    where: Mapping[str, list[Any]],
    answers: Mapping[str, list[str | None]],
) -> Judged:
    """Return scorer name -> variant -> (scores, reasons) from the judges' answers (NaN where
    a judge did not answer)."""
    out: Judged = {}
    for j in judges:
        per: dict[str, tuple[list[Any], list[str | None]]] = {
            v: ([math.nan] * n, [None] * n) for v in names
        }
        for key, answer in zip(where[j.name], answers[j.name], strict=True):
            if isinstance(j, PickBest):
                scores, reason = j.parse_pick(answer, len(names))
                for v, score in zip(names, scores, strict=True):
                    per[v][0][key] = score
                    per[v][1][key] = reason
            else:
                v, i = key
                per[v][0][i], per[v][1][i] = j.parse(answer)
        out[j.name] = per
    return out


def _home(variants: Mapping[str, BaseFlow]) -> Path:
    """Return the FLOWNB_HOME whose run log keeps the evaluation: the first local variant's,
    else the environment's (``evaluate`` is an entry point; remote flows have no home here)."""
    for flow in variants.values():
        if isinstance(flow, LocalFlow):
            return flow.config.home
    return resolve_run_config(local=False).home


def _assemble(
    data: pd.DataFrame,
    variants: Mapping[str, BaseFlow],
    collected: Mapping[str, _Collected],
    graders: Sequence[Scorer],
    judged: Mapping[str, Mapping[str, tuple[list[Any], list[str | None]]]],
    context: dict[str, Any] | None = None,
) -> EvalReport:
    import numpy as np
    import pandas as pd

    n = len(data)
    inputs = _input_block(data)
    index_name = data.index.name or "index"
    if index_name in data.columns or index_name == "variant":
        index_name = "row_index"
    outputs = list(dict.fromkeys(o for f in variants.values() for o in f.outputs))
    out_cols = {o: (o if o not in data.columns else f"{o}_output") for o in outputs}
    kinds: dict[str, str] = {}
    for flow in variants.values():
        plan = getattr(flow, "plan", None)
        if plan is not None:
            for o, k in plan.output_kinds.items():
                kinds.setdefault(o, k)
    parts = []
    infos: dict[str, ScorerInfo] = {}
    for name, got in collected.items():
        block = _block(inputs, got)
        failed = np.array(block.failed, dtype=bool)
        cols: dict[str, Any] = {"variant": [name] * n, index_name: data.index.to_numpy()}
        for c in data.columns:
            cols[str(c)] = data[c].to_numpy()
        for o in outputs:
            cols[out_cols[o]] = got.values.get(o, [None] * n)
        passed = ~failed
        for s in graders:
            reasons: list[str | None] | None
            if s.name in judged:
                scores, reasons = judged[s.name][name]
            elif isinstance(s, JudgeScorer):  # interrupted before the judges ran
                scores, reasons = [None] * n, ["not judged: the evaluation was interrupted"] * n
            else:
                scores, reasons = s.score(block)
            values = _as_column(scores, s)
            values[failed] = np.nan if s.kind == "float" else pd.NA
            cols[s.name] = values
            if reasons is not None:
                cols[f"{s.name}_reason"] = pd.array(reasons, dtype=object)
            if s.kind == "bool":
                passed &= values.fillna(False).to_numpy(dtype=bool)
            elif s.threshold is not None:
                passed &= np.nan_to_num(values, nan=-np.inf) >= s.threshold
            info = infos.get(s.name)
            infos[s.name] = ScorerInfo(
                s.name,
                s.kind if info is None or info.kind == s.kind else "float",
                s.threshold,
                s.pass_fail,
                s.output,
                s.describe(),
                s.rate,
            )
        cols["passed"] = passed
        cols["latency_s"] = np.array(got.latency, dtype=float)
        cols["total_tokens"] = np.array(got.tokens, dtype=float)
        cols["cost_usd"] = np.array(got.cost, dtype=float)
        speed = np.array(got.speed, dtype=float).reshape(n, 3)
        cols["provider_s"], cols["output_tokens"], cols["fresh_s"] = speed.T
        cols["cached"] = np.array(got.cached, dtype=bool)
        cols["error"] = pd.array(got.error, dtype=object)
        parts.append(pd.DataFrame(cols))
    results = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]
    # Columns that only some variants give (a scorer's reasons) are missing elsewhere: order them.
    ordered = ["variant", index_name, *map(str, data.columns), *out_cols.values()]
    for s in graders:
        ordered.append(s.name)
        if f"{s.name}_reason" in results.columns:
            ordered.append(f"{s.name}_reason")
    ordered += ["passed", "latency_s", "provider_s", "output_tokens", "fresh_s"]
    ordered += ["total_tokens", "cost_usd", "cached", "error"]
    results = results[ordered]
    return EvalReport(
        results,
        list(variants),
        list(infos.values()),
        outputs=[out_cols[o] for o in outputs],
        kinds={out_cols[o]: k for o, k in kinds.items()},
        index_name=index_name,
        inputs=[str(c) for c in data.columns],
        context=context,
        setup={name: _setup(flow) for name, flow in variants.items()},
    )


def _endpoint(provider: Any) -> str | None:
    """Return the provider's endpoint as safe to show (no credentials, no query)."""
    from urllib.parse import urlsplit

    url = provider.identity().get("base_url")
    if not isinstance(url, str) or not url:
        return None
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}{parts.path}" if parts.scheme else None


def describe_evaluation(
    names: Mapping[str, str],
    variants: Mapping[str, BaseFlow],
    data: pd.DataFrame,
    collected: Mapping[str, _Collected],
) -> dict[str, Any]:
    """Return what was evaluated, for the report's header: a title from the flows' names,
    the data set (``data.attrs["name"]`` or "a DataFrame", rows, columns) and per variant its
    flow, provider, endpoint and nodes (prompt, model parameters, the models that answered)."""
    flows = list(dict.fromkeys(names.values()))
    shown: list[dict[str, Any]] = []
    for name, flow in variants.items():
        item: dict[str, Any] = {"name": name, "flow": names[name]}
        plan = getattr(flow, "plan", None)
        if isinstance(flow, LocalFlow) and plan is not None:
            models = collected[name].models if name in collected else {}
            item["provider"] = flow.provider.name
            item["endpoint"] = _endpoint(flow.provider)
            item["batch_api"] = bool(flow.provider.supports_batches)  # half price there
            item["nodes"] = [
                {
                    "name": step.name,
                    "kind": step.kind,
                    "prompt": step.template.text,
                    "params": dict(step.params),
                    "models": sorted(models.get(k, ())),
                }
                for k, step in enumerate(plan.steps)
            ]
        else:
            item["provider"] = "remote flow service"
            client = getattr(flow, "client", None)
            item["endpoint"] = getattr(client, "base_url", None)
            item["nodes"] = []
        shown.append(item)
    title = f"{', '.join(flows)}: {' vs '.join(variants)}" if len(variants) > 1 else flows[0]
    return {
        "title": title,
        "dataset": {
            "name": str(data.attrs.get("name") or "a DataFrame"),
            "rows": len(data),
            "columns": [str(c) for c in data.columns],
        },
        "variants": shown,
    }


def _setup(flow: BaseFlow) -> dict[str, str | None]:
    """Return what a variant runs on: endpoint (or provider), models, system message(s)."""
    if not isinstance(flow, LocalFlow):
        return {"endpoint": "remote", "model": None, "system": None}
    endpoint = flow.config.endpoint
    steps = flow.plan.steps
    models = dict.fromkeys(str(s.params["model"]) for s in steps if s.params.get("model"))
    systems = dict.fromkeys(s.system for s in steps if s.system)
    return {
        "endpoint": endpoint.name if endpoint is not None else flow.provider.name,
        "model": ", ".join(models) or None,
        "system": " | ".join(systems) or None,
    }


def _as_column(scores: Sequence[Any], scorer: Scorer) -> Any:
    import numpy as np
    import pandas as pd

    if scorer.kind == "float":
        return np.array([math.nan if v is None else float(v) for v in scores], dtype=float)
    return pd.array([None if v is None else bool(v) for v in scores], dtype="boolean")
