"""How fast each variant answers: a row's time at the provider and the spread over rows.

A row's **provider time** is the longest chain of its calls through the flow's graph (the
critical path: a node starts once the nodes it reads have answered), each call counted for the
time its provider took to answer (request sent to answer read: no wait for a concurrency slot,
no retry, no cache lookup). A row served from the cache counts at the time its answers took when
they were bought (kept with them since flownb records it); a row with a call whose time is not
known (bought before flownb kept times, answered by a batch, failed) is left out and counted.

Per variant: the median (p50) and 95th percentile (p95) of those row times, how many rows they
rest on and how many of them came from the cache, how many rows were left out, and the output
tokens per second of provider time over the calls that went to the provider in this run.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["SPEED_COLUMNS", "row_speed", "sig", "speed_text", "variant_speed"]

# The summary's speed columns, in order (see variant_speed).
SPEED_COLUMNS = (
    "latency_p50_s",
    "latency_p95_s",
    "latency_rows",
    "latency_cached_rows",
    "latency_unknown_rows",
    "tokens_per_s",
)


def row_speed(plan: Any, generations: Sequence[Any]) -> tuple[float, float, float]:
    """Return a finished row's ``(provider_s, output_tokens, fresh_s)``: its provider time along
    the critical path (NaN when a call's time is unknown), and the output tokens and provider
    seconds of the calls that went to the provider in this run (0, 0 when none did).

    ``plan`` is the flow's plan (its steps name the steps they read, ``upstream``), or None: the
    calls are then taken as one chain."""
    n = len(generations)
    ends: list[float] = [0.0] * n
    steps = getattr(plan, "steps", None)
    tokens = 0.0
    fresh = 0.0
    for k, gen in enumerate(generations):
        took = getattr(gen, "provider_s", None)
        if took is None or gen is None:
            ends[k] = math.nan
            continue
        if not gen.cached:
            fresh += took
            usage = gen.usage or {}
            # OpenAI and Gemini (as flownb reads them) say completion_tokens; Anthropic output.
            tokens += float(usage.get("completion_tokens", usage.get("output_tokens", 0)) or 0)
        if steps is not None and k < len(steps):
            before = [ends[u] for u in steps[k].upstream if u < k]
        else:
            before = [ends[k - 1]] if k else []
        # A NaN upstream makes this end NaN too (max() would drop it depending on the order).
        start = math.nan if any(math.isnan(b) for b in before) else max(before, default=0.0)
        ends[k] = start + took
    if not n or any(math.isnan(e) for e in ends):
        return math.nan, tokens, fresh
    return max(ends), tokens, fresh


def _percentile(values: Sequence[float], q: float) -> float:
    """Return the ``q`` percentile (0-100) of ``values``, interpolated linearly between the two
    nearest ranks (numpy's default), NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def variant_speed(runs: pd.DataFrame) -> dict[str, float]:
    """Return one variant's speed figures from its runs (one row per input row and repeat, with
    ``provider_s``, ``output_tokens``, ``fresh_s``, ``cached`` and ``error``): the
    :data:`SPEED_COLUMNS`. Reports made before these columns existed give NaNs and 0 counts."""
    if "provider_s" not in runs.columns:
        return dict.fromkeys(SPEED_COLUMNS, math.nan)
    ok = runs["error"].isna()
    took = runs["provider_s"].astype(float)
    measured = ok & took.notna()
    times = took[measured].tolist()
    fresh = float(runs.loc[ok, "fresh_s"].astype(float).sum())
    tokens = float(runs.loc[ok, "output_tokens"].astype(float).sum())
    return {
        "latency_p50_s": _percentile(times, 50),
        "latency_p95_s": _percentile(times, 95),
        "latency_rows": int(measured.sum()),
        # Rows whose every answer came from the cache: timed as when they were bought.
        "latency_cached_rows": int((measured & runs["cached"].astype(bool)).sum()),
        "latency_unknown_rows": int((~measured).sum()),
        "tokens_per_s": tokens / fresh if fresh > 0 and tokens > 0 else math.nan,
    }


def sig(x: float, digits: int = 3) -> str:
    """Return ``x`` with ``digits`` significant digits, never in exponent notation
    (``0.0000812``, ``1.53``, ``12300``); ``-`` for NaN."""
    import numpy as np

    if math.isnan(x):
        return "-"
    return str(np.format_float_positional(x, precision=digits, fractional=False, trim="-"))


def speed_text(row: Any) -> str:
    """Return one variant's speed for a text table: ``0.612 / 0.664 (10)``, p50 / p95 seconds
    and the rows timed (``+3 cached`` when some were timed as bought); ``-`` when none was."""
    rows = int(row.get("latency_rows") or 0)
    if not rows:
        return "-"
    cached = int(row.get("latency_cached_rows") or 0)
    more = f", {cached} cached" if cached else ""
    return f"{sig(row['latency_p50_s'])} / {sig(row['latency_p95_s'])} ({rows}{more})"
