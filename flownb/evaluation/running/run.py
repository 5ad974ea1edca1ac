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

import sys
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...config.settings import resolve_run_config
from ...core.flow import FlowCore
from ...core.local import local_of
from ...errors import ConfigError
from ...frames.batch_api.paid import paid_once
from ...frames.batch_api.run import prefill
from ...frames.run import rows_to_variables
from ...providers.calls import announce
from ...providers.spend import SpendCap
from ...scorers import Scorer
from ...scorers.judge import JudgeScorer
from ...show.notices import warn
from ..reports.report import EvalReport
from .assemble import _assemble, describe_evaluation
from .jobs import _bind_judges, _Collected, _input_rows, _Limits, _Round, _run_all, _with_bar
from .judging import Judged, _batchable, _Interrupted, _judges_through_batches, _run_judges
from .params import variant_params
from .repeats import check_repeats, order_runs, repeat_flow, repeat_judge

if TYPE_CHECKING:
    import pandas as pd

    from ...frames.preview import Preview

__all__ = ["evaluate"]


def _variants(
    flows: FlowCore | Mapping[str, FlowCore] | Sequence[FlowCore],
) -> dict[str, FlowCore]:
    if isinstance(flows, FlowCore):
        return {flows.name: flows}
    if isinstance(flows, Sequence) and not isinstance(flows, str):
        # A list of flows: named after the flows, numbered where names repeat.
        named: dict[str, FlowCore] = {}
        for i, flow in enumerate(flows):
            if not isinstance(flow, FlowCore):
                raise ConfigError(f"flows[{i}] is a {type(flow).__name__}, not a flow")
            named[flow.name if flow.name not in named else f"{flow.name}_{i}"] = flow
        flows = named
    if not isinstance(flows, Mapping) or not flows:
        raise ConfigError("evaluate takes a flow or a non-empty {variant name: flow} mapping")
    for name, flow in flows.items():
        if not isinstance(name, str) or not isinstance(flow, FlowCore):
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


def evaluate(
    flows: FlowCore | Mapping[str, FlowCore] | Sequence[FlowCore],
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
    max_spend: float | None = None,
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
    summary the spread per variant (see :mod:`flownb.evaluation.running.repeats`).
    ``max_spend`` (US dollars) caps what the variants and judges pay together: a call is sent
    only if what was spent plus the most every call in flight could still cost stays within it
    (see :mod:`flownb.providers.spend`); the calls it stops fail their rows with
    ``spend_cap_reached``, and a re-run with a higher cap pays only for what is missing. With
    ``batch_api=True`` the batch stages (variants, then judges) are within the same cap, each
    call at the batch price (see :func:`flownb.frames.batch_api.run.run_dataframe_batched`).

    Returns:
        An :class:`EvalReport` (``results``, ``summary``, ``compare()``, ``plot()``,
        ``save()``, ``diff()``).

    Raises:
        TypeError: ``data`` is not a DataFrame.
        ConfigError: no variants, duplicate scorer names, a scorer reads a column that no
            input or output provides, a judge would run on the offline provider, or
            ``repeats`` is not a whole number of at least 1 (or asks a served flow to repeat),
            or ``max_spend`` is given and some call cannot be priced (nothing is sent).
        InputError: a variant's variables are missing from ``data`` (before anything runs).
    """
    import pandas as pd

    if not isinstance(data, pd.DataFrame):
        raise TypeError(f"evaluate takes a pandas DataFrame, got {type(data).__name__}")
    setup = _prepare(flows, data, scorers, columns, fill, repeats)
    # Checked before anything is sent; shared by the batch stages and the live run.
    cap = None if dry_run else _spend_cap(setup, max_spend, batch_api)
    try:
        if batch_api and not dry_run:
            _through_batches(setup, data, poll, progress, cap)
        preview = _preview(setup, data) if dry_run or progress else None
        if dry_run:
            assert preview is not None
            return preview
        if cap is not None:
            _say_over_cap(cap, preview)
        collected, judged, bar = _run(
            setup,
            data,
            concurrency,
            preview if progress else None,
            batch_api and not dry_run,
            cap,
        )
    finally:
        if cap is not None:
            announce(cap.line())
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
    settle = getattr(bar, "settle", None)  # a live view's final table: the report's figures
    if settle is not None:
        settle(report.summary)
    if log:
        report.store(_home(variants))
    return report


@dataclass
class _Setup:
    """What an evaluation runs, checked before any call: the variants (renamed for the run
    log), their names as given, each variant's rows, the scorers and, among them, the judges
    (bound to the flows they grade)."""

    variants: dict[str, FlowCore]
    names: dict[str, str]
    batches: Mapping[str, Sequence[Mapping[str, str]]]
    graders: list[Scorer]
    judges: list[JudgeScorer]
    # One per repeat (repeat 0: the variants and judges above); see .repeats.
    rounds: list[_Round] = field(default_factory=list)

    @property
    def repeats(self) -> int:
        return len(self.rounds)


def _rounds(
    variants: Mapping[str, FlowCore], graders: Sequence[Scorer], repeats: int
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
    flows: FlowCore | Mapping[str, FlowCore] | Sequence[FlowCore],
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
        name: local.variant(local.graph, name=f"{flow.name}:{name}")
        if (local := local_of(flow)) is not None and name != flow.name
        else flow
        for name, flow in variants.items()
    }
    judges = [s for s in graders if isinstance(s, JudgeScorer)]
    _bind_judges(judges, variants)
    # What each variant's and judge's requests drop, replace or cannot price: said here, on
    # the caller's thread (the runs go on flownb's loop), once per provider and topic.
    for flow in [*variants.values(), *(j.flow() for j in judges)]:
        flow.say_notes()
    return _Setup(variants, names, batches, graders, judges, _rounds(variants, graders, repeats))


def _check_scorer_columns(
    graders: Sequence[Scorer], variants: Mapping[str, FlowCore], data: pd.DataFrame
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
    from ...frames.preview import Preview, preview_many

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


def _spend_cap(setup: _Setup, max_spend: float | None, batch_api: bool) -> SpendCap | None:
    """Return the cap every variant and judge of the evaluation shares (None: no cap).

    Raises:
        ConfigError: some variant or judge cannot be capped (unpriced, or served elsewhere),
            live or (``batch_api``) at the batch price.
    """
    if max_spend is None:
        return None
    cap = SpendCap(max_spend)
    for r in setup.rounds:  # refused before anything is sent
        for flow in [*r.variants.values(), *(j.flow() for j in r.judges)]:
            flow.spend_gate(cap)
            if batch_api and _batchable(flow):
                flow.spend_gate(cap, batch=True)
    return cap


def _say_over_cap(cap: SpendCap, preview: Preview | None) -> None:
    """Say when the preview of what is left to run (after any batches) already exceeds what
    the cap has left: the evaluation proceeds and stops at the cap."""
    from ...show.meter import usd

    if preview is not None and preview.est_cost_known > cap.left:
        warn(
            f"the preview estimates about {usd(preview.est_cost_known)} for this evaluation "
            f"({preview.n_calls} call(s)), over the spend cap of {usd(cap.cap)} "
            f"({usd(cap.left)} left): it proceeds and stops at the cap"
        )


def _run(
    setup: _Setup,
    data: pd.DataFrame,
    concurrency: int | None,
    preview: Preview | None,
    batch_api: bool = False,
    cap: SpendCap | None = None,
) -> tuple[list[dict[str, _Collected]], list[Judged], Any]:
    """Run the variants, then the judges, every repeat together, under one limit and (with
    ``preview``: its count as the total) one progress bar. Return per repeat each variant's
    outcomes and the judges' answers, and the (closed) bar or live view; on Ctrl-C, what
    finished (the rest marked as interrupted, and a warning said so)."""
    rounds = setup.rounds
    flows = [f for r in rounds for f in r.variants.values()]
    judge_flows = [j.flow() for r in rounds for j in r.judges]
    limiter = _Limits(concurrency, [*flows, *judge_flows], cap)
    n = len(data)
    bar: Any = None
    if preview is not None:
        # In a notebook front end, the live view: the bar and the running summary per variant.
        bar = _live_board(setup, data, preview.n_calls, len(rounds))
    if preview is not None and bar is None:
        from ...show.progress import open_bar

        # The bar counts provider calls: its total is the preview's count on this cache state.
        # Moved by one thread of its own: calls finish on the loop thread, the bar is a widget.
        bar = open_bar(preview.n_calls, "evaluate", "call")
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
                        _with_bar(got[name], bar, remote=flow.served, key=name),
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
    return collected, judged, bar


def _through_batches(
    setup: _Setup,
    data: pd.DataFrame,
    poll: float | None,
    progress: bool,
    cap: SpendCap | None = None,
) -> None:
    """Fill the cache through the providers' batch APIs before the evaluation runs: first every
    variant's calls (every repeat's), then (a second stage, once the outputs they grade are in)
    the judges', each call submitted only while its bound at the batch price fits in ``cap``
    (and settled to its answer's cost when the batch's results are read).
    What the batches did not answer (a failed line, a batch still running when ``poll`` ran out,
    a call the cap left out) is then run live by the evaluation, as any uncached call is."""
    batches = setup.batches
    for r in setup.rounds:
        for name, flow in r.variants.items():
            if _batchable(flow):
                prefill(flow, batches[name], poll=poll, progress=progress, cap=cap)  # type: ignore[arg-type]
    if setup.judges:
        for r in setup.rounds:
            _judges_through_batches(r, batches, data, poll, progress, cap)


def _home(variants: Mapping[str, FlowCore]) -> Path:
    """Return the FLOWNB_HOME whose run log keeps the evaluation: the first local variant's,
    else the environment's (``evaluate`` is an entry point; remote flows have no home here)."""
    for flow in variants.values():
        local = local_of(flow)
        if local is not None:
            return local.config.home
    return resolve_run_config(local=False).home


def _live_board(setup: Any, data: Any, calls: int, rounds: int) -> Any:
    """Return the notebook's live view of an evaluation (the bar and the running summary per
    variant), or None outside a Jupyter kernel (where no notebook code is even imported)."""
    if "ipykernel.zmqshell" not in sys.modules:
        return None
    from ...views import live

    return live.eval_view(list(setup.variants), data, setup.graders, calls, rounds)
