"""flownb: LLM flows as first-class citizens of Jupyter.

Load a flow exported from the web tool, run it once, over a batch or a DataFrame, from a widget
form or a ``%flow`` magic, locally (offline by default) or against a flow service.
"""

from __future__ import annotations

from .errors import (
    ApiError,
    AuthError,
    BatchError,
    ConfigError,
    FlownbError,
    FlowFileError,
    FlowNotFound,
    InputError,
    ProviderError,
    ProviderTimeout,
    RateLimited,
)
from .flow import BaseFlow, LocalFlow, load_flow
from .result import RunResult

__version__ = "0.1.0"

__all__ = [
    "ApiError",
    "AuthError",
    "BaseFlow",
    "BatchError",
    "ConfigError",
    "FlowFileError",
    "FlowNotFound",
    "FlownbError",
    "InputError",
    "LocalFlow",
    "ProviderError",
    "ProviderTimeout",
    "RateLimited",
    "RunResult",
    "__version__",
    "load_flow",
]
