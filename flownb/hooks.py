"""The doors from the flow classes to the features built on them.

The flow classes (:mod:`flownb.flow`, and the remote flow in :mod:`flownb.client`) sit below the
features that use a flow: running over a pandas or Dask DataFrame (:mod:`flownb.frame`,
:mod:`flownb.scale.dask`), previewing (:mod:`flownb.preview`), the notebook form
(:mod:`flownb.notebook.widgets`), the notebook's live results view
(:mod:`flownb.notebook.live`, which batches and evaluations open instead of a progress bar).
A flow's methods that open one of these (``run_dataframe``, ``preview``, ``form``) call the
function registered here under that name, with the flow first;
``import flownb`` registers them (:mod:`flownb.wiring`). So every import points down:
the features import the flows, never the reverse.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["HOOKS", "Hooks"]


class Hooks:
    """Named functions that take a flow first, registered from above the flow classes."""

    def __init__(self) -> None:
        self._functions: dict[str, Callable[..., Any]] = {}

    def register(self, name: str, function: Callable[..., Any]) -> None:
        """Make ``function`` the one the flows' ``name`` door calls (replacing any before)."""
        self._functions[name] = function

    def __getitem__(self, name: str) -> Callable[..., Any]:
        """Return the function registered under ``name``.

        Raises:
            LookupError: nothing is registered under ``name`` (flownb was not imported whole).
        """
        try:
            return self._functions[name]
        except KeyError:
            raise LookupError(f"no flow feature {name!r} is registered; import flownb") from None


HOOKS = Hooks()
