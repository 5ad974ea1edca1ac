"""The ``flownb`` command line: ``main`` (in :mod:`flownb.cli.main`) is the console script.

``main`` is loaded on first use, so the notebook can import what it shares with the command
line (:mod:`flownb.cli.inputs`) without loading click and every command.
"""

from __future__ import annotations

from typing import Any

__all__ = ["main"]


def __getattr__(name: str) -> Any:
    """Return ``main`` from :mod:`flownb.cli.main` (imported now).

    Raises:
        AttributeError: any other name.
    """
    if name == "main":
        from .main import main

        return main
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
