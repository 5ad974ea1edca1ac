"""The live results view: one notebook view that fills in while a batch runs.

In a front end that renders widgets, a batch (``run_batch``, ``run_dataframe``, ``df.flownb.run``,
``%flow batch``) shows, instead of the plain progress bar, one HTML widget holding the bar (count,
rate, cache hits, retries, money so far, the last notice) and the rows finished so far (failed
rows first and highlighted, then the newest first; images as thumbnails; long text clipped, the
full text on hover). ``evaluate`` shows the running summary per variant instead of rows.

Finished rows are only appended to a queue by the thread that finishes them; one updater thread
of the view's own draws them at most :data:`INTERVAL`-ly (4 a second), one widget message per
draw, and only when something changed. When the batch ends (or stops at Ctrl-C) the last draw
holds every finished row, and the view's output is replaced by static HTML (the table the
returned frame shows) and the widget closed, so a saved notebook holds no widget state.

Whether the view is used: ``FLOWNB_LIVE`` (see :func:`enabled`).
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from typing import Any

from ..config.settings import live_view_mode
from ..providers.calls import retries_to
from ..scorers import JudgeScorer, Scorer
from ..show.display import (
    IMAGE_COLUMNS_ATTR,
    FrameView,
    image_columns,
    is_image_url,
    thumbnail_src,
)
from ..show.escape import html_attr, html_text, no_math, term_text
from .live_text import in_front_end

__all__ = [
    "EvalBoard",
    "LiveView",
    "RowsBoard",
    "TableSlot",
    "enabled",
    "keep_bar_only",
    "open_slot",
]

# Seconds between two draws: at most 4 widget updates a second, whatever the batch's pace.
INTERVAL = 0.25
CLIP = 80  # characters of a text cell shown in the live table; the rest on hover
TITLE_MAX = 2000  # characters of a cell kept for the hover text (the frame has all of it)
THUMBS = 12  # the newest rows' images drawn as thumbnails (older ones as a hover link)
THUMB_SIZE = 64
LIVE_ROWS = 200  # rows in the table while the batch runs: the failed and the newest ones
MAX_SHOWN = 1000  # rows in the last update, drawn as the batch ends (all, up to this many)
_FAILED = 'style="background:#fdecea"'


def enabled() -> bool:
    """Return whether a batch started here shows the live view.

    ``FLOWNB_LIVE=0`` (off): never. Otherwise only in a Jupyter kernel where tqdm's automatic
    choice is its notebook (widget) bar: not a terminal IPython, qtconsole, Spyder or a script.
    ``FLOWNB_LIVE=1`` (on): in every such kernel. ``auto`` (the default): only when the kernel was
    started for a front end that renders widgets: by a Jupyter server (JupyterLab, Notebook 7;
    ipykernel then sets ``__session__``) or by VS Code (which sets ``__vsc_ipynb_file__``), not
    by nbclient (nbval, nbconvert, papermill), whose outputs stay as before.

    Raises:
        ConfigError: ``FLOWNB_LIVE`` is set to something else than auto, 1 or 0.
    """
    mode = live_view_mode()
    if mode == "off" or not _notebook_kernel():
        return False
    return mode == "on" or in_front_end()  # the same front end a streamed run's text needs


def _notebook_kernel() -> bool:
    # tqdm.auto's own decision (ipykernel, ipywidgets importable, not qtconsole/Spyder), the one
    # that makes today's bar a widget: the live view appears exactly where that bar would.
    from tqdm.auto import tqdm

    return any(cls.__module__ == "tqdm.notebook" for cls in tqdm.__mro__)


# -- where run_dataframe puts its returned frame ------------------------------------------------

_current = threading.local()


class TableSlot:
    """Lets ``run_dataframe`` replace the final table of the live view its batch showed (the
    rows as the view collected them) with the table of the frame it returns."""

    def __init__(self, labels: Sequence[Any] | None = None) -> None:
        self.labels = labels  # the frame's index: the live table's row labels
        self.view: LiveView | None = None

    def show(self, frame: Any) -> None:
        """Show ``frame`` as the final table of the view opened since this slot (if any)."""
        view, self.view = self.view, None
        if getattr(_current, "slot", None) is self:
            _current.slot = None
        if view is not None:
            view.finish_with(frame)


def open_slot(labels: Sequence[Any] | None = None) -> TableSlot:
    """Return a slot that the next live view opened on this thread reports to; ``labels``
    name its rows (a frame's index)."""
    slot = TableSlot(labels)
    _current.slot = slot
    return slot


def keep_bar_only(frame: Any) -> None:
    """Reduce the live view that ended as ``frame``'s table (on this thread) to its bar line:
    for a caller that shows the frame itself, or shows nothing (``%flow batch -o`` / ``-q``)."""
    finished = getattr(_current, "finished", None)
    if finished is not None and finished[0] is frame:
        _current.finished = None
        finished[1].keep_bar_only()


# -- the view --------------------------------------------------------------------------------


class LiveView:
    """One HTML widget: the bar and a board (rows, or an evaluation's summary).

    Takes the place of :class:`flownb.show.progress.Progress`: :meth:`update`,
    :meth:`set_postfix_str`, :meth:`notice`, :meth:`write` and :meth:`close` from any thread,
    plus :meth:`record` for each finished element (appended to a queue, drawn by the updater).
    """

    in_notebook = True

    def __init__(
        self, desc: str, total: int, unit: str, board: Any, *, interval: float = INTERVAL
    ) -> None:
        import ipywidgets
        from IPython.display import display

        self.desc = desc
        self.total = total
        self.unit = unit
        self.board = board
        self.n = 0  # the count drawn last (tqdm's name)
        self._lock = threading.Lock()
        self._done = 0
        self._retries = 0
        self._postfix = ""
        self._notice = ""
        self._records: deque[tuple[Any, ...]] = deque()
        self._started = time.monotonic()
        self._interval = interval
        self._widget = ipywidgets.HTML(self._html(self.board.live_html()))
        self._shown = self._widget.value
        self._handle = display(self._widget, display_id=True)
        self._scope = ExitStack()
        self._scope.enter_context(retries_to(self._retried))
        self._closed = threading.Event()
        self._finished = False
        self._broken = False
        self._final_bar = ""  # the bar line as the batch ended (HTML, and text below)
        self._final_line = ""
        self._stopped = False
        self._updater = threading.Thread(target=self._run, name="flownb-live", daemon=True)
        self._updater.start()

    # what the batch calls, from any thread
    def record(self, *item: Any) -> None:
        """Queue one finished element (the board's own shape); drawn by the updater."""
        self._records.append(item)  # deque.append: safe from any thread, no lock

    def update(self, n: int = 1) -> None:
        """Count ``n`` more finished steps."""
        with self._lock:
            self._done += n

    def set_postfix_str(self, text: str, refresh: bool = False) -> None:
        """Show ``text`` (the money meter) on the bar; ``refresh`` is tqdm's, and ignored."""
        self._postfix = text

    def notice(self, line: str) -> None:
        """Show ``line`` (a slow retry) on the bar until the next notice."""
        self._notice = line

    def write(self, line: str, file: Any = None) -> None:
        """Print ``line`` (not used in a notebook, where notices go on the bar)."""
        print(line, file=file)

    def _retried(self) -> None:
        with self._lock:
            self._retries += 1

    # the updater
    def _run(self) -> None:
        try:
            while not self._closed.wait(self._interval):
                self._draw()
        except Exception:  # a view that cannot draw must never fail the batch paying for rows
            self._broken = True

    def _draw(self, *, last: bool = False) -> None:
        records = self._records
        new = [records.popleft() for _ in range(len(records))]
        if new:
            self.board.add(new)
        value = self._html(self.board.live_html(last=last))
        if value != self._shown:
            self._widget.value = value
            self._shown = value

    def _parts(self, *, final: bool) -> tuple[int, list[str]]:
        """Return the count and what the bar says about it."""
        with self._lock:
            done, retries = self._done, self._retries
        self.n = done
        if self.total and done > self.total:  # more than counted: the total grows, never shrinks
            self.total = done
        elapsed = max(time.monotonic() - self._started, 1e-9)
        parts = [f"{done}/{self.total} {self.unit}s" if self.total else f"{done} {self.unit}s"]
        parts.append(f"{done / elapsed:.1f} {self.unit}s/s" if not final else f"{elapsed:.1f} s")
        failed = self.board.n_failed
        if failed:
            parts.append(f"{failed} failed")
        parts.append(f"{self.board.cached} cached")
        parts.append(f"{retries} retr{'y' if retries == 1 else 'ies'}")
        for extra in (self._postfix, self._notice):
            if extra:
                parts.append(extra)
        return done, parts

    def _bar(self, *, final: bool) -> str:
        done, parts = self._parts(final=final)
        state = " <b>stopped</b>" if final and self._stopped else ""
        meter = (
            f'<progress value="{done}" max="{self.total or 1}" style="width:12em"></progress> '
            if not final
            else ""
        )
        text = " · ".join(html_text(p) for p in parts)
        return (
            f'<div class="flownb-live-bar">{meter}<b>{html_text(self.desc)}</b>{state}: '
            f"{text}</div>"
        )

    def _html(self, board: str) -> str:
        return no_math(self._bar(final=False) + board, css="flownb-live")

    def close(self, *, end_at_count: bool = False) -> None:
        """Stop the updater, draw every finished element once more, then replace the widget by
        static HTML (the board's final table) and close it. Without ``end_at_count``, a count
        short of the total reads "stopped" (Ctrl-C); with it (Progress's meaning: fewer steps
        than counted, as when runs failed), the count is the total."""
        if self._finished:
            return
        self._finished = True
        self._closed.set()
        if self._updater is not threading.current_thread():
            self._updater.join()
        self._scope.close()
        with self._lock:
            done = self._done
        if end_at_count:
            self.total = done
        self._stopped = bool(self.total) and done < self.total
        try:
            if not self._broken:
                self._draw(last=True)  # the last update holds every finished element
            self._final_bar = self._bar(final=True)
            _, parts = self._parts(final=True)
            stopped = " (stopped)" if self._stopped else ""
            self._final_line = f"{self.desc}{stopped}: {', '.join(parts)}"
            self._replace(*self.board.final())
        except Exception:  # as in _run: the rows are in what the batch returns, whatever this does
            self._widget.close()
            return
        slot = getattr(_current, "slot", None)
        if slot is not None and slot.view is None:
            slot.view = self

    def finish_with(self, frame: Any) -> None:
        """Replace the final table by ``frame``'s (what the returned DataFrame shows)."""
        try:
            self._replace(*_frame_view(frame))
            _current.finished = (frame, self)
            self._shrink_if_shown(frame)
        except Exception:  # the frame is returned all the same; the view keeps its own table
            return

    def _replace(self, table: str = "", text: str = "") -> None:
        """Show the final bar and ``table`` (``text`` for plain-text readers) as static output
        in the widget's place, and close the widget."""
        bundle = {
            "text/html": no_math(self._final_bar + table, css="flownb-live"),
            "text/plain": term_text("\n".join(t for t in (self._final_line, text) if t)),
        }
        self._handle.update(bundle, raw=True)
        self._widget.close()

    def keep_bar_only(self) -> None:
        """Show only the final bar line (the table is shown elsewhere, or not wanted)."""
        self._replace()

    def _shrink_if_shown(self, frame: Any) -> None:
        """When ``frame`` turns out to be the cell's value (shown right below the view), keep
        only the view's bar line, so the table is not shown twice."""
        from IPython import get_ipython

        shell = get_ipython()
        if shell is None:
            return

        def after(result: Any) -> None:
            shell.events.unregister("post_run_cell", after)
            if result.result is frame:
                self.keep_bar_only()

        shell.events.register("post_run_cell", after)


def _frame_view(frame: Any) -> tuple[str, str]:
    """Return the HTML a notebook shows for ``frame`` under ``%load_ext flownb`` (thumbnails for
    image columns, else pandas' own) and its text."""
    if image_columns(frame) or IMAGE_COLUMNS_ATTR in frame.attrs:
        view = FrameView(frame)
        return view._repr_html_(), repr(view)
    return str(frame._repr_html_()), repr(frame)


# -- boards ----------------------------------------------------------------------------------


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
        title = html_attr(value[:200])
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
        zero = dict.fromkeys(("done", "errors", "passed", "cost"), 0.0)
        self.stats: dict[str, dict[str, float]] = {v: dict(zero) for v in self.variants}
        self.sums: dict[str, dict[str, list[float]]] = {
            v: {s.name: [0.0, 0.0] for s in self.floats} for v in self.variants
        }
        self.broken: set[str] = set()  # scorers that raised on a partial block

    def add(self, records: Sequence[tuple[Any, ...]]) -> None:
        """Take finished runs ``(variant, i, result, exc)`` and grade the ones that worked."""
        from ..scorers import Block

        fresh: dict[str, list[tuple[int, Any]]] = {}
        for variant, i, result, exc in records:
            stats = self.stats[variant]
            stats["done"] += 1
            if exc is not None:
                stats["errors"] += 1
                continue
            self.cached += _hits(result)
            cost = result.cost
            if not math.isnan(cost):
                stats["cost"] += cost
            fresh.setdefault(variant, []).append((i, result))
        for variant, rows in fresh.items():
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
            self.stats[variant]["passed"] += sum(passed)

    @property
    def n_failed(self) -> int:
        """How many finished runs failed, over every variant."""
        return int(sum(st["errors"] for st in self.stats.values()))

    def _table(self) -> tuple[str, str]:
        from ..show.meter import usd

        head = ["variant", "done", "errors", "pass rate", *(f"mean {s.name}" for s in self.floats)]
        head.append("cost")
        body = []
        lines = []
        for v in self.variants:
            st = self.stats[v]
            done = int(st["done"])
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
                usd(st["cost"]),
            ]
            tds = "".join(f"<td>{html_text(c)}</td>" for c in cells)
            body.append(f"<tr{style}><th>{html_text(v)}</th>{tds}</tr>")
            lines.append(
                f"{v}: " + ", ".join(f"{h} {c}" for h, c in zip(head[1:], cells, strict=True))
            )
        note = " (before the judges)" if self.judged else ""
        heads = "".join(f"<th>{html_text(h)}</th>" for h in head)
        table = (
            f'<table class="dataframe"><thead><tr>{heads}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table>"
            f"<p><small>pass rate so far{note}: rows passing every scorer, of the rows "
            "done</small></p>"
        )
        return table, "\n".join(lines)

    def live_html(self, *, last: bool = False) -> str:
        """Return the running summary table (``last`` changes nothing)."""
        return self._table()[0]

    def final(self) -> tuple[str, str]:
        """Return the summary as it stood when the runs ended, as HTML and as text."""
        return self._table()


def rows_view(
    desc: str,
    batch: Sequence[Mapping[str, Any]],
    outputs: Sequence[str],
) -> LiveView | None:
    """Return a live view of a flow's batch, or None where it is not used (see :func:`enabled`)."""
    if not enabled():
        return None
    slot = getattr(_current, "slot", None)
    labels = slot.labels if slot is not None else None
    if labels is not None and len(labels) != len(batch):
        labels = None
    return LiveView(desc, len(batch), "row", RowsBoard(batch, outputs, labels))


def eval_view(
    variants: Sequence[str], data: Any, scorers: Sequence[Scorer], total: int, repeats: int = 1
) -> LiveView | None:
    """Return a live view of an evaluation (bar in calls, summary per variant over every
    repeat's runs), or None."""
    if not enabled():
        return None
    return LiveView("evaluate", total, "call", EvalBoard(variants, data, scorers, repeats))
