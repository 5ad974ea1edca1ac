"""An evaluation's model-graded scorers: each judge's calls (``judge``: one per variant and row;
``pick_best``: one per row) run through its own one-node flow after the variants, live or
through a batch API, and their answers are parsed into scores and reasons.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ...core.flow import FlowCore
from ...core.local import local_of
from ...errors import one_line
from ...frames.batch_api.run import prefill
from ...providers.spend import SpendCap
from ...scorers.judge import JudgeScorer, PickBest
from ..figures.money import charge_judge
from .jobs import (
    OnResult,
    _block,
    _Collected,
    _input_block,
    _input_rows,
    _Limits,
    _Round,
    _run_all,
    _with_bar,
)

if TYPE_CHECKING:
    import pandas as pd

# Scorer name -> variant -> (scores, reasons), one of each per input row: the judges' answers.
Judged = dict[str, dict[str, tuple[list[Any], list[str | None]]]]


class _Interrupted(Exception):
    def __init__(self, partial: list[Judged]) -> None:
        super().__init__("interrupted")
        self.partial = partial


def _judges_through_batches(
    r: _Round,
    batches: Mapping[str, Sequence[Mapping[str, str]]],
    data: pd.DataFrame,
    poll: float | None,
    progress: bool,
    cap: SpendCap | None = None,
) -> None:
    """Send one repeat's judge calls through the batch APIs (the outputs they grade cached),
    within ``cap``."""
    from ...frames.preview import preview_many

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
            prefill(flow, rows, poll=poll, progress=progress, cap=cap)


def _batchable(flow: FlowCore) -> bool:
    """Whether ``flow``'s calls can go through its provider's batch API (into its cache)."""
    local = local_of(flow)
    return local is not None and local.provider.supports_batches and local.engine.cache is not None


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
    jobs: list[tuple[FlowCore, Sequence[Mapping[str, str]], OnResult]] = []
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
) -> tuple[list[tuple[FlowCore, Sequence[Mapping[str, str]], OnResult]], Callable[[], Judged]]:
    """Return the judges' jobs over one repeat's outcomes, and what reads their answers once
    they ran (scorer name -> variant -> (scores, reasons))."""
    inputs = _input_block(data)
    n = len(data)
    names = list(collected)
    jobs: list[tuple[FlowCore, Sequence[Mapping[str, str]], OnResult]] = []
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

        keys_asked = where[j.name]

        def keep(
            i: int, result: Any, exc: BaseException | None, got: list = got, keys: list = keys_asked
        ) -> None:
            failed = f"(judge call failed: {one_line(exc, code=True)})" if exc is not None else ""
            got[i] = result["answer"] if exc is None else failed
            charge_judge(collected, keys[i], result)  # the judges' bill, apart from the flows'

        for c in collected.values():
            c.judged = True
        jobs.append((j.flow(), [{"q": p} for _, p in asked], _with_bar(keep, bar, judge=True)))
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
