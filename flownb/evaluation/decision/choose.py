"""A recommendation that states its rule: the cheapest variant whose quality clears the bar with
95% confidence (the lower bound of its interval, not its mean), within the price and speed
bars; or, when none does, why not and what would decide it.

What would decide it: a variant within the price and speed bars whose mean clears the quality
bar but whose interval reaches below it needs more rows. An interval's half-width shrinks as
one over the square root of the rows, so ``n * (half-width / (mean - bar))**2`` rows would lift
its lower bound to the bar if the mean held. Its rows without a quality score (failed, or a judge
that did not answer) are the ones to label first.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...errors import ConfigError
from ...show.escape import md_text
from ...show.meter import usd
from ..figures.speed import sig

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["Choice", "choose_variant"]


def _fmt(x: float, unit: str = "") -> str:
    if x is None or math.isnan(x):
        return "unknown"
    if unit == "$":
        return usd(x)
    return f"{sig(x, 4)}{unit}"


@dataclass
class Choice:
    """What :meth:`~flownb.evaluation.reports.report.EvalReport.choose` found.

    Attributes:
        variant: the chosen variant, None when none meets the bars.
        rule: the rule applied, with its numbers, in words.
        table: one row per variant: ``quality``, ``quality_low``, ``quality_high``, ``n``,
            ``price_per_row``, ``latency_p95_s``, ``meets`` and ``why`` (the bars it misses).
        advice: when none is chosen, what would decide it (more rows, rows to label).
        more_rows: variant -> how many more rows would lift its lower bound to the bar.
        label_rows: variant -> the index of its rows that have no quality score.
    """

    variant: str | None
    rule: str
    table: pd.DataFrame
    advice: list[str] = field(default_factory=list)
    more_rows: dict[str, int] = field(default_factory=dict)
    label_rows: dict[str, list[Any]] = field(default_factory=dict)
    # How to get the chosen variant's flow (the report's own, or rebuilt from its saved JSON).
    _flow: Callable[[], Any] | None = field(default=None, repr=False, compare=False)

    @property
    def flow(self) -> Any:
        """The chosen variant's flow (``None`` when no variant meets the bars): the very flow
        the evaluation ran, or for a report read back with :func:`flownb.load_report`, one
        loaded from the JSON it kept. Run it, serve it, or :meth:`save` it.

        Raises:
            ConfigError: the report does not know the variant's flow (kept by an older flownb),
                or its saved endpoint is no longer declared.
        """
        if self.variant is None:
            return None
        if self._flow is None:
            raise ConfigError(
                f"this report does not know variant {self.variant!r}'s flow (it was kept by an "
                "older flownb); evaluate again to save it"
            )
        return self._flow()

    def save(self, path: str | Path, *, endpoint: bool = True) -> Path:
        """Write the chosen variant's flow to ``path`` in the web tool's export format (see
        :meth:`flownb.LocalFlow.save`).

        Returns:
            The path written.

        Raises:
            ConfigError: no variant was chosen (the message says why), or its flow cannot be
                saved (a remote flow, an endpoint no flownb.toml declares).
        """
        if self.variant is None:
            raise ConfigError(f"nothing to save: {self.verdict} {' '.join(self.advice)}".strip())
        saved: Path = self.flow.save(path, endpoint=endpoint)
        return saved

    @property
    def verdict(self) -> str:
        """Return the choice in one line, or why there is none."""
        if self.variant is None:
            return "No variant meets the bars."
        row = self.table.loc[self.variant]
        return (
            f"Choose {self.variant}: {_fmt(row['price_per_row'], '$')} per row, quality "
            f"{_fmt(row['quality'])} (95% interval {_fmt(row['quality_low'])} to "
            f"{_fmt(row['quality_high'])}), p95 {_fmt(row['latency_p95_s'], ' s')}."
        )

    def _lines(self) -> list[str]:
        lines = [self.verdict, f"Rule: {self.rule}."]
        for v, row in self.table.iterrows():
            lines.append(
                f"- {v}: quality {_fmt(row['quality'])} [{_fmt(row['quality_low'])}, "
                f"{_fmt(row['quality_high'])}] over {int(row['n'])} rows, "
                f"{_fmt(row['price_per_row'], '$')} per row, p95 {_fmt(row['latency_p95_s'], ' s')}"
                f": {'meets every bar' if row['meets'] else row['why']}"
            )
        lines += self.advice
        return lines

    def __repr__(self) -> str:
        return "\n".join(self._lines())

    def _repr_markdown_(self) -> str:
        lines = self._lines()
        return "\n".join(
            f"- {md_text(line[2:])}" if line.startswith("- ") else f"\n{md_text(line)}\n"
            for line in lines
        )

    def _repr_html_(self) -> str:
        from ..html.decision import choice_html

        return choice_html(self._lines(), self.advice)


def _misses(row: pd.Series, min_quality: float, max_price: float, max_p95: float) -> list[str]:
    """Return the bars ``row`` misses, in words (empty: it meets them all)."""
    why = []
    low = float(row["quality_low"])
    if math.isnan(low):
        why.append("quality interval unknown")
    elif low < min_quality:
        why.append(f"quality lower bound {sig(low, 4)} < {sig(min_quality, 4)}")
    price = _over(float(row["price_per_row"]), max_price, "price", usd)
    p95 = _over(float(row["latency_p95_s"]), max_p95, "p95", _seconds, unknown="p95 latency")
    return why + [miss for miss in (price, p95) if miss is not None]


def _over(
    value: float, cap: float, name: str, shown: Callable[[float], str], unknown: str = ""
) -> str | None:
    """Return how ``value`` misses the upper bar ``cap`` (``inf``: no bar), in words: ``NAME
    VALUE > CAP`` or ``UNKNOWN unknown`` (``unknown`` defaults to ``name``), each figure as
    ``shown`` writes it; ``None`` when it is within the bar or there is none."""
    if math.isinf(cap):
        return None
    if math.isnan(value):
        return f"{unknown or name} unknown"
    return f"{name} {shown(value)} > {shown(cap)}" if value > cap else None


def _seconds(x: float) -> str:
    return f"{sig(x, 4)} s"


def _rows_needed(row: pd.Series, min_quality: float) -> int | None:
    """Return how many more rows would lift the lower bound to ``min_quality`` if the mean held
    (None when the mean is below the bar or the interval unknown)."""
    mean, low, n = float(row["quality"]), float(row["quality_low"]), int(row["n"])
    half = mean - low
    if math.isnan(half) or mean <= min_quality or half <= 0:
        return None
    return max(1, math.ceil(n * (half / (mean - min_quality)) ** 2) - n)


def choose_variant(
    table: pd.DataFrame,
    unscored: dict[str, list[Any]],
    *,
    quality: str,
    min_quality: float | None,
    max_price: float | None,
    max_p95: float | None,
) -> Choice:
    """Return the :class:`Choice` among ``table``'s variants (columns as :class:`Choice`'s
    ``table`` has them, before ``meets`` and ``why``); ``unscored`` gives per variant the index
    of its rows without a quality score.

    Raises:
        ConfigError: a bar that is not a number.
    """
    _check_bars(min_quality=min_quality, max_price=max_price, max_p95=max_p95)
    floor = -math.inf if min_quality is None else float(min_quality)
    price_cap = math.inf if max_price is None else float(max_price)
    speed_cap = math.inf if max_p95 is None else float(max_p95)
    table = table.copy()
    why = [_misses(row, floor, price_cap, speed_cap) for _, row in table.iterrows()]
    table["meets"] = [not w for w in why]
    table["why"] = ["; ".join(w) for w in why]
    rule = _rule(quality, min_quality, max_price, max_p95)
    ok = table[table["meets"]]
    if len(ok):
        # Unknown prices sort last: a known cheap variant is preferred to an unknown one.
        order = ok.assign(_p=ok["price_per_row"].fillna(math.inf), _q=-ok["quality"])
        chosen = str(order.sort_values(["_p", "_q"], kind="stable").index[0])
        return Choice(chosen, rule, table)
    choice = Choice(None, rule, table)
    for v, row in table.iterrows():
        # One that fails on price or speed whatever its quality: more rows would not help.
        if not _misses(row, -math.inf, price_cap, speed_cap):
            _advise(choice, str(v), row, floor, unscored.get(str(v)) or [])
    if not choice.advice:
        choice.advice.append(
            "No variant within the price and speed bars comes near the quality bar."
        )
    return choice


def _check_bars(**bars: Any) -> None:
    """Refuse a bar that is given and is not a number.

    Raises:
        ConfigError: naming the bar.
    """
    for name, bar in bars.items():
        if bar is not None and (isinstance(bar, bool) or not isinstance(bar, int | float)):
            raise ConfigError(f"choose({name}=...) takes a number, not {bar!r}")


def _rule(
    quality: str, min_quality: float | None, max_price: float | None, max_p95: float | None
) -> str:
    """Return the choice's rule in words, a bar left None as "any"."""
    return (
        f"the cheapest variant whose 95% lower bound of {quality} is at least "
        f"{'any' if min_quality is None else sig(min_quality, 4)}, price per row at most "
        f"{'any' if max_price is None else usd(max_price)} and p95 latency at most "
        f"{'any' if max_p95 is None else f'{sig(max_p95, 4)} s'} (ties: the higher quality)"
    )


def _advise(choice: Choice, v: str, row: pd.Series, floor: float, unscored: list[Any]) -> None:
    """Add to ``choice`` what would decide variant ``v`` (within the price and speed bars, under
    the quality bar ``floor``): how many more rows, if its mean clears the bar, and its
    ``unscored`` rows to label first."""
    more = _rows_needed(row, floor)
    if more is not None:
        choice.more_rows[v] = more
        choice.advice.append(
            f"{v} clears the bar on its mean ({sig(float(row['quality']), 4)}); about {more} "
            f"more rows would decide it if the mean holds."
        )
    if unscored:
        choice.label_rows[v] = unscored
        shown = ", ".join(map(str, unscored[:10]))
        more_text = f" and {len(unscored) - 10} more" if len(unscored) > 10 else ""
        choice.advice.append(f"Label {v}'s unscored rows first: {shown}{more_text}.")


def report_choice(
    report: Any,
    quality: str,
    min_quality: float | None,
    max_price: float | None,
    max_p95: float | None,
) -> Choice:
    """Return the choice among an :class:`~flownb.evaluation.reports.report.EvalReport`'s variants
    (see its :meth:`~flownb.evaluation.reports.report.EvalReport.choose`).

    Raises:
        ConfigError: an unknown quality, or a bar that is not a number.
    """
    from .price import price_per_row

    summary = report.summary
    if f"{quality}_low" not in summary.columns:
        names = ["pass_rate", *(s.name for s in report.scorers)]
        raise ConfigError(f"no quality {quality!r}; choose one of {names}")
    table = summary[["n", quality, f"{quality}_low", f"{quality}_high"]].copy()
    table.columns = ["n", "quality", "quality_low", "quality_high"]
    table["price_per_row"] = price_per_row(summary)
    table["latency_p95_s"] = summary["latency_p95_s"].astype(float)
    column = "passed" if quality == "pass_rate" else quality
    res = report.results
    # Rows without a quality score (failed, or a judge that did not answer): label them first.
    missing = res[column].isna() | res["error"].notna()
    unscored = {
        v: res.loc[(res["variant"] == v) & missing, report.index_name].tolist()
        for v in report.variants
    }
    choice = choose_variant(
        table,
        unscored,
        quality=quality,
        min_quality=min_quality,
        max_price=max_price,
        max_p95=max_p95,
    )
    if choice.variant is None:
        return choice
    return replace(choice, _flow=_flow_of(report, choice.variant))


def _flow_of(report: Any, variant: str) -> Callable[[], Any] | None:
    """Return how to get ``variant``'s flow: the flow the report ran (in this process), else
    one loaded from the JSON the report kept of it; None when it kept none."""
    live = getattr(report, "flows", {}).get(variant)
    if live is not None:
        return lambda: live
    kept = getattr(report, "flow_files", {}).get(variant)
    if kept is None:
        return None

    def load() -> Any:
        from ...flows.local import load_flow

        return load_flow(kept, name=variant, ready=False)

    return load
