"""The call cache's journal: each answer appended to a file the moment it arrives, so that a
process killed before the cache folded its answers into SQLite loses none of them.

An append copies one line into the file's pages, mapped into memory (``mmap``, shared with
the file): the line is in the kernel's page cache as soon as it is copied, which outlives the
process, without a system call. A ``write`` per answer cost several times as much on the event
loop (a system call, and the GIL let go and taken back), and a SQLite commit of one answer
20-30 us of CPU: the cache folds the journal's answers into SQLite many at a time, a few times a
second, and the journal is what a ``kill -9`` leaves behind. The file's blocks are reserved
when it is made or grown (``posix_fallocate``), so a full disk is an ``OSError`` then, never a
fault while a line is copied; the bytes past the last line are zeros.

Every process keeps its journal in the folder ``cache.sqlite.pending/`` beside the database,
one file at a time, named ``<pid>-<random>.log`` and held under an exclusive ``flock`` for as
long as its answers are not all folded. A lock dies with its process, so a journal whose lock
can be taken belongs to no live process: :func:`orphans` finds those, and the cache folds them
when it opens (the next run after a crash finds every answer the crashed one received). A new
journal is created under a dot-name, locked, then renamed into view, so no other process can
mistake it for an orphan before its owner holds it.

A line is ``<key>\\t<value>\\n`` (the key is hex, the value JSON, which escapes every tab,
newline and NUL in it); the lines end at the first NUL byte; a last line without its newline
was cut short by the crash and is skipped, as is any line that is not of that shape.
"""

from __future__ import annotations

import contextlib
import fcntl
import mmap
import os
import secrets
from collections.abc import Iterator
from pathlib import Path

__all__ = ["Journal", "journal_dir", "line_of", "orphans", "others", "read_lines"]

_SUFFIX = ".log"

# Bytes a journal is made with (reserved on disk, mapped); it doubles when a line does not fit.
_MAPPED = 1 << 20


def journal_dir(db_path: Path) -> Path:
    """Return the folder that holds the journals of the cache database ``db_path``."""
    return db_path.with_name(db_path.name + ".pending")


class Journal:
    """One process's current journal file, open for appending under its exclusive lock.

    Raises:
        OSError: the folder or the file cannot be made (the cache then commits each answer
            itself, as it did before it kept a journal).
    """

    def __init__(self, folder: Path) -> None:
        folder.mkdir(mode=0o700, exist_ok=True)
        name = f"{os.getpid()}-{secrets.token_hex(6)}{_SUFFIX}"
        hidden = folder / ("." + name)
        fd = os.open(hidden, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.posix_fallocate(fd, 0, _MAPPED)
            pages = mmap.mmap(fd, _MAPPED)
            os.rename(hidden, folder / name)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(hidden)
            raise
        self.path = folder / name
        self.fd = fd
        # The map's position is where the next line goes: the bytes appended since it was
        # made or last emptied (see size).
        self.pages = pages

    @property
    def size(self) -> int:
        """Return the bytes appended since the journal was made or last emptied."""
        return self.pages.tell()

    def append(self, key: str, value: str) -> None:
        """Append one answer (see :meth:`write`).

        Raises:
            OSError: the file had to grow and the disk is full.
        """
        self.write(line_of(key, value))

    def write(self, line: bytes) -> None:
        """Append ``line`` (an answer's ``<key>\\t<value>\\n``), copied into the mapped file
        in one call at the map's position (a kill midway leaves a line without its newline,
        skipped on reading).

        Raises:
            OSError: the file had to grow and the disk is full.
        """
        try:
            self.pages.write(line)  # the usual case: it fits (a ValueError when it does not)
        except ValueError:
            self._grow(self.pages.tell() + len(line))
            self.pages.write(line)

    def _grow(self, least: int) -> None:
        """Make the file (and its map) at least ``least`` bytes, doubling, its blocks reserved.

        Raises:
            OSError: the disk is full (the file is as it was).
        """
        size = max(2 * len(self.pages), least)
        os.posix_fallocate(self.fd, 0, size)
        self.pages.resize(size)

    def empty(self) -> None:
        """Drop every line (all are in the database): the next answer is the first again. The
        lines are zeroed, so that a crash after this finds none of them."""
        size = self.pages.tell()
        self.pages[:size] = bytes(size)
        self.pages.seek(0)

    def retire(self) -> None:
        """Delete the file and release its lock: every answer in it is in the database."""
        with contextlib.suppress(OSError):
            os.unlink(self.path)
        self.close()

    def close(self) -> None:
        """Release the lock and close the file, leaving it for :func:`orphans` to find."""
        if not self.pages.closed:
            self.pages.close()  # its lines stay in the file: the map shares the file's pages
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = -1


def line_of(key: str, value: str) -> bytes:
    """Return the journal line of one answer (what :func:`read_lines` reads back)."""
    return f"{key}\t{value}\n".encode()


def read_lines(data: bytes) -> Iterator[tuple[str, str]]:
    """Yield the ``(key, value)`` of every whole, well-formed line of a journal's bytes (those
    before its first NUL: the rest of the file is zeros)."""
    lines = data.split(b"\0", 1)[0].split(b"\n")
    for line in lines[:-1]:  # the last piece has no newline: empty, or cut short by a crash
        key, tab, value = line.partition(b"\t")
        if not tab or not key or not value:
            continue
        try:
            yield key.decode("ascii"), value.decode()
        except UnicodeDecodeError:
            continue


def others(folder: Path, own: Journal | None) -> bool:
    """Return whether ``folder`` holds a journal other than ``own`` (another process's, alive
    or dead): a listing, no file opened, for a caller that looks often."""
    try:
        names = _journals_in(folder)
    except OSError:
        return False
    mine = own.path.name if own is not None else None
    return any(n != mine for n in names)


def _journals_in(folder: Path) -> list[str]:
    """Return the names of the journals in ``folder`` in view (not one still being made under
    its dot-name: see :class:`Journal`).

    Raises:
        OSError: the folder cannot be listed (``FileNotFoundError``: no journal was ever made).
    """
    return [n for n in os.listdir(folder) if n.endswith(_SUFFIX) and n[0] != "."]


@contextlib.contextmanager
def orphans(folder: Path) -> Iterator[list[tuple[Path, bytes]]]:
    """Hold the journals in ``folder`` that no live process holds (their lock could be taken)
    and yield their paths and contents; the caller folds them into the database, and on a
    clean exit from the ``with`` they are deleted (on an exception they stay, for the next
    process that opens the cache)."""
    held: list[tuple[Path, int]] = []
    found: list[tuple[Path, bytes]] = []
    try:
        try:
            names = _journals_in(folder)
        except (FileNotFoundError, NotADirectoryError):
            names = []  # no journal was ever made here (or none can be: see Journal)
        for name in sorted(names):
            path = folder / name
            try:
                fd = os.open(path, os.O_RDONLY)
            except OSError:
                continue  # folded and deleted by another process meanwhile
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)  # a live process's journal
                continue
            held.append((path, fd))
            with open(fd, "rb", closefd=False) as file:
                found.append((path, file.read()))
        yield found
        for path, _ in held:
            with contextlib.suppress(OSError):
                os.unlink(path)
    finally:
        for _, fd in held:
            with contextlib.suppress(OSError):
                os.close(fd)
