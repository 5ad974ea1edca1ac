"""HTML for an evaluation: the side-by-side comparison (one row per input, one column per
variant, differences against the first variant highlighted, images as embedded thumbnails,
scores under each output) and the self-contained page ``report.save("x.html")`` writes: a title
from the flows and the date, a header saying what was evaluated (each variant's provider,
endpoint, models, prompts and model parameters; the data set; every scorer's definition), the
summary with intervals, the plot (SVG) and the side-by-side view.

One number style throughout: three significant digits (``0.0968``, ``12.3``, ``1230``), rates as
percentages (``83.9%``), p-values as ``p=0.0123`` or ``p<0.001``. Everything that came from data
(outputs, inputs, names, prompts, reasons) is escaped.

An image output is shown as an embedded thumbnail (see :func:`thumbnail`); an output that is
only images as a grid, variants by rows (:func:`image_grid_html`). The saved page makes no
request: local images (and loopback ones, read by the kernel) and the plot are embedded as data
URIs, remote image URLs are shown as text links, and the saved page carries a
Content-Security-Policy that forbids loading anything.
"""

from __future__ import annotations

import base64
import difflib
import functools
import io
import math
import re
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from ...show.escape import NO_MATH, html_attr, html_text, no_math
from ...show.meter import usd
from ..figures.money import RANK_NOTE, bill_html, money_cells, price_row
from .decision import SPEED_HEAD, frontier_section, speed_cell

if TYPE_CHECKING:
    from ..record.shape import ReportView

__all__ = [
    "compare_html",
    "fmt_number",
    "fmt_p",
    "fmt_rate",
    "header_html",
    "image_grid_html",
    "page_html",
    "plot_svg",
    "summary_html",
]

THUMB = 160  # pixels: the longest side of an embedded thumbnail

STYLE = """
.flownb-eval {font-family: system-ui, sans-serif; font-size: 13px; border-collapse: collapse;
  width: 100%}
table.flownb-eval th, table.flownb-eval td {border: 1px solid #ccc; padding: 6px;
  vertical-align: top; text-align: left !important; overflow-wrap: anywhere}
.flownb-eval th {background: #f3f3f3}
.flownb-eval .out {white-space: pre-wrap; word-break: break-word}
.flownb-eval .money {white-space: nowrap; overflow-wrap: normal; word-break: keep-all}
.flownb-eval ins {background: #c8f7c5; text-decoration: none}
.flownb-eval del {background: #f7c5c5}
.flownb-eval .scores {margin-top: 4px; color: #444; font-size: 12px}
.flownb-eval .pass {color: #137333} .flownb-eval .fail {color: #b3261e}
.flownb-eval .flip {color: #a15c00}
.flownb-eval .err {color: #b3261e; font-style: italic}
.flownb-eval .inp {color: #555; font-size: 12px}
.flownb-eval img {max-width: 160px; max-height: 160px; display: block}
.flownb-eval .prompt {white-space: pre-wrap; font-family: ui-monospace, monospace;
  font-size: 12px}
"""

PAGE_STYLE = """
body {font-family: system-ui, sans-serif; margin: 16px 24px; max-width: none}
.flownb-head dt {font-weight: bold; margin-top: 6px}
.flownb-head dd {margin-left: 16px}
.flownb-plot {width: 100%; max-width: 100%}
"""

# Words, single punctuation marks and runs of whitespace: a diff keeps every space.
_TOKENS = re.compile(r"\s+|\w+|[^\w\s]")


def _esc(value: Any) -> str:
    """Element content, shown as written (escaped, ``$`` never a math delimiter)."""
    return html_text(str(value))


def _attr(value: Any) -> str:
    """A quoted attribute's value (a title, a src, a data- attribute)."""
    return html_attr(str(value))


def _changes(a: list[str], b: list[str]) -> list[tuple[bool, str, str]]:
    """Return the diff of token lists as ``(changed, old, new)`` runs. Whitespace alone
    between two changes joins them (``<del>two words</del> <ins>three new words</ins>`` rather
    than words interleaved with their replacements)."""
    runs: list[tuple[bool, str, str]] = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        old, new = "".join(a[i1:i2]), "".join(b[j1:j2])
        if op == "equal":
            runs.append((False, old, new))
        elif runs and runs[-1][0]:
            _, o, n = runs.pop()
            runs.append((True, o + old, n + new))
        elif len(runs) >= 2 and runs[-2][0] and not runs[-1][1].strip():
            _, space, _ = runs.pop()
            _, o, n = runs.pop()
            runs.append((True, o + space + old, n + space + new))
        else:
            runs.append((True, old, new))
    return runs


def _diff(base: str, text: str) -> str:
    """Return ``text`` as HTML with what differs from ``base`` marked (word level): removed
    words in ``<del>``, added ones in ``<ins>``, every space of both texts kept, and a space
    between a removal and its replacement so their words do not run together."""
    out: list[str] = []
    for changed, gone, added in _changes(_TOKENS.findall(base), _TOKENS.findall(text)):
        if not changed:
            out.append(_esc(added))
            continue
        if gone:
            out.append(f"<del>{_esc(gone)}</del>")
            if added and not gone[-1].isspace() and not added[0].isspace():
                out.append(" ")
        if added:
            out.append(f"<ins>{_esc(added)}</ins>")
    return "".join(out)


def thumbnail(url: str, size: int = THUMB) -> str | None:
    """Return a small data URI of an image the kernel can read (a ``file://`` URL, a data URI,
    or an http URL on this machine's loopback interface, e.g. a local flownb server's media),
    its longest side at most ``size`` pixels: PNG or JPEG, whichever is smaller (a photo's
    JPEG thumbnail is a few kB), so a report of many images stays one file of sane size. None
    when it is not a readable image."""
    if not url.startswith(("data:image/", "file://", "http://")):
        return None
    return _thumbnail(url, size)


@functools.lru_cache(maxsize=2048)
def _thumbnail(url: str, size: int) -> str | None:
    from ...show.display import image_bytes

    found = image_bytes(url)
    if found is None:
        return None
    try:
        from PIL import Image

        with Image.open(io.BytesIO(found[0])) as img:
            img.thumbnail((size, size))
            rgb = img.convert("RGB")
            png, jpeg = io.BytesIO(), io.BytesIO()
            rgb.save(png, format="PNG", optimize=True)
            rgb.save(jpeg, format="JPEG", quality=80)
    except (OSError, ValueError, Image.DecompressionBombError):
        return None
    mime, data = min(("png", png.getvalue()), ("jpeg", jpeg.getvalue()), key=lambda m: len(m[1]))
    return f"data:image/{mime};base64," + base64.b64encode(data).decode("ascii")


def _image(url: str) -> str:
    src = thumbnail(url)
    if src is not None:
        return f'<img src="{_attr(src)}" alt="image output">'
    # A remote URL is not fetched (a saved page must stay offline): a link, shown as text; only
    # http(s) URLs are links (a "javascript:" output must not become one).
    if urlparse(url).scheme.lower() in ("http", "https"):
        return f'<a href="{_attr(url)}" rel="noreferrer">{_esc(url)}</a>'
    return _esc(url)


def _score_line(report: ReportView, row: Any) -> str:
    parts = []
    for s in report.scorers:
        value = row[s.name]
        reason = row.get(f"{s.name}_reason")
        title = f' title="{_attr(reason)}"' if isinstance(reason, str) and reason else ""
        if value is None or value is _na() or (isinstance(value, float) and math.isnan(value)):
            parts.append(f"<span{title}>{_esc(s.name)} –</span>")
        elif s.kind == "bool" and 0 < float(value) < 1:  # repeats that disagreed: the share
            parts.append(f'<span class="flip"{title}>{fmt_rate(value)} {_esc(s.name)}</span>')
        elif s.kind == "bool":
            mark, cls = ("✓", "pass") if bool(value) else ("✗", "fail")
            parts.append(f'<span class="{cls}"{title}>{mark} {_esc(s.name)}</span>')
        else:
            cls = ""
            if s.threshold is not None:
                cls = ' class="pass"' if float(value) >= s.threshold else ' class="fail"'
            parts.append(f"<span{cls}{title}>{_esc(s.name)} {fmt_number(value)}</span>")
    return " · ".join(parts)


def _na() -> Any:
    import pandas as pd

    return pd.NA


def _cell(report: ReportView, row: Any, outputs: Sequence[str], base: Any) -> str:
    error = row["error"]
    pieces = []
    if isinstance(error, str):
        pieces.append(f'<div class="err">{_esc(error)}</div>')
    for out in outputs:
        value = row[out]
        if value is None or (isinstance(value, float) and math.isnan(value)):
            continue
        text = str(value)
        label = f"<b>{_esc(out)}</b><br>" if len(outputs) > 1 else ""
        if report.kinds.get(out) == "image":  # only an image node's output: a text is text
            body = _image(text)
        elif base is not None and isinstance(base[out], str):
            body = _diff(base[out], text)
        else:
            body = _esc(text)
        pieces.append(f'<div class="out">{label}{body}</div>')
    if report.scorers:
        pieces.append(f'<div class="scores">{_score_line(report, row)}</div>')
    return "".join(pieces)


def image_grid_html(report: ReportView, output: str, limit: int | None = 100) -> str:
    """Return the grid of an image output: one row per input row (up to ``limit``), one column
    per variant, each cell the image's embedded thumbnail (``data-variant`` and ``data-row``
    say whose) with its scores under it."""
    results = report.results
    by_variant = {v: results[results["variant"] == v] for v in report.variants}
    n = len(next(iter(by_variant.values()))) if by_variant else 0
    shown = n if limit is None else min(n, limit)
    frames = {v: f.iloc[:shown].to_dict("records") for v, f in by_variant.items()}
    first = report.variants[0]
    head = "".join(f"<th>{_esc(v)}</th>" for v in report.variants)
    rows = []
    for i in range(shown):
        base = frames[first][i]
        row = base[report.index_name]
        inputs = "<br>".join(f"{_esc(c)}: {_esc(_short(base[c]))}" for c in report.inputs)
        cells = []
        for v in report.variants:
            record = frames[v][i]
            value = record[output]
            if isinstance(record["error"], str):
                body = f'<div class="err">{_esc(record["error"])}</div>'
            elif value is None or (isinstance(value, float) and math.isnan(value)):
                body = "–"
            else:
                body = _image(str(value))
            if report.scorers:
                body += f'<div class="scores">{_score_line(report, record)}</div>'
            cells.append(f'<td data-variant="{_attr(v)}" data-row="{_attr(row)}">{body}</td>')
        rows.append(f'<tr><th>{_esc(row)}<div class="inp">{inputs}</div></th>{"".join(cells)}</tr>')
    note = ""
    if shown < n:
        note = f"<p>showing {shown} of {n} input rows (compare(limit=None) shows all)</p>"
    return (
        f"{note}<table class='flownb-eval flownb-grid' data-output='{_attr(output)}'><thead>"
        f"<tr><th>{_esc(output)}</th>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def compare_html(
    report: ReportView, output: str | Sequence[str] | None = None, limit: int | None = 100
) -> str:
    """Return the comparison table: one row per input row (up to ``limit``), one column per
    variant, ``output`` (one name, several, or every output by default) in each cell. When
    every output shown is an image, each is shown as its grid (:func:`image_grid_html`)."""
    results = report.results
    outputs = [output] if isinstance(output, str) else list(output or report.outputs)
    if outputs and all(report.kinds.get(o) == "image" for o in outputs):
        grids = "".join(image_grid_html(report, o, limit) for o in outputs)
        return no_math(f"<style>{STYLE}</style>{grids}")
    by_variant = {v: results[results["variant"] == v] for v in report.variants}
    n = len(next(iter(by_variant.values()))) if by_variant else 0
    shown = n if limit is None else min(n, limit)
    head = "".join(f"<th>{_esc(v)}</th>" for v in report.variants)
    rows = []
    frames = {v: f.iloc[:shown].to_dict("records") for v, f in by_variant.items()}
    first = report.variants[0]
    for i in range(shown):
        base = frames[first][i]
        label = _esc(base[report.index_name])
        inputs = "<br>".join(
            f"{_esc(c)}: {_esc(_short(base[c]))}" for c in report.inputs if c not in outputs
        )
        cells = "".join(
            f"<td>{_cell(report, frames[v][i], outputs, None if v == first else base)}</td>"
            for v in report.variants
        )
        rows.append(f'<tr><th>{label}<div class="inp">{inputs}</div></th>{cells}</tr>')
    note = ""
    if shown < n:
        note = f"<p>showing {shown} of {n} input rows (compare(limit=None) shows all)</p>"
    return no_math(
        f"<style>{STYLE}</style>{note}<table class='flownb-eval'><thead><tr><th>input</th>"
        f"{head}</tr>{price_row(report)}</thead><tbody>{''.join(rows)}</tbody></table>"
    )


def _short(value: Any, width: int = 120) -> str:
    text = str(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def summary_html(report: ReportView) -> str:
    """Return the summary as a compact table: per metric ``mean [low, high]`` (rates as
    percentages), and against the first variant the paired test's p-value (bold when the
    difference is beyond chance)."""
    summary = report.summary
    metrics = ["pass_rate"] + [s.name for s in report.scorers]
    rates = {"pass_rate"} | {s.name for s in report.scorers if s.kind == "bool" or s.rate}
    head = "".join(f"<th>{_esc(m)}</th>" for m in metrics)
    money = "price_per_row" in summary.columns  # reports kept before prices were have none
    judged = "judge_price_per_row" in summary.columns
    money_head = ""
    if money:
        money_head = "<th>price per row (rank)</th><th>spent / saved</th>"
        if judged:
            money_head += "<th>judges: price per row</th><th>judges: spent / saved</th>"
    rows = []
    for variant, row in summary.iterrows():
        cells = [f"<td>{int(row['n'])}</td><td>{int(row['errors'])}</td>"]
        for m in metrics:
            fmt = fmt_rate if m in rates else fmt_number
            text = f"{fmt(row[m])} [{fmt(row[f'{m}_low'])}, {fmt(row[f'{m}_high'])}]"
            if f"{m}_std" in row:  # repeats: how far one repeat's figure strayed
                text += (
                    f"<br><span class='inp'>± {fmt(row[f'{m}_std'])} (repeats "
                    f"{fmt(row[f'{m}_min'])} to {fmt(row[f'{m}_max'])})</span>"
                )
            p = row.get(f"{m}_p")
            if p is not None and p == p:
                note = fmt_p(p)
                text += "<br>" + (f"<b>{note} differs</b>" if row[f"{m}_differs"] else note)
            cells.append(f"<td>{text}</td>")
        tokens = row["total_tokens"]
        tokens_text = "–" if tokens != tokens else f"{int(tokens):,}"
        cells.append(f"{speed_cell(row)}<td>{tokens_text}</td>")
        if money:
            cells.append(money_cells(row))
        rows.append(f"<tr><th>{_esc(variant)}</th>{''.join(cells)}</tr>")
    return (
        _labels_note(summary)
        + _repeats_note(summary)
        + _wins_note(report)
        + judges_html(report)
        + (
            f"<table class='flownb-eval'><thead><tr><th>variant</th><th>n</th><th>errors</th>{head}"
            f"{SPEED_HEAD}<th>total_tokens</th>{money_head}</tr></thead>"
            f"<tbody>{''.join(rows)}</tbody>"
            "</table><p class='inp'>mean (pass rate for pass/fail, win rate for pick_best) [95% "
            "interval: Wilson for rates, Student t for means]; p: paired test against the first "
            "variant over the same rows (McNemar exact for rates, Wilcoxon signed-rank for scores)"
            f"{'; ' + _esc(RANK_NOTE) if money else ''}</p>"
            + bill_html(report, judged)
            + _setup_html(report)
        )
    )


def _setup_html(report: ReportView) -> str:
    """Return a table of what each variant ran on (endpoint, model, system message), or ''."""
    if not report.setup:
        return ""
    rows = []
    for variant in report.variants:
        known = report.setup.get(variant, {})
        cells = "".join(f"<td>{_esc(known.get(f) or '–')}</td>" for f in ("endpoint", "model"))
        cells += f"<td>{_esc(known.get('system') or '–')}</td>"
        rows.append(f"<tr><th>{_esc(variant)}</th>{cells}</tr>")
    return (
        "<table class='flownb-eval'><thead><tr><th>variant</th><th>endpoint</th><th>model</th>"
        f"<th>system</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def judges_html(report: ReportView) -> str:
    """Return a line per judge naming its endpoint and model, and the variants of its vendor
    (self-preference is possible there: said, not forbidden); '' without judges."""
    lines = []
    for s in report.scorers:
        judge = s.judge
        if not judge:
            continue
        line = (
            f"judge <b>{_esc(s.name)}</b>: endpoint <b class='flownb-judge-endpoint'>"
            f"{_esc(judge['endpoint'])}</b>, model <b class='flownb-judge-model'>"
            f"{_esc(judge['model'])}</b> ({_esc(judge['vendor'])})"
        )
        same = list(judge.get("same_vendor") or ())
        if same:
            line += (
                f"; <span class='flownb-self-preference'>the same vendor as variant"
                f"{'s' * (len(same) > 1)} {_esc(', '.join(same))}: a judge may favour its own "
                "vendor's answers (self-preference)</span>"
            )
        lines.append(f"<p class='inp flownb-judge'>{line}</p>")
    return "".join(lines)


def _wins_note(report: Any) -> str:
    """Return a line with the people's pairwise win rates (``report.prefer``), or nothing
    before there are any."""
    rates = report.win_rates() if hasattr(report, "win_rates") else None
    if rates is None or rates.empty:
        return ""
    parts = ", ".join(
        f"{_esc(v)} {fmt_rate(r['win_rate'])} [{fmt_rate(r['win_rate_low'])}, "
        f"{fmt_rate(r['win_rate_high'])}] of {int(r['n'])}"
        for v, r in rates.iterrows()
    )
    return f"<p class='inp'>people's pairwise win rates (ties count half): {parts}</p>"


def _repeats_note(summary: Any) -> str:
    """Return a line saying how many times each row ran and how many rows flip, or nothing
    without repeats."""
    if "repeats" not in summary.columns:
        return ""
    flips = ", ".join(
        f"{_esc(v)}: {int(k)} of {int(n)}"
        for v, k, n in zip(summary.index, summary["flips"], summary["n"], strict=True)
    )
    return (
        f"<p class='inp'>each row ran {int(summary['repeats'].iloc[0])} times: figures are "
        "means over the rows of each row's mean, ± the spread of the figure between repeats; "
        f"rows whose pass/fail flips between repeats: {flips}</p>"
    )


def _labels_note(summary: Any) -> str:
    """Return a line saying how many rows carry human labels per variant (what the human
    figures and any agreement rest on), or nothing before there are labels."""
    if "labels" not in summary.columns:
        return ""
    parts = ", ".join(
        f"{_esc(v)}: {int(k)} of {int(n)}"
        for v, k, n in zip(summary.index, summary["labels"], summary["n"], strict=True)
    )
    return f"<p class='inp'>human labels (rows labelled per variant): {parts}</p>"


def _missing(value: Any) -> bool:
    if value is None or value is _na():
        return True
    try:
        return math.isnan(float(value))
    except (TypeError, ValueError):
        return False


def _money(value: Any) -> str:
    """Return US dollars for the report (``–`` when unknown: never a 0 that reads as free)."""
    if _missing(value):
        return "–"
    return usd(float(value))


def fmt_number(value: Any) -> str:
    """Return ``value`` with three significant digits, never in exponent notation
    (``0.0968``, ``12.3``, ``1230``); "–" when missing."""
    if _missing(value):
        return "–"
    x = float(value)
    if x == 0 or not math.isfinite(x):
        return "0" if x == 0 else str(x)
    digits = 2 - math.floor(math.log10(abs(x)))
    x = round(x, digits)
    if x == 0:
        return "0"
    digits = max(0, 2 - math.floor(math.log10(abs(x))))  # 9.996 rounds to 10.0: one digit less
    return f"{x:.{digits}f}"


def fmt_rate(value: Any) -> str:
    """Return a rate in 0..1 as a percentage with three significant digits (``83.9%``,
    ``100%``); "–" when missing."""
    if _missing(value):
        return "–"
    pct = float(value) * 100
    if pct == 100 or pct == 0:
        return f"{pct:.0f}%"
    return f"{fmt_number(pct)}%"


def fmt_p(p: float) -> str:
    """Return a p-value as ``p=0.0123`` (three significant digits) or ``p<0.001``."""
    if p < 0.001:
        return "p<0.001"
    return f"p={fmt_number(p)}"


def _num(value: Any) -> str:
    return fmt_number(value)


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
    items = [f"<dt>date</dt><dd>{_esc(_when(report))} (evaluation {_esc(report.id)})</dd>"]
    data = ctx.get("dataset")
    if data:
        columns = ", ".join(map(str, data.get("columns", [])))
        items.append(
            f"<dt>data set</dt><dd>{_esc(data.get('name'))}: {int(data.get('rows', 0))} rows"
            f" (columns: {_esc(columns)})</dd>"
        )
    rows = []
    for v in ctx.get("variants", []):
        where = _esc(v.get("provider", ""))
        if v.get("endpoint"):
            where += f" at {_esc(v['endpoint'])}"
        nodes = []
        for node in v.get("nodes", []):
            params = dict(node.get("params") or {})
            models = node.get("models") or []
            model = ", ".join(models) or params.get("model") or "the provider's default"
            nodes.append(
                f"<div><b>{_esc(node.get('name'))}</b> ({_esc(node.get('kind'))}, model "
                f"{_esc(model)}; params {_esc(_params(params))})"
                f"<div class='prompt'>{_esc(node.get('prompt'))}</div></div>"
            )
        body = "".join(nodes) or "(prompts rendered by the service)"
        rows.append(
            f"<tr><th>{_esc(v.get('name'))}</th><td>{_esc(v.get('flow'))}</td>"
            f"<td>{where}</td><td>{body}</td></tr>"
        )
    if rows:
        items.append(
            "<dt>variants</dt><dd><table class='flownb-eval'><thead><tr><th>variant</th>"
            "<th>flow</th><th>provider</th><th>nodes: model, parameters, prompt</th></tr>"
            f"</thead><tbody>{''.join(rows)}</tbody></table></dd>"
        )
    scorers = [
        f"<li><b>{_esc(s.name)}</b>: <code>{_esc(s.definition or s.kind)}</code>"
        + (f" (passes at ≥ {_esc(fmt_number(s.threshold))})" if s.threshold is not None else "")
        + (f"; judged by {_esc(s.judge['endpoint'])} · {_esc(s.judge['model'])}" if s.judge else "")
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
    data = base64.b64encode(buf.getvalue()).decode("ascii")
    return (
        f'<img class="flownb-plot" src="data:image/svg+xml;base64,{data}" '
        'alt="each scorer per variant with its 95% interval">'
    )


def page_html(report: ReportView, limit: int | None = 1000) -> str:
    """Return a self-contained HTML page: the title (flows and date), what was evaluated, the
    summary, the plot and the comparison. Its Content-Security-Policy forbids every request
    (images and the plot are embedded)."""
    heading = _esc(report_title(report))
    title = _attr(report_title(report))  # a <title> shows markup as text
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
