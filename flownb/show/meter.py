"""The money meter of a run in progress: what the finished runs cost so far, what the cache
saved, and how many runs had no known price. Progress bars show it as they advance, ``flownb
run`` prints its total line, and DataFrame results carry it in ``attrs``.
"""

from __future__ import annotations

import math
import threading
from typing import Any

__all__ = ["CostMeter", "attach", "show", "usd"]


def usd(value: float) -> str:
    """Return US dollars for people: ``$0``, ``$0.000042`` (a call costs fractions of a cent),
    ``$0.0123``, ``$12.34``; ``-`` when unknown (NaN)."""
    if math.isnan(value):
        return "-"
    if value == 0:
        return "$0"
    size = abs(value)
    return f"${value:.6f}" if size < 0.01 else f"${value:.4f}" if size < 1 else f"${value:,.2f}"


class CostMeter:
    """Adds up the cost of run results as they finish (safe from several threads)."""

    __slots__ = ("_lock", "runs", "saved", "spent", "unpriced")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.spent = 0.0
        self.saved = 0.0
        self.unpriced = 0  # finished runs whose cost is unknown (left out of ``spent``)
        self.runs = 0

    def add(self, result: Any) -> None:
        """Count one finished run's :class:`~flownb.runtime.result.RunResult` (``None``: failed)."""
        if result is None:
            return
        cost, saving = result.cost, result.cache_saving
        with self._lock:
            self.runs += 1
            if math.isnan(cost):
                self.unpriced += 1
            else:
                self.spent += cost
            if not math.isnan(saving):
                self.saved += saving

    def text(self) -> str:
        """Return the meter as a progress bar's postfix: ``$0.0123 spent, $0.0040 saved``."""
        if self.runs and self.unpriced == self.runs:
            return "cost unknown"
        parts = [f"{usd(self.spent)} spent"]
        if self.saved:
            parts.append(f"{usd(self.saved)} saved by cache")
        if self.unpriced:
            parts.append(f"{self.unpriced} unpriced")
        return ", ".join(parts)

    def total_line(self) -> str:
        """Return the one-line total a finished run ends with."""
        if self.runs and self.unpriced == self.runs:
            return f"cost: unknown (no price for this model); {self.runs} run(s)"
        line = f"cost: {usd(self.spent)} for {self.runs} run(s)"
        if self.saved:
            line += f"; the cache saved {usd(self.saved)}"
        if self.unpriced:
            line += f"; {self.unpriced} run(s) without a known price not counted"
        return line


def attach(bar: Any) -> CostMeter:
    """Return the meter shown on ``bar`` (a tqdm bar), creating it on first use."""
    meter = getattr(bar, "flownb_meter", None)
    if meter is None:
        meter = CostMeter()
        bar.flownb_meter = meter
    return meter


def show(bar: Any, result: Any) -> None:
    """Count ``result`` on ``bar``'s meter and show the meter beside the bar (redrawn with the
    bar's next update, not on its own)."""
    meter = attach(bar)
    meter.add(result)
    bar.set_postfix_str(meter.text(), refresh=False)
