"""What a variant costs at the scale it will run: its list price per row times the rows, the
batch-API price beside it where the provider has one, and the judges' price apart.

The per-row price is read from the summary through :func:`price_per_row` alone, so that which
column holds it (the cache-independent list price when the report has one, else the mean cost
of the rows that were paid) is decided in one place.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ...errors import ConfigError

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["BATCH_DISCOUNT", "batch_variants", "judges_per_row", "price_per_row", "price_table"]

# OpenAI's Batch API and Anthropic's Message Batches bill half the list price.
BATCH_DISCOUNT = 0.5
# Summary columns that may hold a variant's price per row, the preferred first: the list price
# from the tokens each answer used when bought (stable across cached re-runs), else the mean
# cost of the rows paid for in this run.
PRICE_COLUMNS = ("price_per_row", "cost_per_row")
JUDGE_COLUMNS = ("judge_price_per_row",)


def _first_column(summary: pd.DataFrame, names: tuple[str, ...]) -> pd.Series | None:
    for name in names:
        if name in summary.columns:
            return summary[name].astype(float)
    return None


def price_per_row(summary: pd.DataFrame) -> pd.Series:
    """Return each variant's price per row in US dollars (NaN: unknown), read from ``summary``
    (the first of :data:`PRICE_COLUMNS` it has)."""
    import pandas as pd

    found = _first_column(summary, PRICE_COLUMNS)
    return found if found is not None else pd.Series(math.nan, index=summary.index, dtype=float)


def judges_per_row(summary: pd.DataFrame) -> pd.Series:
    """Return, per variant, what judging one of its rows costs (NaN: the report does not say)."""
    import pandas as pd

    found = _first_column(summary, JUDGE_COLUMNS)
    return found if found is not None else pd.Series(math.nan, index=summary.index, dtype=float)


def batch_variants(context: Mapping[str, Any]) -> dict[str, bool]:
    """Return variant -> whether its provider has a batch API, from a report's context."""
    return {
        str(v.get("name")): bool(v.get("batch_api"))
        for v in context.get("variants", [])
        if isinstance(v, Mapping)
    }


def price_table(summary: pd.DataFrame, context: Mapping[str, Any], rows: int) -> pd.DataFrame:
    """Return one row per variant (index: variant): ``price_per_row``, ``rows``, ``list_usd``
    (the price of ``rows`` rows at list price), ``batch_usd`` (through the provider's batch API,
    NaN where it has none), ``judges_usd`` (judging those rows, apart; NaN when not known) and
    ``total_usd`` (list price plus judges, NaN when a part is unknown).

    Raises:
        ConfigError: ``rows`` is not a whole number of at least 1.
    """
    import pandas as pd

    if isinstance(rows, bool) or not isinstance(rows, int) or rows < 1:
        raise ConfigError(f"price(rows=...) takes a whole number of rows, at least 1, not {rows!r}")
    per_row = price_per_row(summary)
    judges = judges_per_row(summary)
    batch = batch_variants(context)
    frame = pd.DataFrame(index=summary.index)
    frame["price_per_row"] = per_row
    frame["rows"] = rows
    frame["list_usd"] = per_row * rows
    discount = [BATCH_DISCOUNT if batch.get(str(v)) else math.nan for v in summary.index]
    frame["batch_usd"] = frame["list_usd"] * pd.Series(discount, index=summary.index)
    # No judge column: the evaluation had no judge, and judging costs nothing (not "unknown").
    judged = any(name in summary.columns for name in JUDGE_COLUMNS)
    frame["judges_usd"] = judges * rows if judged else 0.0
    frame["total_usd"] = frame["list_usd"] + frame["judges_usd"]
    return frame
