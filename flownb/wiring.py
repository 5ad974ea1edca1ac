"""Plugs the features into the flows' hooks (see :mod:`flownb.hooks`); ``import flownb`` runs it.

The flow classes sit below these features and never import them; this module, above both,
registers each feature under the name of the flow method that opens it.
"""

from __future__ import annotations

from typing import Any

from . import frame, preview
from .batching import run as batching
from .flow import BaseFlow
from .frame_kinds import takes_any_frame
from .hooks import HOOKS
from .scale import dask

__all__: list[str] = []


def _form(flow: BaseFlow) -> Any:
    from .notebook.widgets import FlowForm  # ipywidgets is imported when a form is asked for

    return FlowForm(flow)


HOOKS.register("run_dataframe", frame.run_dataframe)
HOOKS.register("run_dask_dataframe", dask.run_dataframe)
# A polars frame through the batch API comes back as polars, as from the plain run.
HOOKS.register("run_dataframe_batched", takes_any_frame(batching.run_dataframe_batched))
HOOKS.register("preview", preview.preview_data)
HOOKS.register("form", _form)
