"""What the live results view draws under its bar: the rows finished so far
(:class:`RowsBoard`: failed rows first and highlighted, then the newest; images as thumbnails;
long text clipped, the full text on hover) or an evaluation's running summary per variant
(:class:`EvalBoard`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from ..scorers import Scorer
from ..scorers.judge import JudgeScorer
from ..show.display import (
    IMAGE_COLUMNS_ATTR,
    FrameView,
    image_columns,
    image_label,
    is_image_url,
    thumbnail_src,
)
from ..show.escape import html_attr, html_text

CLIP = 80  # characters of a text cell shown in the live table; the rest on hover

__all__ = ["CLIP", "EvalBoard", "RowsBoard"]


TITLE_MAX = 2000  # characters of a cell kept for the hover text (the frame has all of it)


THUMBS = 12  # the newest rows' images drawn as thumbnails (older ones as a hover link)


THUMB_SIZE = 64


LIVE_ROWS = 200  # rows in the table while the batch runs: the failed and the newest ones


MAX_SHOWN = 1000  # rows in the last update, drawn as the batch ends (all, up to this many)


_FAILED = 'style="background:#fdecea"'


def _frame_view(frame: Any) -> tuple[str, str]:
    """Return the HTML a notebook shows for ``frame`` under ``%load_ext flownb`` (thumbnails for
    image columns, else pandas' own) and its text."""
    if image_columns(frame) or IMAGE_COLUMNS_ATTR in frame.attrs:
        view = FrameView(frame)
        return view._repr_html_(), repr(view)
    return str(frame._repr_html_()), repr(frame)


def _hits(result: Any) -> int:
    gens = getattr(result, "generations", ())
    if gens:
        return sum(1 for g in gens if g is not None and g.cached)
    return len(getattr(result, "cached", ()))


def _clip(value: Any) -> str:
    text = str(value)
    if len(text) <= CLIP:
        return html_text(text).replace("\n", " ")
    title = html_attr(text[:TITLE_MAX])
    return f'<span title="{title}">{html_text(text[:CLIP]).replace(chr(10), " ")}…</span>'


def _cell(value: Any, thumb: bool, image: bool) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if image and is_image_url(value):  # only an image node's output is an image
        src = thumbnail_src(value, THUMB_SIZE) if thumb else ""
        title = html_attr(image_label(value)[:200])  # no path of this machine in a saved page
        if src and not src.startswith("file:"):
            return (
                f'<img src="{html_attr(src)}" title="{title}" '
                f'style="max-width:{THUMB_SIZE}px;max-height:{THUMB_SIZE}px"/>'
            )
        return f'<span title="{title}">[image]</span>'
    return _clip(value)


class RowsBoard:
    """The rows of one flow's batch: ``record(i, result, exc)`` per finished element."""

    def __init__(
        self,
        batch: Sequence[Mapping[str, Any]],
        outputs: Sequence[str],
        labels: Sequence[Any] | None = None,
    ) -> None:
        self.batch = batch
        self.outputs = list(dict.fromkeys(outputs))
        self.inputs = list(batch[0]) if len(batch) else []
        self.labels = labels
        self.cached = 0
        self.values: dict[int, tuple[dict[str, Any], str | None]] = {}
        self.order: list[int] = []  # finished, oldest first
        self.failed: list[int] = []
        self._plain: dict[int, str] = {}  # the shown rows' HTML without thumbnails
        self._thumbs: dict[int, str] = {}  # the newest rows' HTML with them
        self.images: set[str] = set()  # the outputs image nodes made (their results say)

    def add(self, records: Sequence[tuple[Any, ...]]) -> None:
        """Take finished elements ``(i, result, exc)``."""
        from ..errors import one_line

        for i, result, exc in records:
            error = one_line(exc, code=True) if exc is not None else None
            if exc is not None:
                result = getattr(exc, "partial", None)
            outputs = {o: result.get(o) for o in self.outputs} if result is not None else {}
            if result is not None:
                self.cached += _hits(result)
                is_image = getattr(result, "is_image", None)
                if is_image is not None:
                    self.images.update(o for o in self.outputs if is_image(o))
            self.values[i] = (outputs, error)
            self.order.append(i)
            if error is not None:
                self.failed.append(i)

    @property
    def n_failed(self) -> int:
        """How many finished rows failed."""
        return len(self.failed)

    def _label(self, i: int) -> str:
        return html_text(str(self.labels[i] if self.labels is not None else i))

    def _row(self, i: int, thumb: bool) -> str:
        cache = self._thumbs if thumb else self._plain
        found = cache.get(i)
        if found is None:
            outputs, error = self.values[i]
            row = self.batch[i]
            cells = [_clip(row.get(name, "")) for name in self.inputs]
            cells += [_cell(outputs.get(o), thumb, o in self.images) for o in self.outputs]
            cells.append(f'<span style="color:#b00020">{_clip(error)}</span>' if error else "")
            style = f" {_FAILED}" if error else ""
            tds = "".join(f"<td>{c}</td>" for c in cells)
            found = cache[i] = f"<tr{style}><th>{self._label(i)}</th>{tds}</tr>"
        return found

    def live_html(self, *, last: bool = False) -> str:
        """Return the table of the finished rows: failed first, then the newest first (while
        running, :data:`LIVE_ROWS` of them; ``last``: every one, up to :data:`MAX_SHOWN`)."""
        if not self.order:
            return ""
        newest = self.order[::-1]
        fresh = set(newest[:THUMBS])
        for i in list(self._thumbs):
            if i not in fresh:
                del self._thumbs[i]
        failed = self.failed[::-1]
        bad = set(failed)
        shown = failed + [i for i in newest if i not in bad]
        limit = MAX_SHOWN if last else LIVE_ROWS
        more = len(shown) - limit
        shown = shown[:limit]
        rows = "".join(self._row(i, i in fresh) for i in shown)
        if len(self._plain) > len(shown):  # rows that left the table are not drawn again
            kept = set(shown)
            self._plain = {i: row for i, row in self._plain.items() if i in kept}
        head = "".join(
            f"<th>{html_text(str(c))}</th>" for c in ["", *self.inputs, *self.outputs, "error"]
        )
        note = f"<p>… {more} earlier rows (in the final table)</p>" if more > 0 else ""
        return (
            '<div class="flownb-live-rows" style="max-height:24em;overflow:auto">'
            f'<table class="dataframe"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody>'
            f"</table>{note}</div>"
        )

    def final(self) -> tuple[str, str]:
        """Return the static table of the finished rows, in input order (the frame's view), as
        HTML and as text."""
        import pandas as pd

        done = sorted(self.values)
        if not done:
            return "", ""
        cols: dict[str, list[Any]] = {n: [self.batch[i].get(n) for i in done] for n in self.inputs}
        for o in self.outputs:
            cols.setdefault(o, [self.values[i][0].get(o) for i in done])
        if self.failed:
            cols.setdefault("error", [self.values[i][1] for i in done])
        labels = [self.labels[i] for i in done] if self.labels is not None else done
        frame = pd.DataFrame(cols, index=labels)
        frame.attrs[IMAGE_COLUMNS_ATTR] = [o for o in self.outputs if o in self.images]
        return _frame_view(frame)


class EvalBoard:
    """An evaluation's running summary per variant: ``record(variant, i, result, exc)``.

    Rows are graded as they arrive by the scorers that need no model (judges run after every
    variant, so they are left out until the report)."""

    def __init__(
        self, variants: Sequence[str], data: Any, scorers: Sequence[Scorer], repeats: int = 1
    ) -> None:
        self.variants = list(variants)
        self.n = len(data) * repeats  # runs per variant: with repeats, each row k times
        self.inputs = {str(c): data[c].tolist() for c in data.columns}
        self.scorers = [s for s in scorers if not isinstance(s, JudgeScorer)]
        self.floats = [s for s in self.scorers if s.kind == "float"]
        self.judged = len(self.scorers) < len(scorers)
        self.cached = 0
        zero = dict.fromkeys(("done", "errors", "passed", "spent", "price", "priced"), 0.0)
        self.stats: dict[str, dict[str, float]] = {v: dict(zero) for v in self.variants}
        self.sums: dict[str, dict[str, list[float]]] = {
            v: {s.name: [0.0, 0.0] for s in self.floats} for v in self.variants
        }
        self.broken: set[str] = set()  # scorers that raised on a partial block
        # Per variant, the report's pass rate once the evaluation ended (judges included): the
        # final table shows it, so it says what ``report.summary`` says (see :meth:`settle`).
        self.settled: dict[str, float] = {}

    def add(self, records: Sequence[tuple[Any, ...]]) -> None:
        """Take finished runs ``(variant, i, result, exc)`` and grade the ones that worked."""
        fresh: dict[str, list[tuple[int, Any]]] = {}
        for variant, i, result, exc in records:
            if self._count(self.stats[variant], result, exc):
                fresh.setdefault(variant, []).append((i, result))
        for variant, rows in fresh.items():
            self._grade(variant, rows)

    def _count(self, stats: dict[str, float], result: Any, exc: BaseException | None) -> bool:
        """Count a finished run into its variant's ``stats`` (done, errors, spent, list price)
        and the cache hits; return whether it worked (so is graded)."""
        stats["done"] += 1
        if exc is not None:
            stats["errors"] += 1
            return False
        self.cached += _hits(result)
        cost = result.cost
        if not math.isnan(cost):
            stats["spent"] += cost
        price = getattr(result, "price", math.nan)  # the row's list price, cached or not
        if not math.isnan(price):
            stats["price"] += price
            stats["priced"] += 1
        return True

    def _grade(self, variant: str, rows: list[tuple[int, Any]]) -> None:
        """Grade a variant's new rows ``(i, result)`` with the scorers that need no model: how
        many pass every one, and each float scorer's sum and count."""
        from ..scorers import Block

        cols = {c: [values[i] for i, _ in rows] for c, values in self.inputs.items()}
        outputs = {o for _, r in rows for o in r}
        for o in outputs:
            cols[o] = [r.get(o) for _, r in rows]
        block = Block(cols, len(rows))
        passed = [True] * len(rows)
        for s in self.scorers:
            if s.name in self.broken:
                continue
            try:
                scores, _ = s.score(block)
            except Exception:  # the report grades them again and says what failed
                self.broken.add(s.name)
                continue
            self._fold(variant, s, scores, passed)
        self.stats[variant]["passed"] += sum(passed)

    def _fold(self, variant: str, s: Scorer, scores: Sequence[Any], passed: list[bool]) -> None:
        """Fold one scorer's ``scores`` of a block into ``passed`` (a row passes while every
        scorer passes it) and, for a float scorer, into the variant's sum and count."""
        for k, value in enumerate(scores):
            missing = value is None or (isinstance(value, float) and math.isnan(value))
            if s.kind == "bool":
                passed[k] = passed[k] and not missing and bool(value)
            elif s.threshold is not None:
                passed[k] = passed[k] and not missing and float(value) >= s.threshold
            if s.kind == "float" and not missing:
                total = self.sums[variant][s.name]
                total[0] += float(value)
                total[1] += 1

    @property
    def n_failed(self) -> int:
        """How many finished runs failed, over every variant."""
        return int(sum(st["errors"] for st in self.stats.values()))

    def _table(self) -> tuple[str, str]:
        from ..show.meter import usd

        head = ["variant", "done", "errors", "pass rate", *(f"mean {s.name}" for s in self.floats)]
        head += ["price/row", "spent"]
        body = []
        lines = []
        for v in self.variants:
            st = self.stats[v]
            done = int(st["done"])
            if v in self.settled:
                settled = self.settled[v]
                rate = "-" if math.isnan(settled) else f"{settled:.0%}"
            else:
                rate = f"{st['passed'] / done:.0%}" if done else "-"
            means = []
            for s in self.floats:
                total, count = self.sums[v][s.name]
                means.append(f"{total / count:.3g}" if count and s.name not in self.broken else "-")
            style = f" {_FAILED}" if st["errors"] else ""
            cells = [
                str(done) + f"/{self.n}",
                str(int(st["errors"])),
                rate,
                *means,
                usd(st["price"] / st["priced"]) if st["priced"] else "-",
                usd(st["spent"]),
            ]
            tds = "".join(f"<td>{html_text(c)}</td>" for c in cells)
            body.append(f"<tr{style}><th>{html_text(v)}</th>{tds}</tr>")
            lines.append(
                f"{v}: " + ", ".join(f"{h} {c}" for h, c in zip(head[1:], cells, strict=True))
            )
        if self.settled:
            note = " (as in report.summary's pass_rate" + (
                ", judges included)" if self.judged else ")"
            )
        else:
            note = " so far (before the judges)" if self.judged else " so far"
        heads = "".join(f"<th>{html_text(h)}</th>" for h in head)
        table = (
            f'<table class="dataframe"><thead><tr>{heads}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table>"
            f"<p><small>pass rate{note}: rows passing every scorer, of the rows "
            "done</small></p>"
        )
        return table, "\n".join(lines)

    def settle(self, summary: Any) -> None:
        """Take the evaluation's own pass rates (``summary``: ``report.summary``, index:
        variant, column ``pass_rate``), which count the judges' verdicts the running figures
        leave out: the final table shows them."""
        if "pass_rate" not in summary.columns:
            return
        rates = summary["pass_rate"]
        self.settled = {str(v): float(rates[v]) for v in rates.index if str(v) in self.stats}

    def live_html(self, *, last: bool = False) -> str:
        """Return the running summary table (``last`` changes nothing)."""
        return self._table()[0]

    def final(self) -> tuple[str, str]:
        """Return the summary as it stood when the runs ended, as HTML and as text."""
        return self._table()
