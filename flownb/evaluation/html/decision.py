"""The decision in HTML: the saved page's frontier section (the picture, its sentence, each
variant's price at a million rows), a frontier shown on its own, and a choice. Variant names
are text: escaped here (:mod:`.format`), and drawn by matplotlib as SVG text it escapes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ...show.escape import no_math
from .format import dollars, esc, svg_img

if TYPE_CHECKING:
    from ..record.shape import ReportView

__all__ = ["choice_html", "frontier_html", "frontier_section"]

_PICTURE = "quality against price per row, one point per variant"


def _picture(frontier: Any) -> str:
    """Return the frontier's picture (an embedded SVG) and its sentence."""
    return f"{svg_img(frontier.svg(), _PICTURE)}<p>{esc(frontier.sentence)}</p>"


def frontier_html(frontier: Any) -> str:
    """Return a :class:`~flownb.evaluation.decision.frontier.Frontier` as HTML: its picture and
    its sentence."""
    return no_math(_picture(frontier))


def frontier_section(report: ReportView) -> str:
    """Return the report's frontier: its picture, its sentence and each variant's price at a
    million rows (list and batch), or '' when there is one variant or no frontier to draw."""
    if len(report.variants) < 2:
        return ""
    frontier = report.frontier()
    price = report.price(1_000_000)
    columns = ("price_per_row", "list_usd", "batch_usd", "judges_usd")
    rows = "".join(
        f"<tr><th>{esc(v)}</th>" + "".join(f"<td>{dollars(r[c])}</td>" for c in columns) + "</tr>"
        for v, r in price.iterrows()
    )
    return (
        f"<h2>Quality, price and speed</h2>{_picture(frontier)}"
        "<table class='flownb-eval'><thead><tr><th>variant</th><th>price per row</th>"
        "<th>1,000,000 rows</th><th>batch API</th><th>judges</th></tr></thead>"
        f"<tbody>{rows}</tbody></table><p class='inp'>list prices; batch API: half price "
        "where the provider has one (–: none); judges apart (–: not known)</p>"
    )


def choice_html(lines: Sequence[str], advice: Sequence[str]) -> str:
    """Return a :class:`~flownb.evaluation.decision.choose.Choice` as HTML from its ``lines``
    (the verdict, the rule, a ``- `` line per variant) and its ``advice``."""
    head = "".join(f"<p>{esc(line)}</p>" for line in lines[:2] if line)
    items = "".join(f"<li>{esc(line[2:])}</li>" for line in lines if line[:2] == "- ")
    rest = "".join(f"<p>{esc(line)}</p>" for line in advice)
    return no_math(f"{head}<ul>{items}</ul>{rest}", css="flownb-choice")
