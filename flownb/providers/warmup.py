"""A provider's warm-up: the modules its calls will import (its HTTP client, tenacity for the
retries) and the price table, imported in a background thread when the provider is made.

A flow's first run would otherwise import them on its event loop while every call waits (an
HTTP client and the price table take a good part of a second on a busy machine); imported
beside the loading of the flow and the reading of its data, they are usually ready by the
first call, and when they are not, the call waits only for what is left. Providers that call
nothing over the network (offline) name no modules and warm nothing.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import threading
from collections.abc import Sequence

from ..config import pricing

__all__ = ["warm_up"]

_lock = threading.Lock()
_warming: set[str] = set()  # modules (and "price table") some warm-up thread took on


def warm_up(modules: Sequence[str], *, table: bool) -> threading.Thread | None:
    """Import ``modules`` (and the price table when ``table``) in a daemon thread, skipping what
    is imported already or being imported by an earlier warm-up. Returns the thread, or None
    when there was nothing to do. Never raises: a module that fails to import here fails again,
    with its message, where it is used."""
    with _lock:
        todo = [m for m in modules if m not in sys.modules and m not in _warming]
        table = table and not pricing.table_loaded() and "price table" not in _warming
        _warming.update(todo)
        if table:
            _warming.add("price table")
    if not todo and not table:
        return None
    thread = threading.Thread(target=_run, args=(todo, table), name="flownb-warm-up", daemon=True)
    thread.start()
    return thread


def _run(modules: list[str], table: bool) -> None:
    # A failure is reported where the module is used (or where a call is priced), not here.
    for name in modules:
        with contextlib.suppress(Exception):
            importlib.import_module(name)
    if table:
        with contextlib.suppress(Exception):
            pricing.load_table()
