"""Jupyter integration: ``%load_ext flownb`` magics, widget forms and DataFrame thumbnails.

Loading the extension registers the ``%flow`` / ``%%flow`` magics, the ``df.flownb`` pandas
accessor, and an HTML view for DataFrames that hold image URLs (thumbnails instead of long
URLs) or are longer than a page (one page of rows, and how to see the others), and a text view
of DataFrames whose image cells are described (size, format, digest) rather than given as the
``file://`` paths of this machine; a polars frame's own text and HTML views describe its image
cells the same way (:mod:`flownb.views.polars_frame`; polars is not imported to register them).
Unloading removes the magics and these views.
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["load_ipython_extension", "unload_ipython_extension"]

_state: dict[int, Any] = {}
# Where polars' DataFrame class is defined, for views registered without importing polars.
POLARS_FRAME = ("polars.dataframe.frame", "DataFrame")


def _frame_html(df: Any) -> str | None:
    """Return the HTML of ``df``: flownb's view (thumbnails for image columns; one page of a
    long frame, with how to see the others; text shown as written) when a flownb run made it,
    it has image columns or more rows than a page; pandas' own view with each ``$`` shown as
    written for the other frames flownb hands back (an evaluation's results, the run log); else
    pandas' own."""
    from ..show.display import (
        FLOWNB_FRAME_ATTR,
        IMAGE_COLUMNS_ATTR,
        FrameView,
        frame_html,
        image_columns,
    )

    try:
        columns = image_columns(df)
        view = FrameView(df, columns)
        # A frame a flownb run made holds model text: always flownb's view, which shows it as
        # written (pandas' escapes markup, but its "$" would still be typeset as math).
        if columns or view.pages > 1 or IMAGE_COLUMNS_ATTR in df.attrs:
            return view._repr_html_()
        if df.attrs.get(FLOWNB_FRAME_ATTR):
            return frame_html(df)
    except Exception:  # a frame shape we do not handle: pandas' own view, never a broken cell
        pass
    return df._repr_html_()


def _frame_text(df: Any, p: Any, cycle: bool) -> None:
    """Write the plain text of ``df`` (IPython's pretty-printer protocol): pandas' own, with
    image cells described instead of their ``file://`` paths (a saved notebook keeps this text)."""
    from ..show.display import frame_text

    try:
        p.text(frame_text(df))
    except Exception:  # a frame shape we do not handle: pandas' own text, never a broken cell
        p.text(repr(df))


def load_ipython_extension(ipython: Any) -> None:
    """Register the ``%flow`` magics and the DataFrame thumbnail view (``%load_ext flownb``)."""
    import pandas as pd

    from . import accessor  # noqa: F401  (registers df.flownb)
    from .magics import FlowMagics

    magics = FlowMagics(ipython)
    ipython.register_magics(magics)
    html = ipython.display_formatter.formatters["text/html"]
    plain = ipython.display_formatter.formatters["text/plain"]
    previous = html.type_printers.get(pd.DataFrame)
    previous_plain = plain.type_printers.get(pd.DataFrame)
    html.for_type(pd.DataFrame, _frame_html)
    plain.for_type(pd.DataFrame, _frame_text)
    from ..views.polars_frame import polars_html, polars_text

    html.for_type_by_name(*POLARS_FRAME, polars_html)
    plain.for_type_by_name(*POLARS_FRAME, polars_text)
    _state[id(ipython)] = (magics, previous, previous_plain)


def unload_ipython_extension(ipython: Any) -> None:
    """Remove what :func:`load_ipython_extension` registered (``%unload_ext flownb``)."""
    import pandas as pd

    state = _state.pop(id(ipython), None)
    if state is None:
        return
    magics, previous, previous_plain = state
    for kind in ("line", "cell"):
        table = ipython.magics_manager.magics[kind]
        if "flow" in table and getattr(table["flow"], "__self__", None) is magics:
            del table["flow"]
    for kind, before in (("text/html", previous), ("text/plain", previous_plain)):
        formatter = ipython.display_formatter.formatters[kind]
        formatter.type_printers.pop(pd.DataFrame, None)
        if before is not None:
            formatter.for_type(pd.DataFrame, before)
        _forget_polars_view(formatter)


def _forget_polars_view(formatter: Any) -> None:
    """Remove flownb's polars view from ``formatter``: still deferred (polars not imported), or
    already bound to polars' class."""
    formatter.deferred_printers.pop(POLARS_FRAME, None)
    module = sys.modules.get(POLARS_FRAME[0])
    frame = getattr(module, POLARS_FRAME[1], None)
    if frame is not None:
        formatter.type_printers.pop(frame, None)
