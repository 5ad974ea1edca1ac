"""Widgets that read well without a kernel: every widget flownb shows carries a static copy.

A widget is drawn by scripts of a live front end; GitHub, nbviewer and an offline
``jupyter nbconvert --to html`` page have none of them (and nbconvert ranks the widget view
first, so the page shows an empty box where the widget was). :class:`StaticFallback` gives a
widget's display a ``text/html`` and ``text/plain`` copy of what it shows now, and, where no
front end is there to draw the widget (nbclient, nbconvert ``--execute``, papermill, nbval: see
:func:`in_front_end`), sends only that copy, so the saved notebook reads well everywhere.
"""

from __future__ import annotations

import sys
from typing import Any

from .escape import no_math, term_text

__all__ = ["StaticFallback", "in_front_end"]


def _in_kernel() -> bool:
    kernelbase = sys.modules.get("ipykernel.kernelbase")
    return kernelbase is not None and kernelbase.Kernel.initialized()


def in_front_end() -> bool:
    """Return whether this process is an IPython kernel a notebook front end shows: started
    by a Jupyter server for a notebook (ipykernel sets ``__session__`` from the server's
    ``JPY_SESSION_NAME``) or by VS Code (``__vsc_ipynb_file__``); not by nbclient."""
    if not _in_kernel():
        return False
    from IPython import get_ipython

    names = getattr(get_ipython(), "user_ns", {})
    return "__session__" in names or "__vsc_ipynb_file__" in names


class StaticFallback:
    """Mixin for an ipywidgets widget (listed before the widget class): its display bundle
    carries :meth:`static_html` and :meth:`static_text` beside the widget view, or only them
    where no front end would draw the widget."""

    def static_html(self) -> str:
        """Return what the widget shows now, as HTML (flownb's own; what came from data
        escaped by the subclass)."""
        raise NotImplementedError

    def static_text(self) -> str:
        """Return what the widget shows now, as plain text."""
        raise NotImplementedError

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        static = {
            "text/plain": term_text(self.static_text()),
            "text/html": no_math(self.static_html(), css="flownb-static"),
        }
        if not in_front_end():
            return static
        data: dict[str, Any] = super()._repr_mimebundle_(**kwargs)  # type: ignore[misc]
        data.update(static)
        return data
