"""The side-by-side comparison (``report.compare()``, and the last part of the saved page): one
row per input, one column per variant, what differs from the first variant marked word by word,
the scores under each output, each variant's price per row in the head.

An image output is shown as an embedded thumbnail (see :func:`thumbnail`); an output that is
only images as a grid, variants by rows (:func:`image_grid_html`). Nothing is requested: local
images (and loopback ones, read by the kernel) are embedded as data URIs, remote image URLs are
shown as text links. Text is written by the rules of :mod:`.format`.
"""

from __future__ import annotations

import base64
import difflib
import functools
import io
import math
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from ...show.escape import no_math
from .format import STYLE, attr, esc, fmt_number, fmt_rate, missing, money

if TYPE_CHECKING:
    from ..record.shape import ReportView

__all__ = ["THUMB", "compare_html", "image_grid_html", "price_row", "thumbnail"]

THUMB = 160  # pixels: the longest side of an embedded thumbnail

# Words, single punctuation marks and runs of whitespace: a diff keeps every space.
_TOKENS = re.compile(r"\s+|\w+|[^\w\s]")


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
            out.append(esc(added))
            continue
        if gone:
            out.append(f"<del>{esc(gone)}</del>")
            if added and not gone[-1].isspace() and not added[0].isspace():
                out.append(" ")
        if added:
            out.append(f"<ins>{esc(added)}</ins>")
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
        return f'<img src="{attr(src)}" alt="image output">'
    # A remote URL is not fetched (a saved page must stay offline): a link, shown as text; only
    # http(s) URLs are links (a "javascript:" output must not become one).
    if urlparse(url).scheme.lower() in ("http", "https"):
        return f'<a href="{attr(url)}" rel="noreferrer">{esc(url)}</a>'
    return esc(url)


def _score_line(report: ReportView, row: Any) -> str:
    parts = []
    for s in report.scorers:
        value = row[s.name]
        reason = row.get(f"{s.name}_reason")
        title = f' title="{attr(reason)}"' if isinstance(reason, str) and reason else ""
        if missing(value):
            parts.append(f"<span{title}>{esc(s.name)} –</span>")
        elif s.kind == "bool" and 0 < float(value) < 1:  # repeats that disagreed: the share
            parts.append(f'<span class="flip"{title}>{fmt_rate(value)} {esc(s.name)}</span>')
        elif s.kind == "bool":
            mark, cls = ("✓", "pass") if bool(value) else ("✗", "fail")
            parts.append(f'<span class="{cls}"{title}>{mark} {esc(s.name)}</span>')
        else:
            cls = ""
            if s.threshold is not None:
                cls = ' class="pass"' if float(value) >= s.threshold else ' class="fail"'
            parts.append(f"<span{cls}{title}>{esc(s.name)} {fmt_number(value)}</span>")
    return " · ".join(parts)


def _cell(report: ReportView, row: Any, outputs: Sequence[str], base: Any) -> str:
    error = row["error"]
    pieces = []
    if isinstance(error, str):
        pieces.append(f'<div class="err">{esc(error)}</div>')
    for out in outputs:
        value = row[out]
        if value is None or (isinstance(value, float) and math.isnan(value)):
            continue
        text = str(value)
        label = f"<b>{esc(out)}</b><br>" if len(outputs) > 1 else ""
        if report.kinds.get(out) == "image":  # only an image node's output: a text is text
            body = _image(text)
        elif base is not None and isinstance(base[out], str):
            body = _diff(base[out], text)
        else:
            body = esc(text)
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
    head = "".join(f"<th>{esc(v)}</th>" for v in report.variants)
    rows = []
    for i in range(shown):
        base = frames[first][i]
        row = base[report.index_name]
        inputs = "<br>".join(f"{esc(c)}: {esc(_short(base[c]))}" for c in report.inputs)
        cells = []
        for v in report.variants:
            record = frames[v][i]
            value = record[output]
            if isinstance(record["error"], str):
                body = f'<div class="err">{esc(record["error"])}</div>'
            elif value is None or (isinstance(value, float) and math.isnan(value)):
                body = "–"
            else:
                body = _image(str(value))
            if report.scorers:
                body += f'<div class="scores">{_score_line(report, record)}</div>'
            cells.append(f'<td data-variant="{attr(v)}" data-row="{attr(row)}">{body}</td>')
        rows.append(f'<tr><th>{esc(row)}<div class="inp">{inputs}</div></th>{"".join(cells)}</tr>')
    note = ""
    if shown < n:
        note = f"<p>showing {shown} of {n} input rows (compare(limit=None) shows all)</p>"
    return (
        f"{note}<table class='flownb-eval flownb-grid' data-output='{attr(output)}'><thead>"
        f"<tr><th>{esc(output)}</th>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
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
    head = "".join(f"<th>{esc(v)}</th>" for v in report.variants)
    rows = []
    frames = {v: f.iloc[:shown].to_dict("records") for v, f in by_variant.items()}
    first = report.variants[0]
    for i in range(shown):
        base = frames[first][i]
        label = esc(base[report.index_name])
        inputs = "<br>".join(
            f"{esc(c)}: {esc(_short(base[c]))}" for c in report.inputs if c not in outputs
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


def price_row(report: ReportView) -> str:
    """Return the comparison's header row of each variant's price per row and its rank (1:
    the cheapest), saying what it is; '' for a report kept before prices were."""
    summary = report.summary
    if "price_per_row" not in summary.columns:
        return ""
    cells = []
    for v in report.variants:
        row = summary.loc[v]
        rank = row.get("price_rank")
        ranked = "" if missing(rank) else f" (rank {int(rank)})"
        price = money(row["price_per_row"], row.get("unpriced_calls", 0))
        cells.append(f"<td class='inp'>{price}{ranked}</td>")
    return (
        "<tr><th class='inp'>price per row (list price, cached or not; 1 the cheapest)</th>"
        f"{''.join(cells)}</tr>"
    )
