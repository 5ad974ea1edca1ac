"""A provider's warm-up: the modules its calls will import (its HTTP client, tenacity for the
retries) and the price table, imported in a background thread when the provider is made.

A flow's first run would otherwise import them while every call waits: the HTTP client before
the first request leaves, and the price table before the first answer is priced, which holds
that answer's row, and with it one of the run's workers, until the table is in (an HTTP client
and the price table take a good part of a second on a busy machine, more where Python cannot
keep compiled bytecode). :func:`wait_warm_up` lets a flow being loaded finish them, so that its
first run starts as fast as the ones after it. Providers that call nothing over the network
(offline) name no modules and warm nothing.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import threading
import time
from collections.abc import Sequence

from ..config import pricing

__all__ = ["wait_warm_up", "warm_up"]

_lock = threading.Lock()
_warming: set[str] = set()  # modules (and "price table") some warm-up thread took on
_threads: list[threading.Thread] = []  # the warm-up threads that may still be running


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
        thread = threading.Thread(
            target=_run, args=(todo, table), name="flownb-warm-up", daemon=True
        )
        _threads[:] = [t for t in _threads if t.is_alive()]
        _threads.append(thread)
    thread.start()
    return thread


def wait_warm_up(timeout: float = 30.0) -> bool:
    """Wait for every warm-up started so far to end, ``timeout`` seconds at most in all.
    Returns whether they all ended (False: the rest goes on in the background, and whatever
    needs a module it is importing waits for that module alone)."""
    deadline = time.monotonic() + timeout
    with _lock:
        threads = list(_threads)
    for thread in threads:
        if thread is not threading.current_thread():
            thread.join(max(0.0, deadline - time.monotonic()))
    return not any(t.is_alive() for t in threads)


def _run(modules: list[str], table: bool) -> None:
    # A failure is reported where the module is used (or where a call is priced), not here.
    for name in modules:
        with contextlib.suppress(Exception):
            importlib.import_module(name)
    if table:
        with contextlib.suppress(Exception):
            pricing.load_table()
