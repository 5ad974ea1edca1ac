"""The report as a whole: its title, the header saying what was evaluated (each variant's
provider, endpoint, models, prompts and model parameters; the data set; every scorer's
definition), the self-contained page ``report.save("x.html")`` writes (title, header, summary,
plot, frontier, side by side) and the report shown in a notebook (title and summary).

The saved page makes no request: images and the plot are embedded as data URIs, remote image
URLs are shown as text links, and it carries a Content-Security-Policy that forbids loading
anything. Text is written by the rules of :mod:`.format`.
"""

from __future__ import annotations

import io
import time
from typing import TYPE_CHECKING, Any

from ...show.escape import NO_MATH, no_math
from .compare import compare_html
from .decision import frontier_section
from .format import PAGE_STYLE, STYLE, attr, esc, fmt_number, svg_img
from .summary import summary_html

if TYPE_CHECKING:
    from ..record.shape import ReportView

__all__ = ["header_html", "page_html", "plot_svg", "report_html", "report_title"]


def _when(report: ReportView) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(report.created))


def report_title(report: ReportView) -> str:
    """Return the report's title: the flows and variants compared, and the date."""
    what = report.context.get("title") or ", ".join(report.variants)
    return f"{what} — {_when(report)}"


def _params(params: Any) -> str:
    if not params:
        return "(none)"
    return ", ".join(f"{k}={v!r}" for k, v in dict(params).items())


def header_html(report: ReportView) -> str:
    """Return what was evaluated: when, on which data set, each variant (flow, provider,
    endpoint, models, and per node its prompt and model parameters) and each scorer's
    definition."""
    ctx = report.context
    items = [f"<dt>date</dt><dd>{esc(_when(report))} (evaluation {esc(report.id)})</dd>"]
    data = ctx.get("dataset")
    if data:
        columns = ", ".join(map(str, data.get("columns", [])))
        items.append(
            f"<dt>data set</dt><dd>{esc(data.get('name'))}: {int(data.get('rows', 0))} rows"
            f" (columns: {esc(columns)})</dd>"
        )
    rows = []
    for v in ctx.get("variants", []):
        where = esc(v.get("provider", ""))
        if v.get("endpoint"):
            where += f" at {esc(v['endpoint'])}"
        nodes = []
        for node in v.get("nodes", []):
            params = dict(node.get("params") or {})
            models = node.get("models") or []
            model = ", ".join(models) or params.get("model") or "the provider's default"
            nodes.append(
                f"<div><b>{esc(node.get('name'))}</b> ({esc(node.get('kind'))}, model "
                f"{esc(model)}; params {esc(_params(params))})"
                f"<div class='prompt'>{esc(node.get('prompt'))}</div></div>"
            )
        body = "".join(nodes) or "(prompts rendered by the service)"
        rows.append(
            f"<tr><th>{esc(v.get('name'))}</th><td>{esc(v.get('flow'))}</td>"
            f"<td>{where}</td><td>{body}</td></tr>"
        )
    if rows:
        items.append(
            "<dt>variants</dt><dd><table class='flownb-eval'><thead><tr><th>variant</th>"
            "<th>flow</th><th>provider</th><th>nodes: model, parameters, prompt</th></tr>"
            f"</thead><tbody>{''.join(rows)}</tbody></table></dd>"
        )
    scorers = [
        f"<li><b>{esc(s.name)}</b>: <code>{esc(s.definition or s.kind)}</code>"
        + (f" (passes at ≥ {esc(fmt_number(s.threshold))})" if s.threshold is not None else "")
        + (f"; judged by {esc(s.judge['endpoint'])} · {esc(s.judge['model'])}" if s.judge else "")
        + "</li>"
        for s in report.scorers
    ]
    if scorers:
        items.append(f"<dt>scorers</dt><dd><ul>{''.join(scorers)}</ul></dd>")
    return f"<dl class='flownb-head'>{''.join(items)}</dl>"


def plot_svg(report: ReportView) -> str:
    """Return the report's plot as an ``<img>`` holding an SVG data URI (no request, and no
    script can run from it)."""
    fig = report.plot()
    buf = io.BytesIO()
    fig.savefig(buf, format="svg", metadata={"Date": None})
    return svg_img(buf.getvalue(), "each scorer per variant with its 95% interval")


def page_html(report: ReportView, limit: int | None = 1000) -> str:
    """Return a self-contained HTML page: the title (flows and date), what was evaluated, the
    summary, the plot and the comparison. Its Content-Security-Policy forbids every request
    (images and the plot are embedded)."""
    heading = esc(report_title(report))
    title = attr(report_title(report))  # a <title> shows markup as text
    return (
        "<!DOCTYPE html>\n<html><head><meta charset='utf-8'>"
        "<meta http-equiv='Content-Security-Policy' content=\"default-src 'none'; "
        "img-src data:; style-src 'unsafe-inline'\">"
        f"<title>{title}</title><style>{STYLE}{PAGE_STYLE}</style></head>"
        f"<body class='{NO_MATH}'>"
        f"<h1>{heading}</h1>{header_html(report)}<h2>Summary</h2>{summary_html(report)}"
        f"{plot_svg(report)}{frontier_section(report)}"
        f"<h2>Side by side</h2>{compare_html(report, limit=limit)}</body></html>\n"
    )


def report_html(report: ReportView) -> str:
    """Return the report as a notebook shows it: its title, how many variants and runs, and
    its summary."""
    # In an element the front end's math typesetter skips: "$0.01 spent, $0.02" is money.
    return no_math(
        f"<style>{STYLE}</style><b>{esc(report_title(report))}</b>: "
        f"{len(report.variants)} variant(s), {len(report.results)} runs (evaluation "
        f"{esc(report.id)}){summary_html(report)}"
    )
