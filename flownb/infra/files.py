"""Reading a file a user named, bounded: a regular file of at most so many bytes, or a clear
error without reading it.

Every file flownb reads because a user named it (a flow file, ``--csv``, ``--json``,
``--data``, ``--scorers`` and the magics' equivalents) comes through :func:`read_capped`, so a
FIFO, a device (``/dev/zero``, or a symbolic link to it) or a huge file is refused at once
instead of being waited on or read until memory runs out.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ..config.settings import input_max
from ..errors import ConfigError, FlownbError

__all__ = ["read_capped", "read_input"]


def read_capped(
    path: str | Path,
    limit: int,
    *,
    what: str,
    where: str | None = None,
    error: type[FlownbError],
    hint: str = "",
) -> bytes:
    """Return the bytes of the regular file at ``path``, at most ``limit`` of them.

    Opened without blocking (a FIFO with no writer is not waited on) and checked before a byte
    is read. Messages read ``"{where}: {what} is not a regular file"`` (``where``: the path
    unless given; ``what``: e.g. ``"the CSV file"``), with ``hint`` (how to raise the limit)
    after a size error.

    Raises:
        FileNotFoundError: there is no such file (callers say what that means for them).
        IsADirectoryError: ``path`` is a folder (callers say what that means for them).
        error: the file is not a regular file, is over ``limit`` bytes (or grew past it while
            it was read), or cannot be read.
    """
    where = where or str(path)
    over = f"{where}: {what} is over the limit of {limit} bytes{hint}"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        with os.fdopen(fd, "rb") as fh:
            st = os.fstat(fd)
            if stat.S_ISDIR(st.st_mode):
                raise IsADirectoryError(f"{where} is a directory")
            if not stat.S_ISREG(st.st_mode):
                raise error(f"{where}: {what} is not a regular file")
            if st.st_size > limit:
                raise error(
                    f"{where}: {what} is {st.st_size} bytes, over the limit of {limit} bytes{hint}"
                )
            raw = fh.read(limit + 1)
    except (FileNotFoundError, IsADirectoryError):
        raise
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise error(f"{where}: {what} cannot be read ({reason})") from None
    if len(raw) > limit:  # it grew while it was read
        raise error(over)
    return raw


def read_input(path: str | Path, what: str) -> bytes:
    """Return the bytes of an input file a user named (``what``: e.g. ``"the CSV file"``): a
    regular file of at most ``FLOWNB_INPUT_MAX`` bytes (see :func:`read_capped`).

    Raises:
        ConfigError: no such file, a folder, not a regular file (a FIFO, ``/dev/zero``), over
            the cap, or unreadable; one line naming the file.
    """
    try:
        return read_capped(
            path,
            input_max(),
            what=what,
            error=ConfigError,
            hint=" (FLOWNB_INPUT_MAX raises it)",
        )
    except FileNotFoundError:
        raise ConfigError(f"no such file: {path}") from None
    except IsADirectoryError:
        raise ConfigError(f"{path} is a directory, not {what.removeprefix('the ')}") from None
