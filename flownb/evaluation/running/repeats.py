"""Repeats: ``evaluate(..., repeats=k)`` runs each (variant, row) k times and reports the
mean and spread of every score.

- Repeat ``r`` runs the variant's flow on :func:`~flownb.providers.repeat.repeated` (``r`` in its
  cache keys): k draws, each cached apart, so a re-run of the same evaluation pays nothing.
  Repeat 0 keeps the keys of a plain run. Judges are repeated alike (each repeat's outputs get
  their own verdict, so the whole evaluation costs k times one run).
- ``report.runs`` keeps every run (a ``repeat`` column); ``report.results`` is one row per
  (variant, row) made by :func:`combine`: scores are means over the repeats (a pass/fail
  scorer's column becomes the share of repeats that passed), ``flips`` marks the rows whose
  pass/fail differed between repeats. The summary's intervals and paired tests work on these
  per-row means (the input row stays the unit: repeats of one row are not independent rows).
- :func:`row_spread` and :func:`variant_spread` give each metric's mean, std, min and max over
  the repeats, per row and per variant.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from ...core.flow import FlowCore
from ...core.local import local_of
from ...errors import ConfigError
from ...providers.repeat import repeated
from ...scorers.judge import JudgeScorer
from ..figures.money import combine_money
from ..record.shape import ScorerInfo

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "check_repeats",
    "combine",
    "order_runs",
    "repeat_flow",
    "repeat_judge",
    "row_spread",
    "variant_spread",
]

J = TypeVar("J", bound=JudgeScorer)


def check_repeats(repeats: Any, flows: Sequence[FlowCore]) -> int:
    """Return ``repeats`` as a count.

    Raises:
        ConfigError: not a whole number of at least 1, or a served flow asked to repeat (its
            cache is the service's: the repeats could not be told apart there).
    """
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ConfigError(f"repeats is a whole number of runs per row, at least 1, not {repeats!r}")
    if repeats > 1:
        served = [f.name for f in flows if local_of(f) is None]
        if served:
            raise ConfigError(
                f"repeats={repeats} needs local flows: {', '.join(map(repr, served))} is served, "
                "and the service's cache would answer every repeat alike"
            )
    return repeats


def repeat_flow(flow: FlowCore, repeat: int) -> FlowCore:
    """Return ``flow`` for repeat ``repeat``: itself for 0, else the same flow (graph, run
    configuration, provider instance) whose cache keys carry the repeat."""
    local = local_of(flow)
    if repeat == 0 or local is None:
        return flow
    return local.with_provider(repeated(local.provider, repeat))


def repeat_judge(judge: J, repeat: int) -> J:
    """Return ``judge`` for repeat ``repeat`` (bound already: see ``JudgeScorer.grades``):
    itself for 0, else a copy whose calls go through its flow for that repeat."""
    if repeat == 0:
        return judge
    flow = repeat_flow(judge.flow(), repeat)
    twin = copy.copy(judge)
    # The copy keeps the judge's rubric, model and parsing; only where its calls go differs.
    twin.flow = lambda: flow  # type: ignore[method-assign,assignment,return-value]
    return twin


def _metrics(scorers: Sequence[ScorerInfo]) -> list[str]:
    return ["passed", *(s.name for s in scorers)]


def _numeric(column: pd.Series) -> pd.Series:
    """Return a score or pass column as floats (pass/fail as 1.0/0.0, missing as NaN)."""
    return column.astype("Float64").astype(float)


def combine(
    runs: pd.DataFrame, scorers: Sequence[ScorerInfo], variants: Sequence[str]
) -> pd.DataFrame:
    """Return one row per (variant, input row) from ``runs`` (every repeat, a ``repeat`` column;
    ordered by variant, row, repeat as :func:`order_runs` leaves them): the inputs, outputs,
    reasons and index of repeat 0; each scorer's mean over the repeats that scored (pass/fail
    as the share that passed); ``passed`` the share of repeats that passed; ``flips`` whether
    it differed between them; ``latency_s`` the mean; ``total_tokens``, ``spent_usd`` and
    ``saved_usd`` the sums, ``price_usd`` the mean (one run's list price; see :mod:`.money`);
    ``cached`` whether every repeat was; ``error`` the first repeat's error, if any failed."""
    keys = _row_keys(runs, variants)
    grouped = runs.assign(_v=keys[0], _pos=keys[1]).groupby(["_v", "_pos"], sort=True)
    first = runs[runs["repeat"] == 0].drop(columns="repeat").reset_index(drop=True)
    for name in _metrics(scorers):
        first[name] = grouped[name].apply(lambda c: _numeric(c).mean()).to_numpy(dtype=float)
    passed = runs["passed"].astype(bool)
    flips = passed.groupby([keys[0], keys[1]], sort=True).nunique().to_numpy() > 1
    first.insert(first.columns.get_loc("passed") + 1, "flips", flips)
    first["latency_s"] = grouped["latency_s"].mean().to_numpy(dtype=float)
    first["total_tokens"] = grouped["total_tokens"].sum(min_count=1).to_numpy(dtype=float)
    combine_money(first, grouped)
    first["cached"] = grouped["cached"].all().to_numpy(dtype=bool)
    first["error"] = grouped["error"].agg(_first_error).to_numpy(dtype=object)
    first["error"] = first["error"].where(first["error"].notna(), None)
    return first


def _first_error(errors: pd.Series) -> Any:
    found = errors.dropna()
    return found.iloc[0] if len(found) else None


def _row_keys(runs: pd.DataFrame, variants: Sequence[str]) -> tuple[Any, Any]:
    """Return, per run, its variant's position and its input row's position (input row index
    labels may repeat, so rows are told apart by position)."""
    order = {v: i for i, v in enumerate(variants)}
    v = runs["variant"].map(order).to_numpy()
    pos = runs.groupby(["variant", "repeat"], sort=False).cumcount().to_numpy()
    return v, pos


def order_runs(frames: Sequence[pd.DataFrame], variants: Sequence[str]) -> pd.DataFrame:
    """Return the results of each repeat (``frames[r]``, variant-major) as one frame ordered by
    variant, input row and repeat, with the ``repeat`` column after the input row's index."""
    import pandas as pd

    parts = []
    for r, frame in enumerate(frames):
        part = frame.copy()
        part.insert(2, "repeat", r)
        parts.append(part)
    runs = pd.concat(parts, ignore_index=True)
    v, pos = _row_keys(runs, variants)
    ordered = runs.assign(_v=v, _pos=pos).sort_values(["_v", "_pos", "repeat"], kind="stable")
    return ordered.drop(columns=["_v", "_pos"]).reset_index(drop=True)


def row_spread(
    runs: pd.DataFrame, scorers: Sequence[ScorerInfo], variants: Sequence[str], index_name: str
) -> pd.DataFrame:
    """Return one row per (variant, input row): ``variant``, the row's index, ``repeats`` (how
    many ran), then for ``passed`` and each scorer ``<name>_mean``, ``<name>_std`` (sample
    standard deviation over the repeats; NaN with one), ``<name>_min`` and ``<name>_max``
    (pass/fail as 1.0/0.0), and ``flips``: whether pass/fail differed between repeats."""
    import pandas as pd

    keys = _row_keys(runs, variants)
    frame = runs.assign(_v=keys[0], _pos=keys[1])
    grouped = frame.groupby(["_v", "_pos"], sort=True)
    first = grouped.first()
    out: dict[str, Any] = {
        "variant": first["variant"].to_numpy(),
        index_name: first[index_name].to_numpy(),
        "repeats": grouped.size().to_numpy(),
    }
    for name in _metrics(scorers):
        values = _numeric(frame[name]).groupby([frame["_v"], frame["_pos"]], sort=True)
        out[f"{name}_mean"] = values.mean().to_numpy()
        out[f"{name}_std"] = values.std(ddof=1).to_numpy()
        out[f"{name}_min"] = values.min().to_numpy()
        out[f"{name}_max"] = values.max().to_numpy()
    out["flips"] = grouped["passed"].nunique().to_numpy() > 1
    return pd.DataFrame(out)


def variant_spread(
    runs: pd.DataFrame, scorers: Sequence[ScorerInfo], variants: Sequence[str]
) -> dict[str, dict[str, float]]:
    """Return per variant, for ``pass_rate`` and each scorer, ``<name>_std``, ``<name>_min`` and
    ``<name>_max`` of the figure each repeat alone would give (its mean over the rows), and
    ``flips``: how many of the variant's rows flip between repeats."""
    import math

    out: dict[str, dict[str, float]] = {}
    for v in variants:
        mine = runs[runs["variant"] == v]
        got: dict[str, float] = {}
        for name in _metrics(scorers):
            per_repeat = _numeric(mine[name]).groupby(mine["repeat"]).mean().dropna()
            shown = "pass_rate" if name == "passed" else name
            got[f"{shown}_std"] = float(per_repeat.std(ddof=1)) if len(per_repeat) > 1 else math.nan
            got[f"{shown}_min"] = float(per_repeat.min()) if len(per_repeat) else math.nan
            got[f"{shown}_max"] = float(per_repeat.max()) if len(per_repeat) else math.nan
        pos = mine.groupby("repeat").cumcount()
        got["flips"] = float((mine["passed"].astype(bool).groupby(pos).nunique() > 1).sum())
        out[v] = got
    return out
