"""The money meter of a run in progress: what the finished runs spent so far (the judges' part
apart), what the cache saved, and how many runs had a call of unknown price. Progress bars show
it as they advance, ``flownb run`` prints its total line, and DataFrame results carry it in
``attrs``.
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
    """Adds up the money of run results as they finish (safe from several threads): what they
    spent and what the cache saved, the judges' calls apart from the flows' and in the totals.
    A run some of whose paid calls have no price adds the priced ones and counts as
    ``unpriced``: the figure shown is then "at least" that much."""

    __slots__ = ("_lock", "judge_runs", "judge_spent", "runs", "saved", "spent", "unpriced")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.spent = 0.0  # every run's, the judges' included
        self.saved = 0.0
        self.judge_spent = 0.0  # the judges' part of ``spent``
        self.judge_runs = 0
        self.unpriced = 0  # finished runs with a paid call of unknown price (partly counted)
        self.runs = 0

    def add(self, result: Any, *, judge: bool = False) -> None:
        """Count one finished run's :class:`~flownb.runtime.result.RunResult` (``None``: failed);
        ``judge``: a judge's call, kept apart as well as in the totals."""
        if result is None:
            return
        cost, saving = result.cost, result.cache_saving
        money = getattr(result, "money", None)
        partial = bool(money.unpriced_paid) if money is not None else math.isnan(cost)
        with self._lock:
            self.runs += 1
            if partial or math.isnan(cost):
                self.unpriced += 1
            if not math.isnan(cost):
                self.spent += cost
                if judge:
                    self.judge_spent += cost
            if judge:
                self.judge_runs += 1
            if not math.isnan(saving):
                self.saved += saving

    def add_answered(self, runs: int, *, priced: bool) -> None:
        """Count ``runs`` finished runs that were answered at once, saving nothing (a batch an
        inline provider answered in bulk: no result per run to add): free when ``priced``
        (offline), else of unknown price."""
        with self._lock:
            self.runs += runs
            if not priced:
                self.unpriced += runs

    def add_failed(self, exc: BaseException) -> None:
        """Count what a failed run's error says it paid (``paid_usd``: an image generated but
        not fetched, :class:`~flownb.errors.ImageNotFetched`); nothing for other errors."""
        paid = getattr(exc, "paid_usd", None)
        if paid is None:
            return
        with self._lock:
            self.runs += 1
            if math.isnan(paid):
                self.unpriced += 1
            else:
                self.spent += paid

    def _spent(self) -> str:
        """Return the spent figure: ``$0.0123``, ``at least $0.0123`` when some paid call has
        no price."""
        return f"at least {usd(self.spent)}" if self.unpriced else usd(self.spent)

    def text(self) -> str:
        """Return the meter as a progress bar's postfix: ``$0.0123 spent (judges $0.0018),
        $0.0040 saved by cache``."""
        if self.runs and self.unpriced == self.runs and not self.spent:
            return "price unknown"
        spent = f"{self._spent()} spent"
        if self.judge_runs:
            spent += f" (judges {usd(self.judge_spent)})"
        parts = [spent]
        if self.saved:
            parts.append(f"{usd(self.saved)} saved by cache")
        if self.unpriced:
            parts.append(f"{self.unpriced} with price unknown")
        return ", ".join(parts)

    def total_line(self) -> str:
        """Return the one-line total a finished run ends with."""
        if self.runs and self.unpriced == self.runs and not self.spent:
            return f"cost: price unknown (no price for this model); {self.runs} run(s)"
        line = f"cost: {self._spent()} for {self.runs} run(s)"
        if self.judge_runs:
            line += f", of which judges {usd(self.judge_spent)}"
        if self.saved:
            line += f"; the cache saved {usd(self.saved)}"
        if self.unpriced:
            line += f"; {self.unpriced} run(s) with a call of unknown price (not counted)"
        return line


def attach(bar: Any) -> CostMeter:
    """Return the meter shown on ``bar`` (a tqdm bar), creating it on first use."""
    meter = getattr(bar, "flownb_meter", None)
    if meter is None:
        meter = CostMeter()
        bar.flownb_meter = meter
    return meter


def show(bar: Any, result: Any, *, judge: bool = False) -> None:
    """Count ``result`` on ``bar``'s meter (``judge``: a judge's call) and show the meter beside
    the bar (redrawn with the bar's next update, not on its own)."""
    meter = attach(bar)
    meter.add(result, judge=judge)
    bar.set_postfix_str(meter.text(), refresh=False)
