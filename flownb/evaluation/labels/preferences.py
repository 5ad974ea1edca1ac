"""Pairwise preferences on an evaluation: for one input row, which of two variants' outputs a
person finds better (or a tie). ``report.prefer(...)`` keeps each in the run log as it is given,
``report.preferences`` shows the ones in force, ``report.win_rates()`` turns them into win
rates (as ``pick_best`` gives a judge's), and ``report.review(pairwise=(a, b))`` asks for them
blind, in a widget (see :mod:`.pairwise`).

:class:`Preferring` is mixed into :class:`~flownb.evaluation.reports.report.EvalReport`; it
reads the report's ``variants``, ``id``, ``home`` and, through ``_row_key``, its rows.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...errors import ConfigError
from ..figures import stats

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["TIE", "Preferring"]

TIE = "tie"  # the winner of a pair neither side of which is better


class Preferring:
    """Pairwise preferences for a report: given in Python or through the blind review widget,
    kept in the run log."""

    id: str
    variants: list[str]
    home: Path | None

    if TYPE_CHECKING:

        def _row_key(self, row: Any) -> Any:
            """The index label ``row`` names (provided by Labelled)."""

    # -- giving preferences ------------------------------------------------------------------------

    def prefer(
        self,
        row: Any,
        winner: str,
        *,
        pair: Sequence[str] | None = None,
        note: str = "",
        shown_first: str | None = None,
    ) -> None:
        """Say which of two variants' outputs for input row ``row`` (its index label) is better:
        ``winner`` is one of ``pair`` or ``"tie"``. ``pair`` is the two variants compared
        (default: the report's two variants, when it has two). ``shown_first`` records which
        of them a blind review showed as "A" (None: given in Python). Kept in the run log at
        once (when the evaluation has one); preferring again for the same row and pair
        replaces the earlier answer in :attr:`preferences`.

        Raises:
            ConfigError: an unknown row or variant, a pair that is not two distinct variants
                of the report, no pair where the report has more than two variants, or a
                winner that is neither of the pair nor ``"tie"``.
        """
        a, b = self._pair(pair)
        if winner not in (a, b, TIE):
            raise ConfigError(f"winner is {a!r}, {b!r} or {TIE!r}, not {winner!r}")
        if shown_first is not None and shown_first not in (a, b):
            raise ConfigError(f"shown_first is {a!r} or {b!r}, not {shown_first!r}")
        given = {
            "row": self._row_key(row),
            "a": a,
            "b": b,
            "winner": winner,
            "shown_first": shown_first,
            "note": str(note or ""),
            "labelled_at": time.time(),
        }
        if self.home is not None:
            from ..record.store import save_preferences

            save_preferences(self.id, [given], self.home)  # first: one the log refused is lost
        else:
            self._preference_state()[1].append(given)  # kept when the report is stored
        self._preference_state()[0].append(given)

    @property
    def preferences(self) -> pd.DataFrame:
        """The preferences in force, one per (row, pair), in the order first given: ``row`` (the
        input row's index label), ``a`` and ``b`` (the pair, as given), ``winner`` (``a``'s or
        ``b``'s name, or ``"tie"``), ``shown_first`` (the variant a blind review showed as "A";
        None when given in Python), ``note``, ``labelled_at`` (UTC)."""
        import pandas as pd

        from ..record.store import PREFERENCE_COLUMNS

        latest: dict[tuple[str, frozenset[str]], dict[str, Any]] = {}
        for given in self._preference_state()[0]:
            latest[(str(given["row"]), frozenset((given["a"], given["b"])))] = given
        frame = pd.DataFrame(list(latest.values()), columns=PREFERENCE_COLUMNS)
        frame["note"] = frame["note"].astype(object)
        frame["labelled_at"] = pd.to_datetime(
            frame["labelled_at"].astype(float), unit="s", utc=True
        )
        return frame

    def win_rates(self, pair: Sequence[str] | None = None) -> pd.DataFrame:
        """Return the people's win rates from the pairwise preferences (of ``pair`` only, when
        given; else every pair's, pooled per variant), one row per variant compared (index:
        variant): ``n`` comparisons, ``wins``, ``losses``, ``ties``, ``win_rate`` (wins plus half
        the ties, over ``n``: as ``pick_best``'s mean is a judge's), its 95% Wilson interval
        (``win_rate_low``/``_high``) and ``p``: an exact sign test of wins against losses (ties
        left out), low when one side is preferred beyond chance.

        Raises:
            ConfigError: an unknown pair.
        """
        import pandas as pd

        given = self.preferences
        if pair is not None:
            a, b = self._pair(pair)
            given = given[
                ((given["a"] == a) & (given["b"] == b)) | ((given["a"] == b) & (given["b"] == a))
            ]
        counts: dict[str, list[int]] = {}  # variant -> [wins, losses, ties]
        for a, b, winner in zip(given["a"], given["b"], given["winner"], strict=True):
            for me in (a, b):
                tally = counts.setdefault(me, [0, 0, 0])
                tally[2 if winner == TIE else 0 if winner == me else 1] += 1
        rows = []
        order = [v for v in self.variants if v in counts]
        for v in order:
            wins, losses, ties = counts[v]
            n = wins + losses + ties
            share = wins + ties / 2
            low, high = stats.wilson(share, n)
            rows.append(
                {
                    "n": n,
                    "wins": wins,
                    "losses": losses,
                    "ties": ties,
                    "win_rate": share / n if n else math.nan,
                    "win_rate_low": low,
                    "win_rate_high": high,
                    "p": stats.sign_test(wins, losses),
                }
            )
        columns = ["n", "wins", "losses", "ties", "win_rate", "win_rate_low", "win_rate_high", "p"]
        return pd.DataFrame(rows, index=pd.Index(order, name="variant"), columns=columns)

    # -- internals -------------------------------------------------------------------------------

    def _pair(self, pair: Sequence[str] | None) -> tuple[str, str]:
        """Return the two variants compared.

        Raises:
            ConfigError: see :meth:`prefer`.
        """
        if pair is None:
            if len(self.variants) != 2:
                raise ConfigError(
                    f"this evaluation has {len(self.variants)} variants: say which two are "
                    "compared with pair=(a, b)"
                )
            return self.variants[0], self.variants[1]
        if isinstance(pair, str) or len(pair) != 2 or pair[0] == pair[1]:
            raise ConfigError(f"pair is two different variants, (a, b), not {pair!r}")
        for v in pair:
            if v not in self.variants:
                raise ConfigError(f"no variant {v!r}; the variants are {self.variants}")
        return pair[0], pair[1]

    def _preference_state(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Return every preference as given (in order) and those not yet in a run log."""
        state = self.__dict__.get("_preferences_given")
        if state is None:
            state = self.__dict__["_preferences_given"] = ([], [])
        return state

    def reload_preferences(self) -> None:
        """Read this evaluation's preferences from its run log again, replacing those in memory;
        preferences not yet kept are kept first.

        Raises:
            ConfigError: the evaluation has no run log.
        """
        from ..record.store import read_preferences

        if self.home is None:
            raise ConfigError("this evaluation has no run log; store(home=...) it first")
        self._store_preferences(self.home)
        self._preference_state()[0][:] = read_preferences(self.id, self.home)

    def _store_preferences(self, home: Path) -> None:
        """Keep the preferences given while the report had no run log in the one of ``home``."""
        pending = self._preference_state()[1]
        if pending:
            from ..record.store import save_preferences

            save_preferences(self.id, list(pending), home)
            pending.clear()
