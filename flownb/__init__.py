"""flownb: LLM flows as first-class citizens of Jupyter.

Load a flow exported from the web tool, run it once, over a batch or a DataFrame, from a widget
form or a ``%flow`` magic, locally (offline by default) or against a flow service.

``import flownb`` is cheap: each public name below is imported from its module the first time it
is used (module ``__getattr__``), so a script that only loads a flow never imports pandas, the
HTTP clients or OpenTelemetry.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._version import __version__
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
    SpendCapReached,
)
from .show.display import read_media_with

if TYPE_CHECKING:
    from . import scorers
    from .config.endpoint_list import endpoints
    from .config.endpoints import Endpoint
    from .evaluation import EvalReport, evaluate, load_report, reports
    from .flows.client import Client, RemoteFlow
    from .flows.local import BaseFlow, LocalFlow, load_flow
    from .frames.batch_api import list_batches as batches
    from .runtime.events import StreamEvent
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
    "SpendCapReached",
    "StreamEvent",
    "__version__",
    "batches",
    "display_frame",
    "endpoints",
    "evaluate",
    "load_flow",
    "load_report",
    "reports",
    "runs",
    "scorers",
]

# Where each lazily imported public name lives: name -> (module, attribute); attribute None
# means the module itself.
_LAZY: dict[str, tuple[str, str | None]] = {
    "scorers": (".scorers", None),
    "Endpoint": (".config.endpoints", "Endpoint"),
    "endpoints": (".config.endpoint_list", "endpoints"),
    "EvalReport": (".evaluation", "EvalReport"),
    "evaluate": (".evaluation", "evaluate"),
    "load_report": (".evaluation", "load_report"),
    "reports": (".evaluation", "reports"),
    "Client": (".flows.client", "Client"),
    "RemoteFlow": (".flows.client", "RemoteFlow"),
    "BaseFlow": (".flows.local", "BaseFlow"),
    "LocalFlow": (".flows.local", "LocalFlow"),
    "load_flow": (".flows.local", "load_flow"),
    "batches": (".frames.batch_api.listing", "list_batches"),
    "Outcomes": (".runtime.pipeline", "Outcomes"),
    "RunResult": (".runtime.result", "RunResult"),
    "StreamEvent": (".runtime.events", "StreamEvent"),
    "runs": (".runtime.runlog", "runs"),
    "display_frame": (".show.display", "display_frame"),
}


def _read_home_media(path: str) -> bytes | None:
    # The media store (and what it imports) is loaded when an image is first read back, not by
    # `import flownb`; once loaded it plugs its own reader in.
    from .infra.media import read_home_media

    return read_home_media(path)


read_media_with(_read_home_media)  # how the display reads a file:// image back


def __getattr__(name: str) -> Any:
    """Return the public name ``name``, importing its module on first use (then cached here).

    Raises:
        AttributeError: ``name`` is not a public name of flownb (nor a loaded submodule).
    """
    try:
        module_name, attribute = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'flownb' has no attribute {name!r}") from None
    module = importlib.import_module(module_name, __name__)
    value = module if attribute is None else getattr(module, attribute)
    globals()[name] = value
    return value


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
