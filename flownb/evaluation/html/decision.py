"""The HTML report's parts for the decision: each variant's speed cell in the summary table, and
the frontier section (the picture as an embedded image, its sentence, the price at a million
rows). Variant names are text: escaped here, and drawn by matplotlib as SVG text it escapes."""

from __future__ import annotations

import base64
import html
import math
from typing import TYPE_CHECKING, Any

from ...show.meter import usd
from ..figures.speed import sig

if TYPE_CHECKING:
    from ..record.shape import ReportView

__all__ = ["frontier_section", "speed_cell", "svg_img"]

SPEED_HEAD = "<th>latency: mean here<br>provider p50 / p95</th>"


def _seconds(value: Any) -> str:
    try:
        x = float(value)
    except (TypeError, ValueError):
        return "–"
    return "–" if math.isnan(x) else f"{sig(x)} s"


def _usd(value: Any) -> str:
    """Return US dollars as HTML kept on one line, "–" when unknown (as the rest of the report
    shows it)."""
    x = float(value)
    return "–" if math.isnan(x) else f'<span class="money">{usd(x)}</span>'


def speed_cell(row: Any) -> str:
    """Return the summary's latency cell for one variant: the mean time here, then the
    provider's p50 / p95, and how many rows they rest on (of which cached, timed as bought)."""
    text = f"{_seconds(row.get('latency_s'))}"
    if "latency_p50_s" in row:
        rows = int(row.get("latency_rows") or 0)
        cached = int(row.get("latency_cached_rows") or 0)
        unknown = int(row.get("latency_unknown_rows") or 0)
        text += (
            f"<br>{_seconds(row['latency_p50_s'])} / {_seconds(row['latency_p95_s'])}"
            f"<br><span class='inp'>{rows} rows"
            + (f", {cached} cached (as bought)" if cached else "")
            + (f", {unknown} not timed" if unknown else "")
            + "</span>"
        )
        tps = row.get("tokens_per_s")
        if tps is not None and tps == tps:
            text += f"<br><span class='inp'>{sig(float(tps))} tokens/s</span>"
    return f"<td>{text}</td>"


def svg_img(svg: str, alt: str) -> str:
    """Return ``svg`` as an ``<img>`` holding a data URI: no request, no script can run."""
    data = base64.b64encode(svg.encode("utf-8")).decode("ascii")
    return (
        f'<img class="flownb-plot" src="data:image/svg+xml;base64,{data}" alt="{html.escape(alt)}">'
    )


def frontier_section(report: ReportView) -> str:
    """Return the report's frontier: its picture, its sentence and each variant's price at a
    million rows (list and batch), or '' when there is one variant or no frontier to draw."""
    if len(report.variants) < 2:
        return ""
    frontier = report.frontier()
    price = report.price(1_000_000)
    columns = ("price_per_row", "list_usd", "batch_usd", "judges_usd")
    rows = "".join(
        f"<tr><th>{html.escape(str(v))}</th>"
        + "".join(f"<td>{_usd(r[c])}</td>" for c in columns)
        + "</tr>"
        for v, r in price.iterrows()
    )
    return (
        "<h2>Quality, price and speed</h2>"
        + svg_img(frontier.svg(), "quality against price per row, one point per variant")
        + f"<p>{html.escape(frontier.sentence)}</p>"
        + "<table class='flownb-eval'><thead><tr><th>variant</th><th>price per row</th>"
        "<th>1,000,000 rows</th><th>batch API</th><th>judges</th></tr></thead>"
        f"<tbody>{rows}</tbody></table><p class='inp'>list prices; batch API: half price "
        "where the provider has one (–: none); judges apart (–: not known)</p>"
    )
