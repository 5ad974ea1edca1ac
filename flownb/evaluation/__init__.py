"""Evaluation: every variant of a flow over the same rows, graded by scorers, compared side by
side (see :func:`evaluate` and :class:`EvalReport`)."""

from __future__ import annotations

from .reports.history import load_report, reports
from .reports.report import EvalReport
from .running.run import evaluate

__all__ = ["EvalReport", "evaluate", "load_report", "reports"]
