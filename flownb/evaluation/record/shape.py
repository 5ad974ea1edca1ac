"""What an evaluation report is made of, as the modules that render and store one see it.

:mod:`flownb.evaluation.reports.report` builds on :mod:`flownb.evaluation.html` (its views)
and :mod:`.store` (the run log); those read a report through :class:`ReportView` instead of
importing the report back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["ReportView", "ScorerInfo"]


@dataclass(frozen=True)
class ScorerInfo:
    """What the report knows of a scorer: its column, kind, threshold and output, how it was
    defined (its call, for the report's header), whether its mean is a rate (pick_best) and,
    for a judge, who judged: ``judge`` holds ``endpoint``, ``model`` (as sent), ``vendor`` and
    ``same_vendor`` (the variants of the judge's vendor: self-preference is possible there)."""

    name: str
    kind: str
    threshold: float | None
    pass_fail: bool
    output: str
    definition: str = ""
    rate: bool = False
    judge: Mapping[str, Any] | None = None


class ReportView(Protocol):
    """The members of an :class:`~flownb.evaluation.reports.report.EvalReport` its views and
    store read."""

    @property
    def id(self) -> str:
        """The evaluation's id in the run log."""

    @property
    def results(self) -> pd.DataFrame:
        """One row per (variant, input row)."""

    @property
    def runs(self) -> pd.DataFrame:
        """Every run, one row per (variant, input row, repeat)."""

    @property
    def summary(self) -> pd.DataFrame:
        """One row per variant."""

    @property
    def variants(self) -> Sequence[str]:
        """The variant names, the baseline first."""

    @property
    def scorers(self) -> Sequence[ScorerInfo]:
        """The scorers, in column order."""

    @property
    def outputs(self) -> Sequence[str]:
        """The flow's output names."""

    @property
    def kinds(self) -> Mapping[str, str]:
        """Output name -> ``"text"`` or ``"image"``."""

    @property
    def index_name(self) -> str:
        """The input rows' index column."""

    @property
    def inputs(self) -> Sequence[str]:
        """The input columns."""

    @property
    def created(self) -> float:
        """When the evaluation ran (seconds since the epoch)."""

    @property
    def context(self) -> Mapping[str, Any]:
        """What was evaluated: title, data set, variants' providers, models, prompts."""

    @property
    def setup(self) -> Mapping[str, Mapping[str, str | None]]:
        """Per variant, what it ran on: endpoint, model, system message."""

    def plot(self) -> Any:
        """A matplotlib figure of the scores per variant."""

    def frontier(self) -> Any:
        """Quality against price per row (see :mod:`flownb.evaluation.decision.frontier`)."""

    def price(self, rows: int = 1_000_000) -> pd.DataFrame:
        """Each variant's price for ``rows`` rows (see :mod:`flownb.evaluation.decision.price`)."""

    @property
    def variant_params(self) -> Mapping[str, Mapping[str, str]]:
        """Variant name -> its set-up as text (provider, model, prompts, model parameters)."""

    def score_frame(self) -> pd.DataFrame:
        """The scores, one row per (variant, input row)."""
