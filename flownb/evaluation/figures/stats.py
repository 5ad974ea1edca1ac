"""Intervals and paired tests for an evaluation's summary.

- pass rates: Wilson score interval (sound for small n and rates near 0 or 1);
- float scores: Student-t interval of the mean;
- a variant against the first, over the same rows: McNemar's exact test for pass/fail scores,
  and for float scores the Wilcoxon signed-rank test when SciPy is installed, else an exact
  sign test (both make no normality assumption).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import NormalDist
from typing import Any

__all__ = [
    "mcnemar_exact",
    "mean_interval",
    "paired_float_test",
    "sign_test",
    "t_quantile",
    "wilson",
]

_Z = NormalDist().inv_cdf(0.975)
# Two-sided 95% Student-t quantiles for 1..30 degrees of freedom (beyond: the normal is within
# 2%); a table keeps SciPy optional.
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def t_quantile(df: int) -> float:
    """Return the 97.5% quantile of Student's t with ``df`` degrees of freedom."""
    if df < 1:
        return math.nan
    if df <= len(_T975):
        return _T975[df - 1]
    # Cornish-Fisher expansion around the normal quantile: accurate to 1e-3 beyond 30 df.
    z = _Z
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


def wilson(successes: float, n: int) -> tuple[float, float]:
    """Return the 95% Wilson interval of a proportion (NaNs when ``n`` is 0); ``successes`` may
    hold halves (a tie counted half a win)."""
    if n == 0:
        return math.nan, math.nan
    p = successes / n
    denom = 1 + _Z**2 / n
    centre = (p + _Z**2 / (2 * n)) / denom
    half = _Z * math.sqrt(p * (1 - p) / n + _Z**2 / (4 * n * n)) / denom
    # At p = 0 (or 1) the bound is exactly 0 (or 1); rounding would leave 1e-17 there.
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == n else min(1.0, centre + half)
    return low, high


def mean_interval(values: Sequence[float]) -> tuple[float, float, float]:
    """Return ``(mean, low, high)``: the mean and its 95% t interval (NaN where undefined)."""
    n = len(values)
    if n == 0:
        return math.nan, math.nan, math.nan
    mean = math.fsum(values) / n
    if n == 1:
        return mean, math.nan, math.nan
    var = math.fsum((v - mean) ** 2 for v in values) / (n - 1)
    half = t_quantile(n - 1) * math.sqrt(var / n)
    return mean, mean - half, mean + half


def _binom_two_sided(k: int, n: int) -> float:
    """Exact two-sided p-value of ``k`` successes out of ``n`` under p = 1/2."""
    if n == 0:
        return 1.0
    k = min(k, n - k)
    tail = math.fsum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, 2 * tail)


def sign_test(wins: int, losses: int) -> float:
    """Return the exact two-sided sign test p-value of ``wins`` against ``losses`` (1.0 when
    there are neither)."""
    return _binom_two_sided(wins, wins + losses)


def mcnemar_exact(first: Sequence[bool], other: Sequence[bool]) -> float:
    """Return McNemar's exact p-value for paired pass/fail outcomes (the discordant pairs)."""
    b = sum(1 for x, y in zip(first, other, strict=True) if x and not y)
    c = sum(1 for x, y in zip(first, other, strict=True) if y and not x)
    return _binom_two_sided(b, b + c)


def paired_float_test(first: Sequence[float], other: Sequence[float]) -> float:
    """Return a two-sided p-value that paired float scores differ: Wilcoxon signed-rank (SciPy),
    else the exact sign test. 1.0 when every pair is equal."""
    diffs = [y - x for x, y in zip(first, other, strict=True) if y != x]
    if not diffs:
        return 1.0
    try:
        from scipy.stats import wilcoxon
    except ImportError:
        positive = sum(1 for d in diffs if d > 0)
        return _binom_two_sided(positive, len(diffs))
    return float(wilcoxon(diffs).pvalue)


def paired_p(first: Any, other: Any, name: str, kind: str) -> float:
    """Return the p-value of the paired test between two variants' rows (DataFrames in the same
    row order) on metric ``name`` (``"pass_rate"``: the ``passed`` column): McNemar's exact test
    for a pass/fail metric (``kind="bool"``), the paired test of :func:`paired_float_test` for a
    score; NaN when no row has both values."""
    column = "passed" if name == "pass_rate" else name
    a = first[column].reset_index(drop=True)
    b = other[column].reset_index(drop=True)
    both = a.notna() & b.notna()
    if not both.any():
        return math.nan
    if kind == "bool":
        return mcnemar_exact(
            (a[both].astype(float) > 0.5).tolist(), (b[both].astype(float) > 0.5).tolist()
        )
    return paired_float_test(a[both].astype(float).tolist(), b[both].astype(float).tolist())
