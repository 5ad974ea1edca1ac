"""HTML for an evaluation: the side-by-side comparison (one row per input, one column per
variant, differences against the first variant highlighted, images as embedded thumbnails,
scores under each output) and the self-contained page ``report.save("x.html")`` writes.

Nothing here makes or causes a network request: local images are embedded as data URIs, remote
image URLs are shown as text links, and the saved page carries a Content-Security-Policy that
forbids loading anything.
"""

from __future__ import annotations

import base64
import difflib
import html
import io
import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

if TYPE_CHECKING:
    from .shape import ReportView

__all__ = ["compare_html", "page_html", "summary_html"]

THUMB = 160  # pixels: the longest side of an embedded thumbnail

STYLE = """
.flownb-eval {font-family: system-ui, sans-serif; font-size: 13px; border-collapse: collapse}
.flownb-eval th, .flownb-eval td {border: 1px solid #ccc; padding: 6px; vertical-align: top;
  text-align: left; max-width: 420px}
.flownb-eval th {background: #f3f3f3}
.flownb-eval .out {white-space: pre-wrap; word-break: break-word}
.flownb-eval ins {background: #c8f7c5; text-decoration: none}
.flownb-eval del {background: #f7c5c5}
.flownb-eval .scores {margin-top: 4px; color: #444; font-size: 12px}
.flownb-eval .pass {color: #137333} .flownb-eval .fail {color: #b3261e}
.flownb-eval .err {color: #b3261e; font-style: italic}
.flownb-eval .inp {color: #555; font-size: 12px}
.flownb-eval img {max-width: 160px; max-height: 160px; display: block}
"""

_TOKENS = re.compile(r"\s+|\w+|[^\w\s]")


def _esc(value: Any) -> str:
    return html.escape(str(value))


def _diff(base: str, text: str) -> str:
    """Return ``text`` as HTML with what differs from ``base`` marked (word level)."""
    a, b = _TOKENS.findall(base), _TOKENS.findall(text)
    out: list[str] = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if op == "equal":
            out.append(_esc("".join(b[j1:j2])))
            continue
        if i2 > i1:
            out.append(f"<del>{_esc(''.join(a[i1:i2]))}</del>")
        if j2 > j1:
            out.append(f"<ins>{_esc(''.join(b[j1:j2]))}</ins>")
    return "".join(out)


def thumbnail(url: str) -> str | None:
    """Return a small PNG data URI for a local image (``file://`` URL or data URI), or None
    when it is not a readable local image."""
    if url.startswith("data:image/"):
        return url
    if not url.startswith("file://"):
        return None
    try:
        from PIL import Image

        with Image.open(Path(unquote(urlparse(url).path))) as img:
            img.thumbnail((THUMB, THUMB))
            buf = io.BytesIO()
            img.convert("RGB").save(buf, format="PNG")
    except (OSError, ValueError):
        return None
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _image(url: str) -> str:
    src = thumbnail(url)
    if src is not None:
        return f'<img src="{src}" alt="image output">'
    # A remote URL is not fetched (a saved page must stay offline): a link, shown as text.
    return f'<a href="{_esc(url)}" rel="noreferrer">{_esc(url)}</a>'


def _score_line(report: ReportView, row: Any) -> str:
    parts = []
    for s in report.scorers:
        value = row[s.name]
        reason = row.get(f"{s.name}_reason")
        title = f' title="{_esc(reason)}"' if isinstance(reason, str) and reason else ""
        if value is None or value is _na() or (isinstance(value, float) and math.isnan(value)):
            parts.append(f"<span{title}>{_esc(s.name)} –</span>")
        elif s.kind == "bool":
            mark, cls = ("✓", "pass") if bool(value) else ("✗", "fail")
            parts.append(f'<span class="{cls}"{title}>{mark} {_esc(s.name)}</span>')
        else:
            cls = ""
            if s.threshold is not None:
                cls = ' class="pass"' if float(value) >= s.threshold else ' class="fail"'
            parts.append(f"<span{cls}{title}>{_esc(s.name)} {float(value):.3g}</span>")
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
        if report.kinds.get(out) == "image" or text.startswith(("data:image/", "file://")):
            body = _image(text)
        elif base is not None and isinstance(base[out], str):
            body = _diff(base[out], text)
        else:
            body = _esc(text)
        pieces.append(f'<div class="out">{label}{body}</div>')
    if report.scorers:
        pieces.append(f'<div class="scores">{_score_line(report, row)}</div>')
    return "".join(pieces)


def compare_html(
    report: ReportView, output: str | Sequence[str] | None = None, limit: int | None = 100
) -> str:
    """Return the comparison table: one row per input row (up to ``limit``), one column per
    variant, ``output`` (one name, several, or every output by default) in each cell."""
    results = report.results
    outputs = [output] if isinstance(output, str) else list(output or report.outputs)
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
    return (
        f"<style>{STYLE}</style>{note}<table class='flownb-eval'><thead><tr><th>input</th>"
        f"{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def _short(value: Any, width: int = 120) -> str:
    text = str(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def summary_html(report: ReportView) -> str:
    """Return the summary as a compact table: per metric ``mean [low, high]``, and against the
    first variant the paired test's p-value (bold when the difference is beyond chance)."""
    summary = report.summary
    metrics = ["pass_rate"] + [s.name for s in report.scorers]
    head = "".join(f"<th>{_esc(m)}</th>" for m in metrics)
    rows = []
    for variant, row in summary.iterrows():
        cells = [f"<td>{int(row['n'])}</td><td>{int(row['errors'])}</td>"]
        for m in metrics:
            text = f"{_num(row[m])} [{_num(row[f'{m}_low'])}, {_num(row[f'{m}_high'])}]"
            p = row.get(f"{m}_p")
            if p is not None and p == p:
                note = f"p={p:.2g}"
                text += "<br>" + (f"<b>{note} differs</b>" if row[f"{m}_differs"] else note)
            cells.append(f"<td>{text}</td>")
        latency = row["latency_s"]
        cells.append(f"<td>{_num(latency)}</td><td>{_num(row['total_tokens'])}</td>")
        rows.append(f"<tr><th>{_esc(variant)}</th>{''.join(cells)}</tr>")
    return _labels_note(summary) + (
        f"<table class='flownb-eval'><thead><tr><th>variant</th><th>n</th><th>errors</th>{head}"
        f"<th>latency_s</th><th>total_tokens</th></tr></thead><tbody>{''.join(rows)}</tbody>"
        "</table><p class='inp'>mean (pass rate for pass/fail) [95% interval]; p: paired test "
        "against the first variant over the same rows</p>"
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


def _num(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{float(value):.3g}"


def page_html(report: ReportView, limit: int | None = 1000) -> str:
    """Return a self-contained HTML page: the summary, then the comparison. Its
    Content-Security-Policy forbids every request (images are embedded)."""
    summary = summary_html(report)
    return (
        "<!DOCTYPE html>\n<html><head><meta charset='utf-8'>"
        "<meta http-equiv='Content-Security-Policy' content=\"default-src 'none'; "
        "img-src data:; style-src 'unsafe-inline'\">"
        f"<title>flownb evaluation {_esc(report.id)}</title><style>{STYLE}"
        "body {font-family: system-ui, sans-serif}</style></head><body>"
        f"<h1>Evaluation {_esc(report.id)}</h1><h2>Summary</h2>{summary}"
        f"<h2>Side by side</h2>{compare_html(report, limit=limit)}</body></html>\n"
    )
