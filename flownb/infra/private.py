"""FLOWNB_HOME is private: its folders are made 0700 and its files 0600.

The home holds prompts, inputs and outputs (the call cache and the run log), images, provider
batch records and API keys: nothing another user of the machine should read. Folders are made
with mode 0700 and files with 0600 whatever the umask; a SQLite database is created 0600 before
SQLite opens it, because SQLite gives its journal, WAL and shared-memory files the mode of the
database file. A home made by an older flownb (0755 folders, 0644 files) is tightened the first
time this process uses it, with one notice.
"""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

from ..show.notices import warn

__all__ = ["FILE_MODE", "FOLDER_MODE", "private_dir", "private_file", "secure_home"]

FOLDER_MODE = 0o700
FILE_MODE = 0o600
_LOOSE = 0o077  # any permission for the group or others

# What flownb keeps at the top of a home (files and folders whose names start so; the SQLite
# files' -wal/-shm/-journal siblings included); only these, and what the folders among them
# hold, are tightened: a FLOWNB_HOME pointed at a folder holding other things keeps those as
# they are.
_OURS = ("cache.sqlite", "runs.sqlite", "keys", "media", "batches")

_secured: set[Path] = set()
_secured_lock = threading.Lock()


def private_dir(folder: Path, home: Path | None = None) -> None:
    """Make ``folder`` and the folders missing above it, each 0700, after tightening ``home``
    (default: ``folder`` itself) once per process (see :func:`secure_home`).

    Raises:
        OSError: a folder cannot be made (read-only, under a file): the caller names it.
    """
    missing = []
    here = folder
    while not here.exists():
        missing.append(here)
        if here.parent == here:
            break
        here = here.parent
    for made in reversed(missing):
        try:
            made.mkdir(mode=FOLDER_MODE)
        except FileExistsError:
            pass  # made by another process meanwhile (or a file: the caller's next step says)
        else:
            os.chmod(made, FOLDER_MODE)  # mkdir's mode passes through the umask
    secure_home(home if home is not None else folder)


def private_file(path: Path) -> None:
    """Create ``path`` empty with mode 0600 unless it exists; tighten it to 0600 if it does and
    others may read it (what SQLite then gives its journal and WAL files).

    Raises:
        OSError: it cannot be created.
    """
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    except FileExistsError:
        _tighten(path, FILE_MODE)
    else:
        os.close(fd)


def secure_home(home: Path) -> None:
    """Tighten a FLOWNB_HOME made by an older flownb, once per process: the home and flownb's
    folders in it to 0700, flownb's files to 0600 (symbolic links and anything else are left
    alone), with one notice naming it when anything was loose. Files it cannot change
    (another owner's) stay as they are."""
    key = home.absolute()
    with _secured_lock:
        if key in _secured:
            return
        _secured.add(key)
    if not home.is_dir():
        return
    changed = _tighten(home, FOLDER_MODE)
    try:
        entries = [e for e in os.scandir(home) if e.name.startswith(_OURS)]
    except OSError:
        entries = []
    for entry in entries:
        path = Path(entry.path)
        if entry.is_symlink():
            continue
        if not entry.is_dir():
            changed += _tighten(path, FILE_MODE)
            continue
        changed += _tighten(path, FOLDER_MODE)
        for root, folders, files in os.walk(path):
            for name in folders:
                changed += _tighten(Path(root, name), FOLDER_MODE)
            for name in files:
                changed += _tighten(Path(root, name), FILE_MODE)
    if changed:
        warn(
            f"FLOWNB_HOME {home} could be read by other users (made by an older flownb); "
            f"{changed} of its folders and files are now private (folders 0700, files 0600)"
        )


def _tighten(path: Path, mode: int) -> int:
    """Set ``path``'s mode to ``mode`` when the group or others have any permission; return 1
    when it was changed, else 0."""
    try:
        st = path.lstat()
        if stat.S_ISLNK(st.st_mode) or not st.st_mode & _LOOSE:
            return 0
        os.chmod(path, mode)
    except OSError:
        return 0  # gone meanwhile, or not ours to change
    return 1
