"""The run log's rows for outcomes recorded one by one, as the JSON text the log stores.

A row is ``[index, finished, model, inputs, outputs, latency, prompt_tokens, completion_tokens,
total_tokens, cached_outputs, error, usage_details, cost_usd, saved_usd, price_usd,
unpriced_calls]``; a failed run's row stops after ``error`` (see :mod:`flownb.runtime.runlog`,
which reads them back), unless it paid for something that failed (an image generated but not
fetched: :class:`~flownb.errors.ImageNotFetched`), whose cost it then records. A row all of
whose calls came from the cache (a re-run) is made without the general money and usage
bookkeeping: its figures follow from the cached costs. A chunk of the usual rows with real
calls (each paid for now, priced, with usages of one shape and one model per node) is made
column by column, its sums in C; any other chunk row by row. Either way the rows are the same.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from itertools import repeat
from operator import attrgetter, itemgetter
from typing import TYPE_CHECKING, Any, cast

import orjson

from ..config.pricing import money_of
from ..errors import one_line

if TYPE_CHECKING:
    from .result import RunResult

__all__ = ["Outcome", "inline_tail", "log_rows"]

# One recorded outcome: (index, finished at, result or None, exception or None).
Outcome = tuple[int, float, "RunResult | None", "BaseException | None"]
_NO_NAMES: list[str] = []  # not worked out yet (sorted_names' default)
# Usage counts kept in their own columns, in the row's order; any other the provider reported
# goes to usage_details.
_TOKEN_COLUMNS = ("prompt_tokens", "completion_tokens", "total_tokens")


def log_rows(
    taken: list[Outcome],
    batch: Sequence[Mapping[str, str]],
    provider: str,
    *,
    detailed: bool,
) -> bytes:
    """Return the UTF-8 JSON text of the rows of ``taken`` (outcomes of elements of ``batch``
    run by ``provider``). ``detailed=False`` (inline providers: no tokens, nothing cached, one
    model) makes a batch without failures in one list comprehension."""
    # The bulk makers answer None when the batch is not theirs (a failure, a cache hit, ...).
    bulk: Sequence[Sequence[Any]] | None
    if not detailed:
        bulk = _inline_rows(taken, batch, provider)
    else:
        bulk = _fresh_rows(taken, batch, provider)
        if bulk is None:
            bulk = _cached_rows(taken, batch)
    return orjson.dumps(bulk if bulk is not None else _rows_one_by_one(taken, batch, provider))


def _rows_one_by_one(
    taken: list[Outcome], batch: Sequence[Mapping[str, str]], provider: str
) -> list[list[Any]]:
    """Return the rows of ``taken``, each made on its own: failed, a re-run's (every call from
    the cache) or with fresh calls (:func:`_row`)."""
    rows: list[list[Any]] = []
    append = rows.append
    sorted_names: dict[frozenset[str], list[str] | None] = {}  # a batch's rows share a few sets
    for i, finished, result, exc in taken:
        if result is None:
            append(_failed_row(i, finished, exc, batch[i]))
            continue
        cached = result.cached
        names = sorted_names.get(cached, _NO_NAMES)
        if names is _NO_NAMES:
            names = sorted_names[cached] = sorted(cached) or None
        # A row whose every call came from the cache (a re-run's): no usage counts (cached
        # calls cost nothing now), no details; it spent nothing, and saved and is priced at
        # what its calls cost when bought (null when none has a known price), summed as
        # money_of sums. One loop over its calls, as this runs once per row of a re-run.
        models: dict[str, None] = {}
        known: list[float] = []
        gens = result.generations
        for g in gens:
            if not g.cached:
                append(_row(i, finished, result, batch[i], provider, names))
                break
            if g.model:
                models[g.model] = None
            cost = g.cost
            if cost is not None and cost == cost:
                known.append(float(cost))
        else:
            saved = float(sum(known)) if known or not gens else None
            model = ",".join(models) or None
            unpriced = len(gens) - len(known)
            latency = result.latency
            append([i, finished, model, batch[i], result, latency, None, None, None, names])
            rows[-1] += (None, None, 0.0, saved, saved, unpriced)
    return rows


def _failed_row(
    i: int, finished: float, exc: BaseException | None, inputs: Mapping[str, str]
) -> list[Any]:
    """Return the row of a failed run: it stops after its error, unless the failure was paid
    for (an image generated but not fetched), whose cost it then records."""
    error = one_line(exc, code=True) if exc is not None else None
    row: list[Any] = [i, finished, None, inputs, None, None, None, None, None, None, error]
    paid = getattr(exc, "paid_usd", None)
    if paid is not None:  # paid for though it failed (an image not fetched)
        priced = not math.isnan(paid)
        row += (None, paid if priced else None, 0.0, None, 0 if priced else 1)
    return row


def _cached_rows(
    taken: list[Outcome], batch: Sequence[Mapping[str, str]]
) -> list[tuple[Any, ...]] | None:
    """Return the rows of ``taken`` made column by column when they are a re-run's usual
    outcomes: every call from the cache with a known price, each node's model the same on
    every row, as many calls on every row; else ``None`` (:func:`log_rows` makes them one by
    one, the same rows)."""
    results = [r for _, _, r, _ in taken]
    gens = _calls_of(results, cached=True)
    if gens is None:
        return None
    priced = _priced_columns(gens, len(gens) // len(results))
    if priced is None:  # an unknown price, or a node's model not the same on every row
        return None
    # A row's saving and price: its calls' costs summed in node order, as money_of sums.
    model, saved = priced
    return _rerun_table(taken, batch, cast("list[RunResult]", results), model, saved)


def _fresh_rows(
    taken: list[Outcome], batch: Sequence[Mapping[str, str]], provider: str
) -> list[list[Any]] | None:
    """Return the rows of ``taken`` made column by column when they are a run's usual
    outcomes with real calls (see :func:`_fresh_columns`); else ``None`` (the same rows are
    then made one by one, by :func:`_row`)."""
    if provider == "offline":
        return None
    results = [r for _, _, r, _ in taken]
    columns = _fresh_columns(results)
    if columns is None:
        return None
    model, spent, counts, names = columns
    token_counts, pad, extra_names, extra_counts = _count_readers(names)
    names_of = {c: sorted(c) or None for c in {r.cached for r in results}}  # type: ignore[union-attr]
    rows: list[list[Any]] = []
    append = rows.append
    for (i, finished, result, _), paid, summed in zip(taken, spent, counts, strict=True):
        assert result is not None  # every row succeeded (above)
        if pad:
            summed.append(0)
        append(
            [
                i, finished, model, batch[i], result, result.latency, *token_counts(summed),
                names_of[result.cached], None,
                dict(zip(extra_names, extra_counts(summed), strict=True)) if extra_counts else None,
                paid, 0.0, paid, 0,
            ]
        )  # fmt: skip
    return rows


def _count_readers(
    names: tuple[str, ...],
) -> tuple[Picker, bool, list[str], Picker | None]:
    """Return how a row's summed counts (named ``names``, in order) are read: the token
    columns' picker, whether a 0 must be appended first (a token column ``names`` lacks is
    read at -1: 0, as :func:`_row` has it), the other counts' names (usage_details) and their
    picker (``None`` when there are none)."""
    at = {name: j for j, name in enumerate(names)}
    tokens = [at.get(name, -1) for name in _TOKEN_COLUMNS]
    extra = [(name, j) for name, j in at.items() if name not in _TOKEN_COLUMNS]
    return (
        _picker(tokens),
        -1 in tokens,
        [name for name, _ in extra],
        _picker([j for _, j in extra]) if extra else None,
    )


def _fresh_columns(
    results: list[RunResult | None],
) -> tuple[str | None, list[float], list[list[int]], tuple[str, ...]] | None:
    """Return what the rows of ``results`` share and hold, column by column, when every row
    has as many calls, each paid for now with a known price and a usage of the same counts in
    the same order, and each node's model is the same on every row: the rows' model, each
    row's spending (its calls' costs summed in node order, as ``money_of`` sums them), each
    row's counts (summed in node order, as :func:`_summed` sums them) and the counts' names.
    Else ``None``."""
    gens = _calls_of(results, cached=False)
    if gens is None:
        return None
    width = len(gens) // len(results)
    usages = list(map(_usage, gens))
    if not all(usages):
        return None
    names = tuple(usages[0])
    if any(map(names.__ne__, map(tuple, usages))):
        return None
    priced = _priced_columns(gens, width)
    if priced is None:
        return None
    model, spent = priced
    values = list(map(list, map(dict.values, usages)))
    counts = [
        list(map(sum, zip(*row, strict=True)))
        for row in zip(*(values[k::width] for k in range(width)), strict=True)
    ]
    return model, spent, counts, names


def _priced_columns(gens: list[Any], width: int) -> tuple[str | None, list[float]] | None:
    """Return the model of rows of ``width`` calls each (``gens``, row after row) and each
    row's cost, its calls' summed in node order (as ``money_of`` sums them), when every call
    has a known price and each node's model is the same on every row; else ``None``."""
    models = list(map(_model, gens))
    per_node = [models[k::width] for k in range(width)]
    if any(len(set(column)) != 1 for column in per_node):
        return None
    costs = list(map(_cost, gens))
    if None in costs or math.isnan(sum(costs)):
        return None
    model = ",".join(dict.fromkeys(column[0] for column in per_node if column[0])) or None
    rows = zip(*(costs[k::width] for k in range(width)), strict=True)
    return model, list(map(float, map(sum, rows)))


Picker = Callable[[Sequence[Any]], tuple[Any, ...]]


def _picker(indexes: list[int]) -> Picker:
    """Return a function giving the items of a sequence at ``indexes`` (at least one), as a
    tuple: ``itemgetter``'s, one C call a row."""
    get = itemgetter(*indexes)
    if len(indexes) > 1:
        return get
    return lambda items: (get(items),)


def _rerun_table(
    taken: list[Outcome],
    batch: Sequence[Mapping[str, str]],
    results: list[RunResult],
    model: str | None,
    saved: list[float],
) -> list[tuple[Any, ...]]:
    """Return the rows of a re-run's ``taken`` (see :func:`_cached_rows`), zipped from their
    columns: ``model`` on every row, ``saved`` both the saving and the price of each."""
    names = {s: sorted(s) or None for s in {r.cached for r in results}}
    indexes = [i for i, _, _, _ in taken]
    none = repeat(None)
    # [index, finished, model, inputs, outputs, latency, no tokens (3), cached outputs, no
    # error or details, spent 0, saved, price, no unpriced call]
    return list(
        zip(
            indexes,
            [f for _, f, _, _ in taken],
            repeat(model),
            [batch[i] for i in indexes],
            results,
            [r.latency for r in results],
            none,
            none,
            none,
            [names[r.cached] for r in results],
            none,
            none,
            repeat(0.0),
            saved,
            saved,
            repeat(0),
        )
    )


def _calls_of(results: Sequence[RunResult | None], *, cached: bool) -> list[Any] | None:
    """Return the calls of ``results``, row after row, when every row succeeded with as many
    calls (at least one), each from the cache (``cached``) or each paid for now (not
    ``cached``); else ``None``."""
    if not results or any(r is None for r in results):
        return None
    width = len(results[0].generations)  # type: ignore[union-attr]
    gens = [g for r in results for g in r.generations]  # type: ignore[union-attr]
    if not width or len(gens) != width * len(results):
        return None
    from_cache = map(_cached, gens)
    if not (all(from_cache) if cached else not any(from_cache)):
        return None
    return gens


_cached = attrgetter("cached")
_model = attrgetter("model")
_cost = attrgetter("cost")
_usage = attrgetter("usage")


def _inline_rows(
    taken: list[Outcome], batch: Sequence[Mapping[str, str]], provider: str
) -> list[list[Any]] | None:
    """Return the rows of an inline run's outcomes (one model for all, no usage, no cache),
    or ``None`` when some failed."""
    if any(r is None for _, _, r, _ in taken):
        return None
    first = taken[0][2] if taken else None
    gens = first.generations if first is not None else ()
    model = ",".join(dict.fromkeys(g.model for g in gens if g.model)) or None
    tail = inline_tail(provider)
    return [
        [i, f, model, batch[i], r, r.latency, *tail]
        for i, f, r, _ in taken
        if r is not None  # all are; says so to the type checker
    ]


def inline_tail(provider: str) -> tuple[Any, ...]:
    """Return what an inline run's row holds after its latency: no tokens, cached outputs,
    error or usage details, then spent, saved, price and unpriced calls (the offline
    provider's calls are free; another inline provider's price is unknown: null)."""
    spent = 0.0 if provider == "offline" else None
    return (None, None, None, None, None, None, spent, 0.0, spent, None if spent is None else 0)


def _row(
    i: int,
    finished: float,
    result: RunResult,
    inputs: Mapping[str, str],
    provider: str,
    cached_names: list[str] | None,
) -> list[Any]:
    """Return the row of a successful run with fresh calls (usage counted, money worked out)."""
    money = money_of(provider, result.generations)
    models: dict[str, None] = {}
    usages: list[Mapping[str, int]] = []
    for g in result.generations:
        if g.model:
            models[g.model] = None
        usage = g.usage
        if usage and not g.cached:
            usages.append(usage)
    details: dict[str, int] = {}
    tokens: list[int | None] = [None, None, None]  # no usage reported: null, not 0
    if usages:
        details = _summed(usages)
        tokens = [details.pop(name, 0) for name in _TOKEN_COLUMNS]
    return [
        i,
        finished,
        ",".join(models) or None,
        inputs,
        result,
        result.latency,
        *tokens,
        cached_names or None,
        None,
        details or None,
        _json_usd(money.spent),
        _json_usd(money.saved),
        _json_usd(money.price),
        money.unpriced,
    ]


def _summed(usages: list[Mapping[str, int]]) -> dict[str, int]:
    """Return the counts of ``usages`` summed name by name (a new dict)."""
    first = usages[0]
    if len(usages) == 1:
        return dict(first)
    # The usual row: every call's usage names the same counts in the same order (one provider,
    # one answer shape), summed column by column in C (this runs for every row the run logs).
    names = tuple(first)
    for usage in usages:
        if tuple(usage) != names:
            break
    else:
        columns = zip(*[u.values() for u in usages], strict=True)
        return dict(zip(names, map(sum, columns), strict=True))
    summed: dict[str, int] = {}
    for usage in usages:
        for name, count in usage.items():
            summed[name] = summed.get(name, 0) + count
    return summed


def _json_usd(value: float) -> float | None:
    """Return dollars as the log keeps them: JSON has no NaN, so an unknown figure is null."""
    return None if math.isnan(value) else value
