"""Plugs the features into the flows' hooks (see :mod:`flownb.hooks`); ``import flownb`` runs it.

The flow classes sit below these features and never import them; this module, above both,
registers each feature under the name of the flow method that opens it.
"""

from __future__ import annotations

from typing import Any

from . import frame, preview
from .batching import run as batching
from .flow import BaseFlow
from .hooks import HOOKS
from .scale import dask

__all__: list[str] = []


def _form(flow: BaseFlow) -> Any:
    from .notebook.widgets import FlowForm  # ipywidgets is imported when a form is asked for

    return FlowForm(flow)


def _live_wanted(mode: str) -> bool:
    from .notebook.live_text import wanted  # imported only inside a kernel

    return wanted(mode)


def _live_run(flow: BaseFlow, values: Any) -> Any:
    from .notebook.live_text import live_run

    return live_run(flow, values)


HOOKS.register("run_dataframe", frame.run_dataframe)
HOOKS.register("run_dask_dataframe", dask.run_dataframe)
HOOKS.register("run_dataframe_batched", batching.run_dataframe_batched)
HOOKS.register("preview", preview.preview_data)
HOOKS.register("form", _form)
HOOKS.register("live_wanted", _live_wanted)
HOOKS.register("live_run", _live_run)
