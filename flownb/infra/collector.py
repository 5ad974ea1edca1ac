"""Python's cycle collector, paused around bulk steps and spaced out during runs.

A bulk step (a chunk of cached rows answered at once, a batch's request lines or answers) makes
tens of thousands of objects that live on and hold no cycles. While they are made, the collector
would run its full collections, each scanning the whole heap (every module's objects and the
results made so far) to free nothing: the more rows a run keeps, the longer each one, so a
100,000-row cached re-run paid five of them and a third more time a row than a 10,000-row one.

A run of provider calls (:func:`young`) makes a few dozen objects a call (the request, the
HTTP client's, the answer's) that die with the call, tens of milliseconds later. Collected
every 700 allocations (Python's default), the youngest generation finds most of the calls in
flight still alive, and moves their objects on to the older generations, which then walk them
again, and the oldest the whole heap: a quarter of flownb's own CPU per call on the event loop
at concurrency 32. Every :data:`YOUNG_RUN` allocations instead, most have died by then.
"""

from __future__ import annotations

import contextlib
import gc
import os
import threading
from collections.abc import Iterator

__all__ = ["YOUNG_RUN", "paused", "young"]


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """Pause the cycle collector within the block, and resume it after as it was."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


# Allocations between two collections of the youngest generation while a run's calls are made
# (what ``flownb serve`` sets for good): a fourteenth as many collections, each walking about
# the same objects (those of the calls in flight), and cyclic garbage freed a few milliseconds
# later.
YOUNG_RUN = 10_000

# The blocks of young() open in this process (runs may overlap, on several threads), and the
# thresholds found when the first of them opened, put back when the last one ends.
_lock = threading.Lock()
_open = 0
_saved: tuple[int, int, int] | None = None
_set: tuple[int, int, int] | None = None


@contextlib.contextmanager
def young(threshold: int = YOUNG_RUN) -> Iterator[None]:
    """Collect the youngest generation at most every ``threshold`` allocations while the block
    (and any other open in the process, on any thread) runs; after the last one ends, as it was
    before the first began, unless someone else changed the thresholds meanwhile. A threshold
    set higher already (or 0: collection off) is kept."""
    global _open, _saved, _set
    with _lock:
        if _open == 0:
            current = gc.get_threshold()
            _saved, _set = current, None
            if 0 < current[0] < threshold:
                _set = (threshold, *current[1:])
                gc.set_threshold(*_set)
        _open += 1
    try:
        yield
    finally:
        with _lock:
            _open -= 1
            if _open == 0:
                if _set is not None and _saved is not None and gc.get_threshold() == _set:
                    gc.set_threshold(*_saved)
                _saved = _set = None


def _forget_runs_in_child() -> None:
    # A child forked while a run was open does not run it: its thresholds go back to what they
    # were before, and the lock (which another thread may have held) is a fresh one.
    global _lock, _open, _saved, _set
    if _open and _set is not None and _saved is not None and gc.get_threshold() == _set:
        gc.set_threshold(*_saved)
    _lock = threading.Lock()
    _open = 0
    _saved = _set = None


os.register_at_fork(after_in_child=_forget_runs_in_child)
