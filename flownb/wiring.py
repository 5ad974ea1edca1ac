"""Plugs the features into the flows' hooks (see :mod:`flownb.runtime.hooks`); ``import flownb``
runs it.

The flow classes sit below these features and never import them; this module, above both,
registers each feature under the name of the flow method that opens it.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from .runtime.hooks import HOOKS
from .show.display import read_media_with

if TYPE_CHECKING:
    from .flows.base import BaseFlow

__all__: list[str] = []


def _read_home_media(path: str) -> bytes | None:
    # The media store (and what it imports) is loaded when an image is first read back, not by
    # `import flownb`; once loaded it plugs its own reader in.
    from .infra.media import read_home_media

    return read_home_media(path)


read_media_with(_read_home_media)  # how the display reads a file:// image back


def _form(flow: BaseFlow) -> Any:
    from .notebook.widgets import FlowForm  # ipywidgets is imported when a form is asked for

    return FlowForm(flow)


def _in_kernel() -> bool:
    # The live view lives in a Jupyter kernel; elsewhere (scripts, a terminal IPython, the CLI)
    # no notebook code is even imported, so nothing changes there.
    return "ipykernel.zmqshell" in sys.modules


def _live_rows(flow: BaseFlow, batch: Any) -> Any:
    if not _in_kernel():
        return None
    from .notebook import live

    return live.rows_view(flow.name, batch, flow.outputs)


def _live_evaluate(variants: Any, data: Any, scorers: Any, total: int, repeats: int = 1) -> Any:
    if not _in_kernel():
        return None
    from .notebook import live

    return live.eval_view(variants, data, scorers, total, repeats)


class _NoSlot:
    def show(self, frame: Any) -> None:
        return None


def _live_slot(labels: Any) -> Any:
    if not _in_kernel():
        return _NoSlot()
    from .notebook import live

    return live.open_slot(labels)


def _live_wanted(mode: str) -> bool:
    from .notebook.live_text import wanted  # imported only inside a kernel

    return wanted(mode)


def _live_run(flow: BaseFlow, values: Any) -> Any:
    from .notebook.live_text import live_run

    return live_run(flow, values)


# Each feature's module (pandas, Dask, the batch API) is imported when its door is first
# opened, not by ``import flownb``: a script that never runs a frame never imports pandas.


def _run_dataframe(*args: Any, **kwargs: Any) -> Any:
    from .frames.run import run_dataframe

    return run_dataframe(*args, **kwargs)


def _run_dask_dataframe(*args: Any, **kwargs: Any) -> Any:
    from .frames.dask.run import run_dataframe

    return run_dataframe(*args, **kwargs)


def _run_dataframe_batched(*args: Any, **kwargs: Any) -> Any:
    from .frames.batch_api.run import run_dataframe_batched
    from .frames.kinds import takes_any_frame

    # A polars frame through the batch API comes back as polars, as from the plain run.
    return takes_any_frame(run_dataframe_batched)(*args, **kwargs)


def _preview(*args: Any, **kwargs: Any) -> Any:
    from .frames.preview import preview_data

    return preview_data(*args, **kwargs)


HOOKS.register("run_dataframe", _run_dataframe)
HOOKS.register("run_dask_dataframe", _run_dask_dataframe)
HOOKS.register("run_dataframe_batched", _run_dataframe_batched)
HOOKS.register("preview", _preview)
HOOKS.register("form", _form)
# The notebook's live results view (flownb.notebook.live): a progress bar's replacement, None
# where it is not used; the slot lets run_dataframe show its returned frame in it at the end.
HOOKS.register("live_rows", _live_rows)
HOOKS.register("live_evaluate", _live_evaluate)
HOOKS.register("live_slot", _live_slot)


HOOKS.register("live_wanted", _live_wanted)
HOOKS.register("live_run", _live_run)
