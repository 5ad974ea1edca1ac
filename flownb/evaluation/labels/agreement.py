"""How far a scorer (a judge, usually) agrees with people: Cohen's kappa for pass/fail labels,
Spearman's rho for scores, each with a 95% interval, the confusion table, and the rows where
the two differ most.

Pure functions of two aligned columns; :meth:`EvalReport.agreement` feeds them the judge's
column and the human labels. Rows where either side is missing are left out, and the result says
how many rows each figure rests on.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from ...errors import ConfigError

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["Agreement", "agreement", "cohen_kappa", "spearman_rho"]

Z95 = 1.959963984540054  # the normal quantile of a two-sided 95% interval


def _fmt(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:.3g}"


def cohen_kappa(a: pd.Series, b: pd.Series) -> tuple[float, tuple[float, float], pd.DataFrame]:
    """Return Cohen's kappa of two raters' labels, its 95% interval and the confusion table.

    The interval uses the large-sample variance of Fleiss, Cohen and Everitt (1969), clipped to
    [-1, 1]. ``a`` and ``b`` hold one label each per item, aligned, with no missing values.

    Raises:
        ConfigError: fewer than two items.
    """
    import pandas as pd

    n = len(a)
    if n < 2:
        raise ConfigError(f"agreement needs at least two labelled rows, got {n}")
    cats = sorted(set(a) | set(b), key=str)
    table = pd.crosstab(
        pd.Categorical(a, categories=cats), pd.Categorical(b, categories=cats), dropna=False
    )
    table.index.name, table.columns.name = a.name or "a", b.name or "b"
    p = table.to_numpy(dtype=float) / n
    rows, cols = p.sum(axis=1), p.sum(axis=0)
    po = float(p.trace())
    pe = float((rows * cols).sum())
    if math.isclose(pe, 1.0):  # both raters gave one and the same label to everything
        return (1.0 if math.isclose(po, 1.0) else math.nan), (math.nan, math.nan), table
    kappa = (po - pe) / (1 - pe)
    k = len(cats)
    first = sum(p[i, i] * (1 - (rows[i] + cols[i]) * (1 - kappa)) ** 2 for i in range(k))
    second = (1 - kappa) ** 2 * sum(
        p[i, j] * (cols[i] + rows[j]) ** 2 for i in range(k) for j in range(k) if i != j
    )
    third = (kappa - pe * (1 - kappa)) ** 2
    var = max(first + second - third, 0.0) / (n * (1 - pe) ** 2)
    half = Z95 * math.sqrt(var)
    return kappa, (max(-1.0, kappa - half), min(1.0, kappa + half)), table


def spearman_rho(a: pd.Series, b: pd.Series) -> tuple[float, tuple[float, float]]:
    """Return Spearman's rank correlation of two aligned numeric columns and its 95% interval
    (Fisher's z with the variance 1.06 / (n - 3) of Fieller, Hartley and Pearson, 1957).

    Raises:
        ConfigError: fewer than four items (no interval can be formed).
    """
    n = len(a)
    if n < 4:
        raise ConfigError(f"a rank correlation needs at least four labelled rows, got {n}")
    ra, rb = a.rank(method="average"), b.rank(method="average")
    if ra.nunique() < 2 or rb.nunique() < 2:  # a constant column has no rank order
        return math.nan, (math.nan, math.nan)
    rho = float(ra.corr(rb))
    if abs(rho) >= 1:
        return rho, (rho, rho)
    z, half = math.atanh(rho), Z95 * math.sqrt(1.06 / (n - 3))
    return rho, (math.tanh(z - half), math.tanh(z + half))


@dataclass(frozen=True)
class Agreement:
    """How a scorer agrees with a set of labels.

    Attributes:
        scorer: the scorer's column; ``labels``: where the labels came from (``"human"``).
        kind: ``"pass_fail"`` (then ``kappa``) or ``"score"`` (then ``rho``); the other is NaN.
        n: the rows both sides have a value for (what every figure rests on).
        ci: the 95% interval of kappa or rho.
        table: the confusion table (scorer's label down, people's across; for scores, each
            side's value rounded to a whole number).
        disagreements: the rows where the two differ most, most first.
    """

    scorer: str
    labels: str
    kind: Literal["pass_fail", "score"]
    n: int
    kappa: float
    rho: float
    ci: tuple[float, float]
    table: pd.DataFrame = field(repr=False)
    disagreements: pd.DataFrame = field(repr=False)

    @property
    def value(self) -> float:
        """Kappa for pass/fail, rho for scores."""
        return self.kappa if self.kind == "pass_fail" else self.rho

    def __repr__(self) -> str:
        name = "kappa" if self.kind == "pass_fail" else "rho"
        low, high = self.ci
        return (
            f"Agreement({self.scorer!r} vs {self.labels}: {name}={_fmt(self.value)} "
            f"[{_fmt(low)}, {_fmt(high)}], n={self.n})"
        )

    def _repr_html_(self) -> str:
        name = "Cohen's kappa" if self.kind == "pass_fail" else "Spearman's rho"
        low, high = self.ci
        head = (
            f"<p><b>{html.escape(self.scorer)}</b> against {html.escape(self.labels)} labels: "
            f"{name} {_fmt(self.value)} (95% interval {_fmt(low)} to "
            f"{_fmt(high)}), on {self.n} labelled rows; "
            f"{len(self.disagreements)} disagree.</p>"
        )
        from ...show.escape import no_math

        # The table quotes outputs and reasons (a model's text): escaped by pandas, and kept
        # out of the math typesetter.
        return no_math(head + self.table.to_html())


def agreement(
    scorer_values: pd.Series,
    labels: pd.Series,
    *,
    kind: Literal["pass_fail", "score"],
    scorer: str,
    source: str = "human",
    context: pd.DataFrame | None = None,
    most: int = 20,
) -> Agreement:
    """Return how ``scorer_values`` agree with ``labels`` (aligned on their index). Rows where
    either is missing are left out. ``context`` (same index) adds columns to the
    disagreements; ``most`` caps how many are listed.

    Raises:
        ConfigError: too few rows both sides have a value for.
    """
    import pandas as pd

    both = pd.DataFrame({"scorer": scorer_values, "labels": labels}).dropna()
    if kind == "pass_fail":
        a = both["scorer"].astype(bool).rename(scorer)
        b = both["labels"].astype(bool).rename(source)
        kappa, ci, table = cohen_kappa(a, b)
        rho = math.nan
        gap = (a != b).astype(float)
    else:
        a = both["scorer"].astype(float).rename(scorer)
        b = both["labels"].astype(float).rename(source)
        rho, ci = spearman_rho(a, b)
        kappa = math.nan
        table = pd.crosstab(a.round().astype(int), b.round().astype(int))
        # Far apart in rank is what a rank correlation counts against the scorer.
        gap = (a.rank(pct=True) - b.rank(pct=True)).abs()
    far = both.assign(gap=gap)
    far = far[far["gap"] > 0].sort_values("gap", ascending=False, kind="stable").head(most)
    out = pd.DataFrame({scorer: far["scorer"], source: far["labels"]}, index=far.index)
    if context is not None:
        extra = context.loc[out.index, [c for c in context.columns if c not in out.columns]]
        out = pd.concat([extra, out], axis=1)
    return Agreement(scorer, source, kind, len(both), kappa, rho, ci, table, out)
