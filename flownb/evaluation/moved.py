"""Module paths of ``flownb.evaluation`` that moved when it was cut into folders: each old path
is a module whose names are looked up, on first use, in the module that holds them now, with a
:class:`DeprecationWarning` naming the new path (so imports and pickles written against
flownb 0.1 keep working)."""

from __future__ import annotations

import warnings
from types import ModuleType
from typing import Any


def forwarded(old: str, new: ModuleType, name: str) -> Any:
    """Return ``new``'s attribute ``name``, warning that ``old`` moved to ``new``.

    Raises:
        AttributeError: ``new`` has no such name (as a plain module would).
    """
    if name.startswith("__"):  # the import machinery's own probes: no warning, no forwarding
        raise AttributeError(f"module {old!r} has no attribute {name!r}")
    value = getattr(new, name)
    warnings.warn(
        f"{old} moved to {new.__name__}; import {name} from there (or from flownb)",
        DeprecationWarning,
        stacklevel=3,
    )
    return value
