"""Python's cycle collector paused around bulk steps.

A bulk step (a chunk of cached rows answered at once, a batch's request lines or answers) makes
tens of thousands of objects that live on and hold no cycles. While they are made, the collector
would run its full collections, each scanning the whole heap (every module's objects and the
results made so far) to free nothing: the more rows a run keeps, the longer each one, so a
100,000-row cached re-run paid five of them and a third more time a row than a 10,000-row one.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

__all__ = ["paused"]


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
