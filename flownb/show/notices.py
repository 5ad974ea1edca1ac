"""Warnings that point at the user's line, not at flownb's own files.

A ``stacklevel`` counted by hand breaks whenever a call path gains or loses a frame, and a
warning raised from deep in flownb then names ``flownb/frames/run.py`` instead of the cell or script
line that called flownb. :func:`warn` walks out of the package instead: the warning is attributed
to the first frame outside flownb (Python 3.12's ``skip_file_prefixes``, or the same walk by hand
on 3.11).

Messages carry no ``flownb:`` prefix: the places that show warnings plainly (the CLI, the
magics) add it once.
"""

from __future__ import annotations

import inspect
import os
import sys
import warnings
from types import FrameType

from .escape import term_text

__all__ = ["PACKAGE_DIR", "warn"]

# The package's folder as its modules' code objects name it (the same import path as __file__):
# flownb/, two levels up from flownb/show/notices.py, so every layer's frames are skipped.
PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def warn(message: str, category: type[Warning] = UserWarning) -> None:
    """Issue ``message`` as a warning attributed to the nearest caller outside flownb.

    When every frame is flownb's (a worker thread), it is attributed past the top of the stack,
    as Python does for a too-large ``stacklevel`` (``sys:1``). Control characters in
    ``message`` (a model's answer quoted) are shown as symbols, never sent to a terminal.
    """
    message = term_text(message)
    if sys.version_info >= (3, 12):
        warnings.warn(message, category, stacklevel=2, skip_file_prefixes=(PACKAGE_DIR,))
        return
    level = 2  # 1 is this function; 2 its caller
    here = inspect.currentframe()
    frame: FrameType | None = here.f_back if here is not None else None
    while frame is not None and frame.f_code.co_filename.startswith(PACKAGE_DIR):
        frame = frame.f_back
        level += 1
    warnings.warn(message, category, stacklevel=level)
