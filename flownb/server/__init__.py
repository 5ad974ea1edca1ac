"""``flownb serve``: the flow execution service contract over a folder of flow files.

Importing this package is cheap (the CLI imports its commands on every start); the FastAPI app
is imported on first use of :func:`create_app` / :class:`ServerConfig`.
"""

from __future__ import annotations

from typing import Any

__all__ = ["KeyStore", "ServerConfig", "create_app"]


def __getattr__(name: str) -> Any:
    if name in ("ServerConfig", "create_app"):
        from . import app

        return getattr(app, name)
    if name == "KeyStore":
        from .keys import KeyStore

        return KeyStore
    raise AttributeError(name)
