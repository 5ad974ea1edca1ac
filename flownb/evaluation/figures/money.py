"""An evaluation's money, three figures never mixed (see :mod:`flownb.config.pricing`):

- **spent**: what this evaluation paid (a cache hit costs 0);
- **saved**: what the cache saved (its answers at what they cost when bought);
- **price per row**: what one row costs at list price, from the tokens each answer used when
  it was bought (kept with the cached answer), the same on a first, a half-cached and a fully
  cached run. A batch-API answer's price is the batch price it was bought at.

The variants' figures and the judges' are kept apart (the judges' calls for a variant's row are
that row's ``judge_*`` columns; a ``pick_best`` call, which grades every variant's row at once,
is shared evenly among them) and added up in :func:`bill`'s total. Comparisons rank variants by
price per row. A figure some of whose calls have no price sums the priced ones, a lower bound
shown as "at least $X"; it is NaN, shown as "price unknown", only when none has a price.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ...config.pricing import Money
from ...show.meter import usd

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "JUDGE_COLUMNS",
    "MONEY_COLUMNS",
    "RANK_NOTE",
    "Charged",
    "bill",
    "bill_html",
    "charge_judge",
    "combine_money",
    "money_cells",
    "money_columns",
    "money_html",
    "money_of_result",
    "money_text",
    "plus",
    "price_ranks",
    "price_row",
    "summary_money",
]

# The results' money columns per (variant, row), and the judges' beside them.
MONEY_COLUMNS = (
    "spent_usd",
    "saved_usd",
    "price_usd",
    "unpriced_calls",
    "prompt_cache_saved_usd",
)
JUDGE_COLUMNS = (
    "judge_calls",
    "judge_spent_usd",
    "judge_saved_usd",
    "judge_price_usd",
    "judge_unpriced_calls",
)

RANK_NOTE = (
    "price per row: list price of one row from the tokens each answer used when it was bought, "
    "cached or not (the same on every re-run; variants ranked by it, 1 the cheapest); spent: "
    "what this run paid (cache hits cost 0); saved: what the cache saved"
)


def _add(a: float, b: float) -> float:
    """Return ``a + b`` where NaN (no price known) is absorbed by a known figure."""
    if math.isnan(a):
        return b
    if math.isnan(b):
        return a
    return a + b


def plus(a: Money | None, b: Money, share: float = 1.0) -> Money:
    """Return ``a`` (``None``: nothing yet) plus ``share`` of ``b``: known figures add up, a
    figure stays NaN only while every call it covers is unpriced; unpriced calls are counted
    whole."""
    part = Money(b.spent * share, b.saved * share, b.price * share, b.unpriced, b.unpriced_paid)
    if a is None:
        return part
    return Money(
        _add(a.spent, part.spent),
        _add(a.saved, part.saved),
        _add(a.price, part.price),
        a.unpriced + part.unpriced,
        a.unpriced_paid + part.unpriced_paid,
    )


def money_of_result(result: Any) -> Money | None:
    """Return a finished run's :class:`Money` (a remote run's figures are unknown: NaN)."""
    money = getattr(result, "money", None)
    if isinstance(money, Money):
        return money
    return Money(math.nan, math.nan, math.nan, 0, 0)


def prompt_cache_saved_of(result: Any) -> float:
    """Return what the provider's prompt caching saved on a finished run's calls at list price
    (0 when no answer reported cached tokens; NaN for a remote run, or when none of those that
    did has a price). Kept with each answer, so the same on every re-run."""
    gens = getattr(result, "generations", ())
    if not gens:
        return math.nan
    saved = [g.prompt_cache_saved for g in gens if g is not None]
    known = [float(s) for s in saved if s is not None]
    if not known:
        return 0.0
    total = math.nan
    for value in known:
        total = _add(total, value)
    return total


def money_columns(moneys: Sequence[Money | None], prefix: str = "") -> dict[str, Any]:
    """Return the results' columns of ``moneys`` (one per row; ``None``: the row made no call,
    or failed): ``spent_usd``, ``saved_usd``, ``price_usd`` (NaN where unknown) and
    ``unpriced_calls``, each name after ``prefix``."""
    import numpy as np

    nan = math.nan
    return {
        f"{prefix}spent_usd": np.array([nan if m is None else m.spent for m in moneys], float),
        f"{prefix}saved_usd": np.array([nan if m is None else m.saved for m in moneys], float),
        f"{prefix}price_usd": np.array([nan if m is None else m.price for m in moneys], float),
        f"{prefix}unpriced_calls": np.array([0 if m is None else m.unpriced for m in moneys], int),
    }


class Charged:
    """One variant's judge bill, per row: how many judge calls graded it and their money."""

    def __init__(self, n: int) -> None:
        self.judge_calls: list[float] = [0.0] * n
        self.judge_money: list[Money | None] = [None] * n
        self.judged = False  # whether judges ran for this variant (its judge_* columns)

    def judge_columns(self) -> dict[str, Any]:
        """Return the ``judge_*`` results columns (empty when no judge ran)."""
        import numpy as np

        if not self.judged:
            return {}
        cols = {"judge_calls": np.array(self.judge_calls, dtype=float)}
        cols.update(money_columns(self.judge_money, "judge_"))
        return cols


def charge_judge(bills: Mapping[str, Charged], key: Any, result: Any) -> None:
    """Charge one finished judge call (``result``; ``None``: it failed, a call without a
    price) to what it graded: ``key`` is ``(variant, row)``, or a row for ``pick_best``, whose
    call grades every variant's row and is shared evenly among them."""
    money = money_of_result(result) if result is not None else None
    if isinstance(key, tuple):
        targets, share = [(bills[key[0]], key[1])], 1.0
    else:
        targets, share = [(b, key) for b in bills.values()], 1.0 / max(len(bills), 1)
    for got, i in targets:
        got.judge_calls[i] += share
        if money is not None:
            got.judge_money[i] = plus(got.judge_money[i], money, share)


def combine_money(first: pd.DataFrame, grouped: Any) -> None:
    """Set the money columns of per-row results ``first`` from the repeats' ``grouped`` runs:
    spent and saved summed over the repeats, the price per run averaged (a row's list price is
    one run's, however many repeats ran), unpriced calls summed."""
    for prefix in ("", "judge_"):
        if f"{prefix}price_usd" not in first.columns:
            continue
        for name in ("spent_usd", "saved_usd"):
            first[prefix + name] = grouped[prefix + name].sum(min_count=1).to_numpy(dtype=float)
        first[f"{prefix}price_usd"] = grouped[f"{prefix}price_usd"].mean().to_numpy(dtype=float)
        first[f"{prefix}unpriced_calls"] = grouped[f"{prefix}unpriced_calls"].sum().to_numpy()
    if "judge_calls" in first.columns:
        first["judge_calls"] = grouped["judge_calls"].mean().to_numpy(dtype=float)
    if "prompt_cache_saved_usd" in first.columns:  # one run's, as its price
        saved = grouped["prompt_cache_saved_usd"].mean()
        first["prompt_cache_saved_usd"] = saved.to_numpy(dtype=float)


def _mean(values: pd.Series) -> float:
    known = values.dropna()
    return float(known.mean()) if len(known) else math.nan


def summary_money(g: pd.DataFrame) -> dict[str, Any]:
    """Return one variant's money for the summary, from its results rows ``g``: ``spent_usd``,
    ``saved_usd`` (sums; NaN when no call has a price), ``price_per_row`` (the mean price of
    the rows that ran), ``unpriced_calls``, ``prompt_cache_saved_per_row`` (what the providers'
    prompt caching saved per row at list price, already left out of the price); with judges,
    the same as ``judge_spent_usd``,
    ``judge_saved_usd``, ``judge_price_per_row`` (over the rows the judges graded) and
    ``judge_unpriced_calls``. Empty for results kept before prices were."""
    if "price_usd" not in g.columns:
        return {}
    row: dict[str, Any] = {
        "price_per_row": _mean(g["price_usd"]),
        "spent_usd": float(g["spent_usd"].sum(min_count=1)),
        "saved_usd": float(g["saved_usd"].sum(min_count=1)),
        "unpriced_calls": int(g["unpriced_calls"].sum()),
    }
    if "prompt_cache_saved_usd" in g.columns:
        row["prompt_cache_saved_per_row"] = _mean(g["prompt_cache_saved_usd"])
    if "judge_price_usd" in g.columns:
        graded = g[g["judge_calls"] > 0]
        row["judge_price_per_row"] = _mean(graded["judge_price_usd"])
        row["judge_spent_usd"] = float(g["judge_spent_usd"].sum(min_count=1))
        row["judge_saved_usd"] = float(g["judge_saved_usd"].sum(min_count=1))
        row["judge_unpriced_calls"] = int(g["judge_unpriced_calls"].sum())
    return row


def price_ranks(prices: pd.Series) -> pd.Series:
    """Return each variant's rank by price per row (1: the cheapest; ties share the lower
    rank; missing where the price is unknown)."""
    return prices.rank(method="min").astype("Int64")


def money_text(value: Any, unpriced: Any = 0) -> str:
    """Return a money figure for people: ``$0.0070``; ``at least $0.0070`` when ``unpriced``
    calls were left out of it; ``price unknown`` when it is NaN."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return "price unknown"
    if math.isnan(number):
        return "price unknown"
    try:
        partial = int(unpriced) > 0
    except (TypeError, ValueError):
        partial = False
    return f"at least {usd(number)}" if partial else usd(number)


def money_html(value: Any, unpriced: Any = 0) -> str:
    """Return :func:`money_text` as HTML kept on one line (``<span class="money">``, which the
    report's style never breaks: a price split as ``$0.00002`` / ``4`` reads as two numbers)."""
    return f'<span class="money">{html.escape(money_text(value, unpriced))}</span>'


def bill(summary: pd.DataFrame, rows: int) -> pd.DataFrame:
    """Return the evaluation's bill from its ``summary``: one row per variant, one for the
    judges (every judge, every variant) and ``total`` (variants and judges), with ``spent_usd``,
    ``saved_usd``, ``price_usd`` (the list price of all of it: per row times ``rows``),
    ``price_per_row`` and ``unpriced_calls``. ``price_per_row`` of ``judges`` and ``total``
    is per input row (every variant's run and grading of it)."""
    import pandas as pd

    records: dict[str, dict[str, Any]] = {}
    for variant, r in summary.iterrows():
        records[str(variant)] = _line(r, "", rows)
    if "judge_price_per_row" in summary.columns:
        records["judges"] = _sum_lines([_line(r, "judge_", rows) for _, r in summary.iterrows()])
    parts = list(records.values())
    records["total"] = _sum_lines(parts)
    frame = pd.DataFrame.from_dict(records, orient="index")
    frame["price_per_row"] = frame["price_usd"] / rows if rows else math.nan
    frame.index.name = "part"
    return frame[["spent_usd", "saved_usd", "price_usd", "price_per_row", "unpriced_calls"]]


def _line(r: Mapping[str, Any], prefix: str, rows: int) -> dict[str, Any]:
    per_row = float(r.get(f"{prefix}price_per_row", math.nan))
    return {
        "spent_usd": float(r.get(f"{prefix}spent_usd", math.nan)),
        "saved_usd": float(r.get(f"{prefix}saved_usd", math.nan)),
        "price_usd": per_row * rows,
        "unpriced_calls": int(r.get(f"{prefix}unpriced_calls", 0)),
    }


def _sum_lines(lines: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    total: dict[str, Any] = {"spent_usd": math.nan, "saved_usd": math.nan, "price_usd": math.nan}
    for line in lines:
        for name in total:
            total[name] = _add(total[name], line[name])
    total["unpriced_calls"] = sum(int(line["unpriced_calls"]) for line in lines)
    return total


# -- in HTML (the summary, the comparison) ---------------------------------------------------


def _missing(value: Any) -> bool:
    try:
        return value is None or math.isnan(float(value))
    except (TypeError, ValueError):
        return True


def money_cells(row: Any) -> str:
    """Return a summary row's money cells: price per row with its rank, spent / saved, and
    the judges' the same way when there are judges."""
    rank = row.get("price_rank")
    ranked = "" if _missing(rank) else f" ({int(rank)})"
    unpriced = row.get("unpriced_calls", 0)
    cells = (
        f"<td><b>{money_html(row.get('price_per_row'), unpriced)}</b>{ranked}</td>"
        f"<td>{money_html(row.get('spent_usd'), unpriced)} / "
        f"{money_html(row.get('saved_usd'), unpriced)}</td>"
    )
    if "judge_price_per_row" in row:
        unpriced = row.get("judge_unpriced_calls", 0)
        cells += (
            f"<td>{money_html(row.get('judge_price_per_row'), unpriced)}</td>"
            f"<td>{money_html(row.get('judge_spent_usd'), unpriced)} / "
            f"{money_html(row.get('judge_saved_usd'), unpriced)}</td>"
        )
    return cells


def bill_html(report: Any, judged: bool) -> str:
    """Return the evaluation's bill in one line (variants, judges, total: spent, saved), or
    '' for a report kept before prices were."""
    money = getattr(report, "money", None)
    if money is None or money.empty:
        return ""
    parts = []
    for part in ("judges", "total") if judged else ("total",):
        if part not in money.index:
            continue
        line = money.loc[part]
        unpriced = line["unpriced_calls"]
        parts.append(
            f"{part}: {money_html(line['spent_usd'], unpriced)} spent, "
            f"{money_html(line['saved_usd'], unpriced)} saved by the cache, "
            f"{money_html(line['price_usd'], unpriced)} at list price"
        )
    return f"<p class='inp'>money: {'; '.join(parts)}</p>"


def price_row(report: Any) -> str:
    """Return the comparison's header row of each variant's price per row and its rank (1:
    the cheapest), saying what it is; '' for a report kept before prices were."""
    summary = report.summary
    if "price_per_row" not in summary.columns:
        return ""
    cells = []
    for v in report.variants:
        row = summary.loc[v]
        rank = row.get("price_rank")
        ranked = "" if _missing(rank) else f" (rank {int(rank)})"
        price = money_html(row["price_per_row"], row.get("unpriced_calls", 0))
        cells.append(f"<td class='inp'>{price}{ranked}</td>")
    return (
        "<tr><th class='inp'>price per row (list price, cached or not; 1 the cheapest)</th>"
        f"{''.join(cells)}</tr>"
    )
