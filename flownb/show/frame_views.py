"""A notebook's views of DataFrames: flownb's HTML (thumbnails for image columns, one page of a
long frame, model text shown as written) and a text view whose image cells are described (size,
format, digest) instead of given as ``file://`` paths of this machine; a polars frame's own views,
its image cells described the same way (:mod:`flownb.show.polars_frame`; registered by name, so
polars is not imported to register them).

``%load_ext flownb`` registers both with IPython's display formatters; so does the first frame
flownb hands back in a notebook (a front end that shows HTML), since a results frame shown with
pandas' own view typesets ``$5 and $10`` as math and saves the author's machine paths in the
notebook's text. ``%unload_ext flownb`` removes them, and they are not registered on their own
again in that session.
"""

from __future__ import annotations

import sys
from typing import Any

from .display import FLOWNB_FRAME_ATTR, IMAGE_COLUMNS_ATTR, FrameView, frame_text, image_columns
from .display import frame_html as _pandas_html_as_written
from .polars_frame import polars_html, polars_text

__all__ = [
    "frame_html",
    "frame_text_view",
    "in_notebook",
    "mark_frame",
    "register",
    "unregister",
]

# Where polars' DataFrame class is defined: its views are registered without importing polars.
POLARS_FRAME = ("polars.dataframe.frame", "DataFrame")
# IPython shell id -> the DataFrame printers (HTML, text) registered before ours.
_registered: dict[int, tuple[Any, Any]] = {}
# Shells whose user unloaded the extension: no views registered on their own again.
_declined: set[int] = set()


def frame_html(df: Any) -> str | None:
    """Return the HTML of ``df``: flownb's view (thumbnails for image columns; one page of a
    long frame, with how to see the others; text shown as written) when a flownb run made it,
    it has image columns or more rows than a page; pandas' own view with each ``$`` shown as
    written for the other frames flownb hands back (an evaluation's results, the run log); else
    pandas' own."""
    try:
        columns = image_columns(df)
        view = FrameView(df, columns)
        # A frame a flownb run made holds model text: always flownb's view, which shows it as
        # written (pandas' escapes markup, but its "$" would still be typeset as math).
        if columns or view.pages > 1 or IMAGE_COLUMNS_ATTR in df.attrs:
            return view._repr_html_()
        if df.attrs.get(FLOWNB_FRAME_ATTR):
            return _pandas_html_as_written(df)
    except Exception:  # a frame shape we do not handle: pandas' own view, never a broken cell
        pass
    return df._repr_html_()


def frame_text_view(df: Any, p: Any, cycle: bool) -> None:
    """Write the plain text of ``df`` (IPython's pretty-printer protocol): pandas' own, with
    image cells described instead of their ``file://`` paths (a saved notebook keeps this text)."""
    try:
        p.text(frame_text(df))
    except Exception:  # a frame shape we do not handle: pandas' own text, never a broken cell
        p.text(repr(df))


def register(shell: Any) -> None:
    """Show DataFrames with :func:`frame_html` and :func:`frame_text_view` in ``shell`` (an
    IPython shell); a second call changes nothing."""
    import pandas as pd

    _declined.discard(id(shell))
    if id(shell) in _registered:
        return
    html = shell.display_formatter.formatters["text/html"]
    plain = shell.display_formatter.formatters["text/plain"]
    _registered[id(shell)] = (
        html.type_printers.get(pd.DataFrame),
        plain.type_printers.get(pd.DataFrame),
    )
    html.for_type(pd.DataFrame, frame_html)
    plain.for_type(pd.DataFrame, frame_text_view)
    html.for_type_by_name(*POLARS_FRAME, polars_html)
    plain.for_type_by_name(*POLARS_FRAME, polars_text)


def unregister(shell: Any) -> None:
    """Put back the DataFrame printers ``shell`` had before :func:`register`, and register none
    on their own again in it (the user unloaded the extension)."""
    import pandas as pd

    _declined.add(id(shell))
    before = _registered.pop(id(shell), None)
    if before is None:
        return
    for kind, printer in zip(("text/html", "text/plain"), before, strict=True):
        formatter = shell.display_formatter.formatters[kind]
        formatter.type_printers.pop(pd.DataFrame, None)
        if printer is not None:
            formatter.for_type(pd.DataFrame, printer)
        _forget_polars_view(formatter)


def _forget_polars_view(formatter: Any) -> None:
    """Remove the polars view from ``formatter``: still registered by name (polars not
    imported), or already bound to polars' class."""
    formatter.deferred_printers.pop(POLARS_FRAME, None)
    frame = getattr(sys.modules.get(POLARS_FRAME[0]), POLARS_FRAME[1], None)
    if frame is not None:
        formatter.type_printers.pop(frame, None)


def in_notebook() -> None:
    """Register the views in the running IPython shell when it shows HTML (a notebook's kernel,
    not a terminal), unless they are registered already or the user unloaded them. Called as
    flownb hands back a frame; costs a dictionary lookup outside IPython."""
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return
    shell = ipython.get_ipython()
    if shell is None or id(shell) in _registered or id(shell) in _declined:
        return
    formatters = getattr(getattr(shell, "display_formatter", None), "formatters", None)
    if not formatters or not getattr(formatters.get("text/html"), "enabled", False):
        return
    register(shell)


def mark_frame(df: Any) -> Any:
    """Return ``df`` (the same object) marked as a frame flownb handed back
    (:data:`~flownb.show.display.FLOWNB_FRAME_ATTR`), its views registered in a notebook
    (:func:`in_notebook`)."""
    df.attrs[FLOWNB_FRAME_ATTR] = True
    in_notebook()
    return df
