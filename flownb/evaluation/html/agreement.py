"""A scorer's agreement with people in HTML (``report.agreement(scorer)`` in a notebook): the
figure with its interval, and the table of labels against scores. Text is written by the rules
of :mod:`.format`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...show.escape import no_math
from .format import esc

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["agreement_html"]


def agreement_html(
    scorer: str, labels: str, figure: str, n: int, disagree: int, table: pd.DataFrame
) -> str:
    """Return the agreement of ``scorer`` with ``labels`` labels: ``figure`` (the statistic, its
    value and interval, in words) on ``n`` labelled rows of which ``disagree`` disagree, then
    ``table``."""
    head = (
        f"<p><b>{esc(scorer)}</b> against {esc(labels)} labels: {esc(figure)}, on {n} labelled "
        f"rows; {disagree} disagree.</p>"
    )
    # The table quotes outputs and reasons (a model's text): escaped by pandas, and kept out of
    # the math typesetter with the rest.
    return no_math(head + table.to_html())
