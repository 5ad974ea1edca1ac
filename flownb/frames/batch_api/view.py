"""What a run waiting for provider batches shows: in a notebook, a small table (one row per
batch: id, model, status, requests done and failed) updated in place through a display handle
and left, when the wait ends, as a plain HTML table, so a saved notebook shows the last state
without any widget; elsewhere (a terminal, the CLI), the progress bar with the batches' states.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any, Protocol

from .store import BatchRecord

__all__ = ["BatchView", "open_view", "table_html", "table_text"]


class BatchView(Protocol):
    """Shows the batches a run waits for."""

    def update(self, records: Sequence[BatchRecord]) -> None:
        """Show ``records``' latest state."""
        ...

    def close(self) -> None:
        """End the view (what it shows last stays)."""
        ...


def _counts(record: BatchRecord) -> tuple[int, int, int]:
    return record.total or len(record.keys), record.completed, record.failed


def table_text(records: Sequence[BatchRecord]) -> str:
    """Return the batches as aligned plain-text lines (the table's text form)."""
    lines = [f"{'batch':<28} {'model':<22} {'status':<12} {'done':>13} {'failed':>7}"]
    for r in records:
        total, done, failed = _counts(r)
        lines.append(f"{r.id:<28} {r.model:<22} {r.status:<12} {f'{done}/{total}':>13} {failed:>7}")
    return "\n".join(lines)


def table_html(records: Sequence[BatchRecord]) -> str:
    """Return the batches as a small static HTML table."""
    head = "".join(f"<th>{h}</th>" for h in ("batch", "model", "status", "done", "failed"))
    rows = []
    for r in records:
        total, done, failed = _counts(r)
        cells = (r.id, r.model, r.status, f"{done}/{total}", str(failed))
        rows.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
    return (
        '<table class="flownb-batches"><thead><tr>'
        + head
        + "</tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table>"
    )


class _TableView:
    """The notebook's table, replaced in place through one display handle."""

    def __init__(self) -> None:
        self._handle: Any = None
        self._shown: tuple[Any, ...] | None = None

    def update(self, records: Sequence[BatchRecord]) -> None:
        if not records:
            return  # nothing to wait for: no table
        state = tuple((r.id, r.status, r.completed, r.failed, r.total) for r in records)
        if state == self._shown:
            return  # nothing new: no message to the front end
        self._shown = state
        bundle = {"text/plain": table_text(records), "text/html": table_html(records)}
        if self._handle is None:
            from IPython.display import display

            self._handle = display(bundle, raw=True, display_id=True)
        else:
            self._handle.update(bundle, raw=True)

    def close(self) -> None:
        pass  # the last table is plain HTML already: nothing to take down


class _BarView:
    """A terminal progress bar: requests ended out of all, and the batches' states."""

    def __init__(self, name: str) -> None:
        from tqdm.auto import tqdm

        self._bar = tqdm(total=0, desc=f"{name} (provider batch)", unit="req", leave=True)

    def update(self, records: Sequence[BatchRecord]) -> None:
        bar = self._bar
        # Never smaller than before: a total that shrank mid-run would read as work undone.
        bar.total = max(bar.total or 0, sum(r.total or len(r.keys) for r in records))
        bar.n = sum(r.completed + r.failed for r in records)
        states = sorted({r.status for r in records})
        bar.set_postfix_str(f"{len(records)} batch(es): {', '.join(states)}", refresh=False)
        bar.refresh()

    def close(self) -> None:
        self._bar.close()


def _front_end() -> bool:
    """Whether this process is a Jupyter kernel (a front end shows rich output)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and "IPKernelApp" in getattr(shell, "config", {})


def open_view(name: str) -> BatchView:
    """Return the view for a wait of flow ``name``: the table in a notebook, else the bar."""
    return _TableView() if _front_end() else _BarView(name)
