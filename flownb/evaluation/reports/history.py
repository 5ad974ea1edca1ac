"""Evaluations kept in the run log, read back: :func:`load_report` (a report with its labels)
and :func:`reports` (what is kept). Both are entry points: with no ``home`` they read the
FLOWNB_HOME of the environment."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ...config.settings import resolve_run_config
from ..record.shape import ScorerInfo
from ..record.store import EvalLog, list_logs, read_results
from .report import EvalReport

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["load_report", "reports"]


def load_report(id: str, home: str | Path | None = None) -> EvalReport:
    """Return the evaluation ``id`` kept in the run log of ``home`` (default: FLOWNB_HOME), with
    its labels and pairwise preferences (and, with repeats, every run). An evaluation kept by a
    flownb before version 2 of the log comes back with its scores only (no outputs).

    Raises:
        ConfigError: no evaluation with that id, or one kept by a newer flownb.
    """
    import numpy as np

    where = Path(home) if home is not None else resolve_run_config(local=False).home
    log = EvalLog.read(id, where)
    scorers = [ScorerInfo(**s) for s in log.scorers]
    results = read_results(log.id, where)
    if results is None:  # a version 1 log: the scores only
        results = log.frame().rename(columns={"index": log.index_name})
    # JSON keeps values, not dtypes: give the columns the ones evaluate() made.
    for s in scorers:
        if s.name in results.columns:
            kind = float if s.kind == "float" else "boolean"
            results[s.name] = results[s.name].astype(kind)
    for name in ("latency_s", "total_tokens"):
        results[name] = results[name].astype(float) if name in results.columns else np.nan
    for name in ("passed", "cached"):
        results[name] = results[name].fillna(False).astype(bool) if name in results else False
    if "error" not in results.columns:
        results["error"] = None
    report = EvalReport(
        results,
        log.variants,
        scorers,
        outputs=log.outputs,
        kinds=log.kinds,
        index_name=log.index_name,
        inputs=log.inputs,
        id=log.id,
        home=where,
        flow_files=log.flows,
    )
    if log.repeats > 1:  # the kept results are every run: the per-row ones are made again
        report.set_runs(results)
    report.created = log.created
    report.variant_params = log.variant_params
    report.reload_labels()
    report.reload_preferences()
    return report


def reports(home: str | Path | None = None) -> pd.DataFrame:
    """Return the evaluations kept in the run log of ``home`` (default: FLOWNB_HOME), oldest
    first: ``id`` (for :func:`load_report`), ``created`` (UTC), ``variants``, ``rows`` (input
    rows) and ``labels`` (labelled (row, variant) pairs)."""
    import pandas as pd

    where = Path(home) if home is not None else resolve_run_config(local=False).home
    frame = pd.DataFrame(list_logs(where), columns=["id", "created", "variants", "rows", "labels"])
    frame["created"] = pd.to_datetime(frame["created"].astype(float), unit="s", utc=True)
    return frame
