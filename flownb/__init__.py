"""flownb: LLM flows as first-class citizens of Jupyter.

Load a flow exported from the web tool, run it once, over a batch or a DataFrame, from a widget
form or a ``%flow`` magic, locally (offline by default) or against a flow service.
"""

from __future__ import annotations

from . import scorers
from . import wiring as _wiring  # noqa: F401  (plugs the features into the flows' hooks)
from ._version import __version__
from .config.endpoints import Endpoint
from .errors import (
    ApiError,
    AuthError,
    BatchError,
    ConfigError,
    FlowFileError,
    FlownbError,
    FlowNotFound,
    InputError,
    ProviderError,
    ProviderTimeout,
    RateLimited,
    ServiceTimeout,
    ServiceUnavailable,
)
from .evaluation import EvalReport, evaluate, load_report, reports
from .flows.client import Client, RemoteFlow
from .flows.local import BaseFlow, LocalFlow, load_flow
from .frames.batch_api import list_batches as batches
from .runtime.pipeline import Outcomes
from .runtime.result import RunResult
from .runtime.runlog import runs
from .show.display import display_frame

__all__ = [
    "ApiError",
    "AuthError",
    "BaseFlow",
    "BatchError",
    "Client",
    "ConfigError",
    "Endpoint",
    "EvalReport",
    "FlowFileError",
    "FlowNotFound",
    "FlownbError",
    "InputError",
    "LocalFlow",
    "Outcomes",
    "ProviderError",
    "ProviderTimeout",
    "RateLimited",
    "RemoteFlow",
    "RunResult",
    "ServiceTimeout",
    "ServiceUnavailable",
    "__version__",
    "batches",
    "display_frame",
    "evaluate",
    "load_flow",
    "load_report",
    "reports",
    "runs",
    "scorers",
]


def __dir__() -> list[str]:
    """Return the public API, ``__all__``: what ``dir(flownb)`` and tab completion offer (not
    the submodules and helpers that importing it brings along)."""
    return sorted(__all__)


def load_ipython_extension(ipython: object) -> None:
    """``%load_ext flownb``: register the ``%flow`` magics (see :mod:`flownb.notebook`)."""
    from .notebook import load_ipython_extension as load

    load(ipython)


def unload_ipython_extension(ipython: object) -> None:
    """``%unload_ext flownb``: remove what loading registered."""
    from .notebook import unload_ipython_extension as unload

    unload(ipython)
