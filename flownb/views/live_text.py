"""A single run's text, shown growing in the notebook while the provider streams it.

``flow.run(...)`` in a notebook front end's kernel (and ``%flow run``, which calls it) shows one
live area below the cell: each text output as it grows, each image output once it is ready,
updated at most :data:`INTERVAL` apart (the first piece of text at once). When the run ends the
area is emptied, and the returned :class:`~flownb.RunResult` shows as it always does: a saved
notebook holds the usual static outputs, no widget state.

Whether a front end is there (``FLOWNB_LIVE=auto``, the default): an IPython kernel a Jupyter
server started for a notebook (JupyterLab, Notebook 7: ipykernel then sets ``__session__``) or
VS Code's (``__vsc_ipynb_file__``), as the live results view of batches decides. nbconvert,
nbval, papermill, plain IPython and scripts get no live area. ``FLOWNB_LIVE=1`` shows it in any
kernel, ``0`` never.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ..runtime.events import StreamEvent
from ..show.escape import html_text, no_math, term_text
from ..show.fallback import _in_kernel, in_front_end

if TYPE_CHECKING:
    from ..core.flow import FlowCore
    from ..runtime.result import RunResult

__all__ = ["INTERVAL", "LiveText", "in_front_end", "live_run", "wanted"]

# Seconds between two updates of the live area: a few a second look live, and a long answer
# streamed token by token does not send thousands of messages to the browser.
INTERVAL = 0.2


def wanted(mode: str) -> bool:
    """Return whether a run should show a live area, for ``FLOWNB_LIVE`` ``mode`` (``auto``,
    ``on`` or ``off``, as :func:`flownb.config.settings.live_view_mode` gives it)."""
    if mode == "off":
        return False
    if mode == "on":
        return _in_kernel()
    return in_front_end()


def render(texts: Mapping[str, str], images: Mapping[str, str], done: bool = False) -> str:
    """Return the live area's HTML: each output's text so far (a cursor while it grows) and
    the images ready."""
    parts = []
    for name, text in texts.items():
        cursor = "" if done else "▌"
        parts.append(
            f'<div class="flownb-live-output"><b>{html_text(name)}</b>'
            f'<pre style="white-space:pre-wrap;margin:0.2em 0 0.6em 0">'
            f"{html_text(text)}{cursor}</pre></div>"
        )
    for name, url in images.items():
        parts.append(
            f'<div class="flownb-live-output"><b>{html_text(name)}</b>'
            f"<div>image ready: {html_text(url)}</div></div>"
        )
    # The text as the model wrote it: escaped, and in an element math typesetters skip.
    return no_math("".join(parts), css="flownb-live")


class LiveText:
    """Gathers a run's events and shows them through ``show(html, plain)``, throttled.

    ``show`` is called for the first text at once, then at most every ``interval`` seconds
    (and by :meth:`flush`).
    """

    def __init__(self, show: Callable[[str, str], None], interval: float = INTERVAL) -> None:
        self.show = show
        self.interval = interval
        self.texts: dict[str, str] = {}
        self.images: dict[str, str] = {}
        self.updates = 0  # how many times show() was called
        self._shown_at: float | None = None
        self._pending = False

    def add(self, event: StreamEvent) -> None:
        """Take one event; show the area if it is time to."""
        name = event.output
        if event.kind == "text":
            self.texts[name] = self.texts.get(name, "") + event.delta
        elif event.kind == "restart":
            self.texts[name] = ""
        elif event.url is not None:
            self.images[name] = event.url
        self._pending = True
        now = time.monotonic()
        if self._shown_at is None or now - self._shown_at >= self.interval:
            self.flush(now)

    def flush(self, now: float | None = None) -> None:
        """Show what arrived since the last update, if anything."""
        if not self._pending:
            return
        self._pending = False
        self._shown_at = time.monotonic() if now is None else now
        self.updates += 1
        plain = term_text("\n\n".join(f"{name}: {text}" for name, text in self.texts.items()))
        self.show(render(self.texts, self.images), plain)


def consume(items: Iterable[Any], view: LiveText) -> RunResult:
    """Feed ``items`` (a flow's stream) to ``view``; return the result that ends them.

    Raises:
        What the stream raises (the run's error).
    """
    result = None
    for item in items:
        if isinstance(item, StreamEvent):
            view.add(item)
        else:
            result = item
    if result is None:  # pragma: no cover - every stream ends with its result
        raise RuntimeError("the stream ended without a result")
    return result


# The live area of the cell running now: (the cell's execution count, its display handle). One
# area per cell, reused by every run the cell makes (a loop of runs leaves one empty output in
# the saved notebook, not one per run).
_cell_area: tuple[int, Any] | None = None


def live_run(flow: FlowCore, values: Mapping[str, str]) -> RunResult:
    """Run ``flow`` once on validated ``values`` with a live area below the cell (see the
    module docstring); return the result, as ``flow.run`` does.

    Raises:
        What ``flow.run`` raises; the live area is emptied either way.
    """
    global _cell_area
    from IPython import get_ipython
    from IPython.display import display

    shell = get_ipython()
    cell = getattr(shell, "execution_count", 0)
    handle: Any = _cell_area[1] if _cell_area is not None and _cell_area[0] == cell else None
    used = False

    def show(markup: str, plain: str) -> None:
        nonlocal handle, used
        global _cell_area
        bundle = {"text/html": markup, "text/plain": plain}
        used = True
        if handle is None:
            handle = display(bundle, raw=True, display_id=True)
            _cell_area = (cell, handle)
        else:
            handle.update(bundle, raw=True)

    try:
        return consume(flow.stream(values), LiveText(show))
    finally:
        if used:
            # Emptied, not left behind: the result's own display follows, as without a stream.
            handle.update({}, raw=True)
