"""How the HTML of reports writes what it shows: one set of rules for every part (the side by
side, the summary, the page, the frontier, a choice, an agreement).

- **Text from data** (outputs, inputs, variant and scorer names, prompts, reasons, a URL shown
  as text) goes through :func:`esc` (:func:`flownb.show.escape.html_text`: escaped, each ``$``
  in a ``<span>`` of its own), an attribute's value through :func:`attr`.
- **flownb's own figures** (numbers, money) are written as they are: they hold no markup, and
  every part is shown inside an element the front ends' math typesetters skip
  (:func:`flownb.show.escape.no_math`), so ``$0.01 ... $0.02`` is never typeset.
- **One number style**: three significant digits (``0.0968``, ``12.3``, ``1230``), rates as
  percentages (``83.9%``), p-values as ``p=0.0123`` or ``p<0.001``, seconds as ``1.23 s``;
  what is missing is "–" (money: "price unknown"), never a 0 that reads as free.
- **Pictures** are ``<img>`` elements holding a data URI (:func:`svg_img`): no request is made
  and no script can run.
"""

from __future__ import annotations

import base64
import math
from typing import Any

from ...show.escape import html_attr, html_text
from ...show.meter import usd
from ..figures.money import money_text
from ..figures.speed import sig

__all__ = [
    "PAGE_STYLE",
    "STYLE",
    "attr",
    "dollars",
    "esc",
    "fmt_number",
    "fmt_p",
    "fmt_rate",
    "missing",
    "money",
    "seconds",
    "svg_img",
]

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


def esc(value: Any) -> str:
    """Return ``value`` as element content shown as written (escaped, ``$`` never a math
    delimiter)."""
    return html_text(str(value))


def attr(value: Any) -> str:
    """Return ``value`` escaped for a quoted attribute (a title, a src, a data- attribute)."""
    return html_attr(str(value))


def missing(value: Any) -> bool:
    """Return whether ``value`` is a missing figure: None, pandas' NA or NaN (a value that is
    not a number is not missing)."""
    if value is None:
        return True
    try:
        return math.isnan(float(value))
    except (TypeError, ValueError):  # pandas' NA refuses float(); any other non-number is text
        return type(value).__name__ == "NAType"


def fmt_number(value: Any) -> str:
    """Return ``value`` with three significant digits, never in exponent notation
    (``0.0968``, ``12.3``, ``1230``); "–" when missing."""
    if missing(value):
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
    if missing(value):
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


def seconds(value: Any) -> str:
    """Return a time as ``1.23 s``, "–" when missing or not a number."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        return "–"
    return "–" if math.isnan(x) else f"{sig(x)} s"


def money(value: Any, unpriced: Any = 0) -> str:
    """Return :func:`~flownb.evaluation.figures.money.money_text` kept on one line
    (``<span class="money">``, which the report's style never breaks: a price split as
    ``$0.00002`` / ``4`` reads as two numbers): ``at least`` when ``unpriced`` calls were left
    out, "price unknown" when it is NaN."""
    return f'<span class="money">{attr(money_text(value, unpriced))}</span>'


def dollars(value: Any) -> str:
    """Return US dollars kept on one line, "–" when unknown (a table of prices at scale)."""
    x = float(value)
    return "–" if math.isnan(x) else f'<span class="money">{usd(x)}</span>'


def svg_img(svg: str | bytes, alt: str) -> str:
    """Return ``svg`` as an ``<img>`` holding a data URI: no request, no script can run."""
    raw = svg.encode("utf-8") if isinstance(svg, str) else svg
    data = base64.b64encode(raw).decode("ascii")
    return f'<img class="flownb-plot" src="data:image/svg+xml;base64,{data}" alt="{attr(alt)}">'
