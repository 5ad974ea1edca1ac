"""Repeats: ``evaluate(..., repeats=k)`` runs each (variant, row) k times and reports the
mean and spread of every score.

- Repeat ``r`` runs the variant's flow on :func:`~flownb.providers.repeat.repeated` (``r`` in its
  cache keys): k draws, each cached apart, so a re-run of the same evaluation pays nothing.
  Repeat 0 keeps the keys of a plain run. Judges are repeated alike (each repeat's outputs get
  their own verdict, so the whole evaluation costs k times one run).
- ``report.runs`` keeps every run (a ``repeat`` column, ordered by :func:`order_runs`); what
  the report makes of them (per-row means, flips, the spread) is
  :mod:`flownb.evaluation.reports.spread`.
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
from ..reports.spread import row_keys

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "check_repeats",
    "order_runs",
    "repeat_flow",
    "repeat_judge",
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
    v, pos = row_keys(runs, variants)
    ordered = runs.assign(_v=v, _pos=pos).sort_values(["_v", "_pos", "repeat"], kind="stable")
    return ordered.drop(columns=["_v", "_pos"]).reset_index(drop=True)
