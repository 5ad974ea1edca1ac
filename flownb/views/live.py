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

import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from typing import Any

from ..config.settings import live_view_mode
from ..providers.calls import retries_to
from ..scorers import Scorer
from ..show.escape import html_text, no_math, term_text
from ..show.progress import unmade
from .live_boards import EvalBoard, RowsBoard, _frame_view
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
        self._unmade = 0  # counted steps the finished work did not need (see close)
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
        if final and self._unmade:
            parts.append(unmade(self._unmade, self.unit))
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
        # The total stays what was counted (it never shrinks); work that ended needing fewer
        # steps says so (see _parts) instead of reading "stopped".
        self._unmade = self.total - done if end_at_count and self.total > done else 0
        self._stopped = bool(self.total) and done < self.total and not end_at_count
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

    def settle(self, summary: Any) -> None:
        """Redraw the final table with an evaluation's own figures (``report.summary``; see
        :meth:`EvalBoard.settle`), so it says what the report says."""
        settle = getattr(self.board, "settle", None)
        if settle is None or not self._finished:
            return
        try:
            settle(summary)
            self._replace(*self.board.final())
        except Exception:  # the report is returned all the same; the view keeps its table
            return

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
