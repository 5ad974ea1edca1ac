"""Telling a folder that cannot be written from a file that is broken, in one line.

flownb keeps its state in FLOWNB_HOME (keys, the media secret and images, the run log, the call
cache). When writing there fails, the advice depends on why: a corrupt file is fixed by deleting
it, but a folder that cannot be written (read-only, or under a regular file) is not, and the
user is told to make it writable or point FLOWNB_HOME elsewhere.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import ConfigError

__all__ = ["folder_problem", "unwritable"]


def folder_problem(folder: Path) -> str | None:
    """Return why files cannot be made in ``folder`` ("it is read-only", ...), or ``None`` when
    they can (as far as this process's permissions and the file system tell)."""
    here = folder
    while not here.exists():  # the nearest folder that exists is where mkdir would start
        if here.parent == here:
            return "it does not exist"
        here = here.parent
    if not here.is_dir():
        return f"{here} is a file, not a folder"
    if not os.access(here, os.W_OK | os.X_OK):
        return "it is read-only" if here == folder else f"{here} is read-only"
    return None


def unwritable(folder: Path, exc: BaseException, what: str, *, switch: str = "") -> ConfigError:
    """Return the one-line error for failing (``exc``) to write ``what`` in ``folder``: it names
    the folder, why, and what to do (``switch``: how to do without it, when there is a way)."""
    reason = folder_problem(folder) or getattr(exc, "strerror", None) or str(exc)
    instead = f", or {switch}" if switch else ""
    return ConfigError(
        f"cannot write {what} in {folder} ({reason}); make that folder writable or set "
        f"FLOWNB_HOME to a folder you can write{instead}"
    )
