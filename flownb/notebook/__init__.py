"""Jupyter integration: ``%load_ext flownb`` magics, widget forms and DataFrame thumbnails.

Loading the extension registers the ``%flow`` / ``%%flow`` magics, the ``df.flownb`` pandas
accessor, and an HTML view for DataFrames that hold image URLs (thumbnails instead of long
URLs) or are longer than a page (one page of rows, and how to see the others), and a text view
of DataFrames whose image cells are described (size, format, digest) rather than given as the
``file://`` paths of this machine (see :mod:`flownb.show.frame_views`, which also registers the
views on their own when flownb hands back a frame in a notebook). Unloading removes the magics
and both views.
"""

from __future__ import annotations

from typing import Any

__all__ = ["load_ipython_extension", "unload_ipython_extension"]

_state: dict[int, Any] = {}  # IPython shell id -> its FlowMagics


def load_ipython_extension(ipython: Any) -> None:
    """Register the ``%flow`` magics and the DataFrame views (``%load_ext flownb``)."""
    from ..show import frame_views
    from . import accessor  # noqa: F401  (registers df.flownb)
    from .magics import FlowMagics

    magics = FlowMagics(ipython)
    ipython.register_magics(magics)
    frame_views.register(ipython)
    _state[id(ipython)] = magics


def unload_ipython_extension(ipython: Any) -> None:
    """Remove what :func:`load_ipython_extension` registered (``%unload_ext flownb``)."""
    from ..show import frame_views

    frame_views.unregister(ipython)
    magics = _state.pop(id(ipython), None)
    if magics is None:
        return
    for kind in ("line", "cell"):
        table = ipython.magics_manager.magics[kind]
        if "flow" in table and getattr(table["flow"], "__self__", None) is magics:
            del table["flow"]
