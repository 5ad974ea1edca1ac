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

__all__ = ["Progress"]

# Seconds between two moves of the bar: often enough to look live, rarely enough that a
# 100,000-row batch sends a few hundred widget updates, not 100,000.
INTERVAL = 0.2


class Progress:
    """Wraps a tqdm-like ``bar``: :meth:`update` from any thread, :meth:`close` once."""

    def __init__(self, bar: Any, interval: float = INTERVAL) -> None:
        self.bar = bar
        self._lock = threading.Lock()
        self._done = 0
        self._shown = 0  # only the thread moving the bar reads or writes this
        # What follows the count: the running meter (set_postfix_str) and the last notice (a
        # slow retry); both stay, the notice last. ``_changed``: not drawn yet.
        self._main = ""
        self._notice = ""
        self._changed = False
        self._closed = threading.Event()
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
            self.bar.update(done - self._shown)
            self._shown = done
        elif postfix is not None:
            self.bar.refresh()

    def close(self, *, end_at_count: bool = False) -> None:
        """Stop the updater, show the final count and close the bar. ``end_at_count``: when
        fewer steps finished than the bar's total (runs that failed, calls that repeated), the
        total becomes the count, so a finished bar reads full."""
        self._closed.set()
        if self._updater is not threading.current_thread():
            self._updater.join()
        self._show()
        if end_at_count and self.bar.total is not None and self.bar.n != self.bar.total:
            self.bar.total = self.bar.n
            self.bar.refresh()
        self.bar.close()
