"""Progress bars moved by one thread, whichever threads finish the work.

Rows finish on flownb's event-loop thread, in worker threads, or on the caller's thread; a
notebook progress bar is a widget, and widgets are not safe to change from several threads at
once. :class:`Progress` only counts where the work finishes; one updater thread of its own moves
the bar (a few times a second), and after :meth:`Progress.close` the closing thread shows the
final count and closes the bar.
"""

from __future__ import annotations

import threading
from typing import Any

from .escape import NO_MATH, html_text, no_math
from .fallback import in_front_end

__all__ = ["Progress", "open_bar", "unmade"]

# Seconds between two moves of the bar: often enough to look live, rarely enough that a
# 100,000-row batch sends a few hundred widget updates, not 100,000.
INTERVAL = 0.2


class Progress:
    """Wraps a tqdm-like ``bar``: :meth:`update` from any thread, :meth:`close` once."""

    def __init__(
        self, bar: Any, interval: float = INTERVAL, handle: Any = None, static: bool = False
    ) -> None:
        self.bar = bar
        # The notebook display the bar was shown in (see open_bar): a finished bar is replaced
        # by its final state as static output, which a saved notebook keeps. ``static``: the
        # bar was never shown (no front end), its final state is displayed when it closes.
        self._handle = handle
        self._static = static
        self._lock = threading.Lock()
        self._done = 0
        self._shown = 0  # only the thread moving the bar reads or writes this
        # What follows the count: the running meter (set_postfix_str) and the last notice (a
        # slow retry); both stay, the notice last. ``_changed``: not drawn yet.
        self._main = ""
        self._notice = ""
        self._changed = False
        self._closed = threading.Event()
        self._unmade = 0  # counted steps the finished work did not need (see close)
        self._interval = interval
        self._updater = threading.Thread(target=self._run, name="flownb-progress", daemon=True)
        self._updater.start()

    def update(self, n: int = 1) -> None:
        """Count ``n`` more finished steps (the bar shows them within ``interval``)."""
        with self._lock:
            self._done += n

    @property
    def in_notebook(self) -> bool:
        """Whether the bar is a notebook widget (else a terminal bar)."""
        return type(self.bar).__module__.startswith("tqdm.notebook")

    def set_postfix_str(self, text: str, refresh: bool = False) -> None:
        """Show ``text`` after the count (from any thread; shown by the updater, so
        ``refresh`` is accepted for tqdm's signature and changes nothing)."""
        with self._lock:
            self._main, self._changed = text, True

    def notice(self, line: str) -> None:
        """Show ``line`` after the count and the meter, until the next notice (a slow retry)."""
        with self._lock:
            self._notice, self._changed = line, True

    def write(self, line: str, file: Any = None) -> None:
        """Print ``line`` above a terminal bar (tqdm keeps the bar below it)."""
        self.bar.write(line, file=file)

    def _run(self) -> None:
        while not self._closed.wait(self._interval):
            self._show()

    def _show(self) -> None:
        with self._lock:
            done = self._done
            postfix = (
                ", ".join(p for p in (self._main, self._notice) if p) if self._changed else None
            )
            self._changed = False
        if postfix is not None:
            self.bar.set_postfix_str(postfix, refresh=False)
        if done > self._shown:
            total = getattr(self.bar, "total", None)  # any tqdm-like bar; not all have one
            if total is not None and done > total:  # more than counted: the total grows, never
                self.bar.total = done  # shrinks while the work runs
            self.bar.update(done - self._shown)
            self._shown = done
        elif postfix is not None:
            self.bar.refresh()
        self._unmath()

    def _unmath(self) -> None:
        """Keep the notebook bar's text out of the front end's math typesetter: tqdm writes it
        escaped into an HTML widget, which typesets it, and "$0.0081 spent, $0.0081 saved" is
        money, not math."""
        children = getattr(getattr(self.bar, "container", None), "children", ())
        for label in children[::2]:  # the texts left and right of the bar itself
            value = getattr(label, "value", None)
            if isinstance(value, str) and value and not value.startswith("<span class="):
                label.value = (
                    f'<span class="{NO_MATH}">{value.replace("$", "<span>$</span>")}</span>'
                )

    def close(self, *, end_at_count: bool = False) -> None:
        """Stop the updater, show the final count and close the bar. ``end_at_count``: the
        work is over even when fewer steps finished than the bar's total (runs that failed,
        calls answered by another row's): the total stays what was counted (a total never
        shrinks), the final state reads full and says how many counted steps were not made."""
        self._closed.set()
        if self._updater is not threading.current_thread():
            self._updater.join()
        self._show()
        total = getattr(self.bar, "total", None)
        if end_at_count and total is not None and self.bar.n < total:
            self._unmade = total - self.bar.n
        self.bar.close()
        self._unmath()
        if self._handle is not None:
            self._handle.update(self.final_bundle(), raw=True)
        elif self._static:  # no front end drew a widget: the final state is the one output
            from IPython.display import display

            display(self.final_bundle(), raw=True)

    def final_bundle(self) -> dict[str, str]:
        """Return the bar as it ended, as static output: one line (``blog-intro: 6/6 rows in
        0.38 s · $0 spent``), and in HTML a bar element with the same line (not typeset as
        math). No rate nor clock time: a saved notebook compares equal run after run."""
        bar = self.bar
        total = bar.total if bar.total is not None else bar.n
        elapsed = bar.format_dict.get("elapsed", 0.0)
        line = f"{bar.desc}: {bar.n}/{total} {bar.unit}s in {elapsed:.2f} s"
        if self._unmade:
            line += f" · {unmade(self._unmade, bar.unit)}"
        if bar.postfix:
            line += f" · {bar.postfix}"
        # Finished work reads as done, not as a part-filled bar, when counted steps were not
        # needed (``unmade``) or there was nothing to do (every call cached).
        value, most = (bar.n, total) if total and not self._unmade else (1, 1)
        meter = f'<progress value="{value}" max="{most}" style="width:12em"></progress> '
        return {"text/plain": line, "text/html": no_math(meter + html_text(line), css="flownb-bar")}


def unmade(count: int, unit: str) -> str:
    """Return what a finished bar says of the ``count`` steps it counted and did not make."""
    plural = "s" if count != 1 else ""
    return f"{count} counted {unit}{plural} not made (failed runs, answers shared)"


def open_bar(total: int, desc: str, unit: str) -> Progress:
    """Return a :class:`Progress` on a new tqdm bar (``tqdm.auto``: a widget in a notebook, text
    in a terminal). In a notebook front end the bar is shown under a display id, and when it
    closes its final state replaces the widget as static output; where no front end draws
    widgets (nbconvert ``--execute``, nbclient, nbval, papermill) only that final state is
    shown, once the bar closes. Either way a saved notebook keeps what the bar said at the end,
    not the "0%" a widget was displayed with."""
    from tqdm.auto import tqdm

    if not _notebook_bar(tqdm):
        return Progress(tqdm(total=total, desc=desc, unit=unit, leave=True))
    from IPython.display import display

    bar = tqdm(total=total, desc=desc, unit=unit, leave=True, display=False)
    container = getattr(bar, "container", None)
    if container is None:  # disabled bar: nothing to show
        return Progress(bar)
    if not in_front_end():
        return Progress(bar, static=True)
    handle = display(container, display_id=True)
    return Progress(bar, handle=handle)


def _notebook_bar(cls: type) -> bool:
    return any(c.__module__.startswith("tqdm.notebook") for c in cls.__mro__)
