"""The call cache: every successful provider call, keyed by what decides its output, in SQLite
under ``FLOWNB_HOME/cache.sqlite``.

The key is a SHA-256 over the provider's identity (name and endpoint, never the key), the node
kind, every model parameter and the rendered prompt, so a change to any of them is a miss.
Only successes are stored (``put`` is called with generations, errors never reach it); a re-run
of an interrupted or partly failed batch therefore calls the provider only for what is missing.

Each answer is safe from a crash of the process as soon as it arrives. :meth:`CallCache.put`
commits before it returns (one small transaction, WAL, ``synchronous=NORMAL``: no fsync per
commit) on a connection whose lock wait is 10 ms at most. On an event loop,
:meth:`CallCache.put_soon` encodes the answer, appends it to this process's journal (one line
copied into the file's mapped pages: see :mod:`flownb.runtime.cache_journal`) and queues it
(lookups see it at once); the cache's writer thread folds the queue into SQLite in one transaction
every quarter second while answers keep coming, and a run's end folds what is left. A commit's CPU
is per answer and falls with the answers per transaction (SQLite writes the pages an insert touched
to the WAL): about 27 us alone, 14 at eight and 7 at 64 on a young cache, so folding tens at a time
is what makes the cache cheap, and the journal is what makes it safe to wait: a process killed with
answers not yet folded leaves its journal behind, and the next process to open the cache folds it
first (as does a bulk lookup in a process that had it open already: a Dask worker retrying a killed
one's partition), so a re-run after a ``kill -9`` buys again only what the killed run was still
reading off the wire as it died (a line cut short by the kill is skipped). A power loss can take
back the last answers, as it can SQLite's last commits. Another process sees an answer once it is
folded: a twin call there meanwhile is bought twice, as one in flight always was (the in-flight
de-duplication is per process).

Without a journal (its folder cannot be written) the writer thread commits the queue as soon
as it runs, then every 2 ms while answers come; when an answer has waited over 5 ms (the
thread found no CPU) the event loop, putting the next, commits the queue itself. When the
database is locked by another process, the entries stay queued (and journaled) and the writer
retries every 0.25 s while the lock lasts.

A miss that a bulk lookup (:meth:`CallCache.get_many`, a lookahead chunk's) found is trusted
for ``TRUST_MISS`` (10 s; see :meth:`flownb.providers.calls.CallRunner.missing`): the call made
within it does not query the cache again. Answers this process stores meanwhile are still
found (the runner counts them: a repeated prompt is bought once). What another process stored
meanwhile is not: that call is then bought twice, as a twin call in flight in another process
always was (the in-flight de-duplication is per process), and the re-lookup it saves cost a
query on the event loop for every call a run made (about 30 us, a tenth of the call's CPU) to
catch only a twin that ended in the seconds between the lookup and the call. Past the window
(a slow run, far into a chunk) a miss is queried again as before.

Lookups see the queue too. One :class:`CallCache` per database file per process (see
:func:`open_cache`); locks make it safe from several threads, and SQLite's WAL mode lets
several processes share it. A forked child opens connections, locks and a writer of its own.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import os
import queue
import sqlite3
import threading
import time
import weakref
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import orjson

from ..config.settings import media_dir as media_dir_of
from ..errors import ConfigError
from ..infra.media import mark_used, on_evict
from ..infra.private import private_dir, private_file
from ..infra.writable import folder_problem, unwritable
from ..providers.base import Generation, Kind
from ..providers.callplan import key_of, key_prefix, keys_of
from ..show.notices import warn
from .cache_journal import Journal, journal_dir, line_of, orphans, others, read_lines

__all__ = ["CACHE_FILE", "CallCache", "Place", "open_cache"]

CACHE_FILE = "cache.sqlite"
# Seconds a commit on the caller's thread (the event loop) may wait for another process's lock.
_INLINE_TIMEOUT = 0.01
# Keys per bulk lookup: a lookahead's chunk (1,024 rows of two nodes) in one query, whose
# per-query cost (compiling the statement) a 500-key chunk paid four times; SQLite before 3.32
# allows only 999 parameters.
_IN_CHUNK = 2048 if sqlite3.sqlite_version_info >= (3, 32, 0) else 500
_RETRY_AFTER = 0.25  # seconds between commit attempts while the database is locked or failing
# Seconds between the writer thread's commits while answers keep coming: what a kill -9 can
# lose is what arrived within this window (and the thread's wait for a CPU and the GIL).
_POLL = 0.002
# Without a journal: seconds an answer may wait for the writer thread before the event loop,
# putting another, commits the queue itself: on a machine whose CPUs are taken, the thread may
# wait tens of milliseconds for one, and what is queued is what a kill -9 loses.
_LAG_BOUND = 0.005
# With a journal (every answer already safe from a kill -9 in it): seconds between the writer
# thread's folds of the journal into SQLite while answers keep coming. A fold commits all
# that came meanwhile in one transaction, and a commit costs CPU per answer that falls with
# the answers per transaction (about 27 us alone, 14 at eight, 7 at 64 on a young cache): at a
# few hundred answers a second, a quarter second makes a hundred or more to a transaction (at
# 50 ms the writer thread's CPU was a tenth of a call's on the client). Another process sees
# an answer once folded (a run's end folds everything: see Engine), so a twin call there
# within this window is bought twice, as one in flight always was.
_FOLD_EVERY = 0.25
# Bytes a journal may grow to while answers keep coming (it is emptied whenever a fold leaves
# nothing queued): what a crash leaves to be read again, at most a few seconds of answers.
_JOURNAL_MAX = 8 << 20

# A table with a rowid and a unique index on the key: a new answer is appended to the table's
# last page and only its key (72 bytes, not the whole answer) goes where the key sorts, so a
# commit writes a few pages where the former table keyed by the key (WITHOUT ROWID) wrote a
# page per answer: 30-45% less CPU per answer. Its three columns are the former table's, in
# its order, so ``INSERT ... VALUES (?, ?, ?)`` of an older flownb still works on it.
_SCHEMA = """
CREATE TABLE IF NOT EXISTS calls (
    key TEXT NOT NULL UNIQUE,
    value TEXT NOT NULL,
    created REAL NOT NULL
)
"""
_OLD_TABLE = "calls_keyed"  # the former table, while its rows are copied over (one transaction)


def _ensure_schema(db: sqlite3.Connection) -> None:
    """Create the table, or move a cache file written before it had a rowid to it (once, in
    one transaction: another process opening it meanwhile waits, then finds it moved). A file
    already in shape is only read (it may be read-only)."""

    def shape() -> str | None:
        row = db.execute(
            "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'calls'"
        ).fetchone()
        if row is None:
            return None
        return "keyed" if "WITHOUT ROWID" in row[0].upper() else "rowid"

    if shape() == "rowid":
        return
    db.execute("BEGIN IMMEDIATE")
    try:
        found = shape()  # again, under the write lock: another process may have done it
        if found is None:
            db.execute(_SCHEMA)
        elif found == "keyed":
            db.execute(f"ALTER TABLE calls RENAME TO {_OLD_TABLE}")
            db.execute(_SCHEMA)
            db.execute(
                "INSERT OR REPLACE INTO calls SELECT key, value, created FROM "
                f"{_OLD_TABLE} ORDER BY created"
            )
            db.execute(f"DROP TABLE {_OLD_TABLE}")
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise


def _insert(db: sqlite3.Connection, rows: Mapping[str, str]) -> None:
    """Store ``rows`` (key -> encoded answer) through ``db`` in one transaction, each
    replacing what its key held.

    Raises:
        sqlite3.Error: the store failed (nothing of it is stored).
    """
    now = time.time()
    if len(rows) == 1:  # one statement, its own transaction (autocommit)
        ((key, value),) = rows.items()
        db.execute("INSERT OR REPLACE INTO calls VALUES (?, ?, ?)", (key, value, now))
        return
    db.execute("BEGIN")
    try:
        # Each row's parameters made by C iterators, not a Python loop: a fold is hundreds
        # of rows, on a thread that takes the GIL from the event loop to make them.
        db.executemany(
            "INSERT OR REPLACE INTO calls VALUES (?, ?, ?)",
            zip(rows.keys(), rows.values(), itertools.repeat(now)),
        )
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise


def _connect(path: Path, timeout: float) -> sqlite3.Connection:
    db = sqlite3.connect(path, check_same_thread=False, timeout=timeout, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    return db


# Bytes of the cache file the lookups' connection reads through a memory map (SQLite's
# ``mmap_size``; the rest, and the WAL, by ``pread``). With SQLite's default 2 MB page cache a
# bulk lookup read most of the key index's pages again with a system call each, once per
# chunk of keys, as soon as the index outgrew the page cache: 0.65 reads a row at 10,000 rows
# of two nodes, 1.9 at 100,000, so a cached re-run's cost a row grew with the cache. Mapped,
# a page is read from the kernel's page cache in place, with no system call and no copy, and
# memory is the kernel's (shared, given back under pressure), not this process's. Not on
# Windows, where a file mapped by one process cannot be truncated by another (a VACUUM by
# ``flownb gc``).
_MMAP_SIZE = 0 if os.name == "nt" else 1 << 30


def _reader(path: Path, timeout: float) -> sqlite3.Connection:
    """Return a connection for lookups: :func:`_connect`'s, reading the file mapped."""
    db = _connect(path, timeout)
    db.execute(f"PRAGMA mmap_size={_MMAP_SIZE}")
    return db


def _encode(gen: Generation) -> str:
    """Return what the cache stores of a generation (JSON)."""
    return json.dumps(_stored(gen))


def _stored(gen: Generation) -> dict[str, Any]:
    """Return the fields the cache keeps of a generation (what :func:`_encode` and
    :func:`_encode_quick` write)."""
    stored: dict[str, Any] = {
        "output": gen.output,
        "media": gen.media,
        "model": gen.model,
        "usage": gen.usage,
        "cost": gen.cost,  # a hit's saving (null: priced before flownb kept prices)
    }
    if gen.provider_s is not None:  # how long it took when bought: a cached row's speed
        stored["provider_s"] = gen.provider_s
    if gen.finish_reason == "length":  # a text cut short stays flagged when read back
        stored["finish_reason"] = gen.finish_reason
    if gen.prompt_cache_saved is not None:  # what the provider's prompt cache saved, when bought
        stored["prompt_cache_saved"] = gen.prompt_cache_saved
    return stored


class Place:
    """Where one run's bulk lookups (:meth:`CallCache.get_many`) found their rows in the
    table, for the next lookup to read the rows that follow first.

    The table appends each answer, so a cache filled by a run holds its answers in about the
    order the run asked for them, and a re-run asks in that order again: the next chunk's
    rows are those right after the last chunk's, read in one pass in the table's order with
    no seek in the key index. A seek costs more the larger the cache (the index outgrows the
    CPU's caches: 1.2 us a key at 20,000 answers, 1.9 at 200,000), a row read in order does
    not. The guess is made only after a lookup whose rows lay together (rowids spread over
    at most twice their number), and no more in the run once one found under half its keys:
    a re-run in another order reads one chunk's rows too many, once."""

    __slots__ = ("_after", "_trusted")

    def __init__(self) -> None:
        self._after: int | None = None  # the last rowid of the last lookup's rows, if together
        self._trusted = True

    def next_after(self) -> int | None:
        """Return the rowid after which the next lookup's rows are guessed to lie (``None``:
        no guess, every key is looked up in the index)."""
        return self._after if self._trusted else None

    def guessed(self, asked: int, found: int) -> None:
        """Note that reading after :meth:`next_after` found ``found`` of ``asked`` keys."""
        if 2 * found < asked:
            self._trusted = False

    def found(self, ids: list[int]) -> None:
        """Note the rowids a lookup found: where the next one's rows are guessed to follow."""
        if not ids:
            return
        low, high = min(ids), max(ids)
        self._after = high if high - low < 2 * len(ids) + 16 else None


class CallCache:
    """A SQLite table of key -> generation. ``media_dir`` is where image generations' files live:
    an entry whose file is gone is a miss."""

    # Seconds a read or commit waits for another process's write lock: lookups run on the event
    # loop, so never long; a commit that gives up keeps its entries for the next one.
    busy_timeout = 5.0

    def __init__(self, path: str | Path, media_dir: str | Path | None = None) -> None:
        """Open (or create) the cache database.

        Raises:
            ConfigError: the file cannot be used as the cache (not a database, no permission).
        """
        self.path = Path(path)
        self.media_dir = Path(media_dir or media_dir_of(self.path.parent))
        self._lock = threading.Lock()  # the queue and the reading connection
        self._write_lock = threading.Lock()  # the writing connection: one commit at a time
        try:
            private_dir(self.path.parent)
            private_file(self.path)  # 0600 before SQLite opens it: its WAL files take its mode
            # Two connections: lookups on the event loop never wait behind a commit (WAL lets a
            # reader and a writer work at once).
            self._db = _reader(self.path, self.busy_timeout)
            _ensure_schema(self._db)
            self._wdb = _connect(self.path, self.busy_timeout)
            # For commits on the caller's thread: never waits long for another process's lock
            # (the writer thread, with the full timeout, takes over when it would).
            self._idb = _connect(self.path, _INLINE_TIMEOUT)
        except (sqlite3.Error, OSError) as exc:
            if folder_problem(self.path.parent) is not None:  # deleting the file cannot help
                raise unwritable(
                    self.path.parent,
                    exc,
                    f"the call cache ({self.path.name})",
                    switch="run with cache=False / --no-cache / FLOWNB_CACHE=0",
                ) from exc
            raise ConfigError(
                f"the call cache {self.path} cannot be used ({exc}); delete the file, or run "
                "with cache=False / --no-cache / FLOWNB_CACHE=0"
            ) from exc
        self.errors: list[BaseException] = []  # store failures met while running (not raised)
        self._pending: dict[str, str] = {}
        # The queue a commit is storing (taken from _pending whole): still seen by lookups.
        self._folding: dict[str, str] = {}
        # The writer thread's doorbell (a C queue: ringing it is a fraction of a microsecond on
        # the event loop), rung once per batch of entries: _rung says it was rung and the
        # writer has not yet taken what was queued.
        self._bell: queue.SimpleQueue[None] = queue.SimpleQueue()
        self._rung = False
        self._since: float | None = None  # when the oldest uncommitted put_soon entry came
        self._writer: threading.Thread | None = None
        self._inline_ok = True  # False after a commit on the caller's thread found a lock
        self._closed = False
        # The journal that answers queued by put_soon are appended to (made at the first, None
        # when it cannot be: the cache then commits as it did without one), and the journals
        # swapped out by a fold whose commit has not yet succeeded.
        self._journal: Journal | None = None
        self._journal_ok = True
        self._retired: list[Journal] = []
        self._fold_orphans()
        _open_caches.add(self)

    def after_fork_in_child(self) -> None:
        """After a fork, in the child: connections, locks and a writer thread of its own.

        SQLite forbids using a connection across a fork, and closing an inherited one would
        drop the child's own file locks, so those are kept, unused, for the child's lifetime.
        A store that cannot be opened again counts as failing (misses, nothing stored).
        """
        if self._closed:
            return
        _inherited.extend((self._db, self._wdb, self._idb))
        for journal in (self._journal, *self._retired):
            if journal is not None:
                # The parent's: it folds and deletes them. Closing the child's descriptor
                # leaves the lock with the parent's (a flock belongs to the open file).
                journal.close()
        self._journal, self._retired = None, []
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._bell = queue.SimpleQueue()
        self._rung = False  # the parent's writer did not survive the fork; a put starts one
        # A fold the parent was making: stored by the parent, still queued here (as all was).
        self._folding.update(self._pending)
        self._pending, self._folding = self._folding, {}
        self._since = None
        self._writer = None
        try:
            self._db = _reader(self.path, self.busy_timeout)
            self._wdb = _connect(self.path, self.busy_timeout)
            self._idb = _connect(self.path, _INLINE_TIMEOUT)
        except sqlite3.Error as exc:
            self._failed(exc)
            self._db = self._wdb = self._idb = sqlite3.connect(":memory:", check_same_thread=False)

    @staticmethod
    def prefix(
        identity: Mapping[str, Any],
        kind: Kind,
        params: Mapping[str, Any],
        system: str | None = None,
    ) -> bytes:
        """Return the key material shared by every call of one node (all but the prompt): see
        :func:`flownb.providers.callplan.key_prefix`, the rule's one author."""
        return key_prefix(identity, kind, params, system)

    key = staticmethod(key_of)
    keys = staticmethod(keys_of)

    def get(self, key: str) -> Generation | None:
        """Return the stored generation (``cached=True``) or ``None``; a store that cannot be
        read right now (locked past the timeout, disk error) counts as a miss, never an error."""
        with self._lock:
            value = self._pending.get(key)
            if value is None and self._folding:
                value = self._folding.get(key)
            if value is None:
                # Not queued: either never put, or committed before it left the queue.
                try:
                    row = self._db.execute(
                        "SELECT value FROM calls WHERE key = ?", (key,)
                    ).fetchone()
                except sqlite3.Error as exc:
                    self._failed(exc)
                    row = None
                value = row[0] if row is not None else None
        if value is None:
            return None
        return self._decode(value)

    def get_many(self, keys: Iterable[str], place: Place | None = None) -> dict[str, Generation]:
        """Return the stored generations of ``keys`` that the cache holds (a bulk :meth:`get`:
        one query per few thousand keys); failures count as misses, as in :meth:`get`.

        ``place`` is a run's :class:`Place` (updated here): where its previous lookup found
        its rows, so that the rows right after them are read first, in the table's order, and
        only the keys not among them are looked up in the key index.

        The journals of processes that died since the cache was opened (a Dask worker killed
        mid-batch) are folded first: a bulk lookup, made before every chunk of a run, finds
        what they received, and a retried partition does not buy it again."""
        if others(journal_dir(self.path), self._journal):
            self._fold_orphans()
        # Sorted: SQLite builds an index of the IN list, which in key order is appended to
        # rather than inserted into (a 2,048-key query takes half the time).
        wanted = sorted(set(keys))
        values: dict[str, str] = {}
        with self._lock:
            rest = wanted
            for queue in (self._folding, self._pending):  # the newer last: it wins
                if queue:  # a re-run's usual case: nothing queued, nothing to check
                    for key in wanted:
                        queued = queue.get(key)
                        if queued is not None:
                            values[key] = queued
            if values:
                rest = [k for k in rest if k not in values]
            try:
                # One read transaction: the rowids found stay those rows' until the second
                # query (another process replacing a row gives it a new rowid).
                self._db.execute("BEGIN")
                try:
                    ids: list[int] = []
                    after = place.next_after() if place is not None else None
                    if after is not None and rest:
                        asked = len(rest)
                        rest = self._rows_after(after, rest, values, ids)
                        place.guessed(asked, asked - len(rest))  # type: ignore[union-attr]
                    for start in range(0, len(rest), _IN_CHUNK):
                        values.update(self._rows_of(rest[start : start + _IN_CHUNK], ids))
                finally:
                    self._db.execute("COMMIT")
                if place is not None:
                    place.found(ids)
            except sqlite3.Error as exc:
                self._failed(exc)
        found = {}
        decode = self._decode
        for key, value in values.items():
            gen = decode(value)
            if gen is not None:
                found[key] = gen
        return found

    def _rows_after(
        self, after: int, keys: list[str], values: dict[str, str], ids: list[int]
    ) -> list[str]:
        """Read the rows right after rowid ``after`` in the table's order, as many as ``keys``
        and a few more (an answer or two stored out of turn); put those of ``keys`` into
        ``values`` and their rowids into ``ids``; return the keys not among them, in order."""
        left = set(keys)
        rows = self._db.execute(
            "SELECT rowid, key, value FROM calls WHERE rowid > ? ORDER BY rowid LIMIT ?",
            (after, len(keys) + len(keys) // 16 + 16),
        )
        for rowid, key, value in rows:
            if key in left:
                left.remove(key)
                values[key] = value
                ids.append(rowid)
        return [k for k in keys if k in left]

    def _rows_of(self, keys: list[str], ids: list[int]) -> list[tuple[str, str]]:
        """Return the stored (key, value) of ``keys`` (at most :data:`_IN_CHUNK`), appending
        their rowids to ``ids``: the rows' places from the key index alone, then the rows in
        the order they lie in the table. Read in key order, a large cache's table pages were
        read again and again, once per row on them (2.5x the time a row at 200,000 answers)."""
        marks = ",".join("?" * len(keys))
        places = self._db.execute(f"SELECT rowid FROM calls WHERE key IN ({marks})", keys)
        found = sorted(r for (r,) in places)
        if not found:
            return []
        ids += found
        marks = ",".join("?" * len(found))
        return self._db.execute(
            f"SELECT key, value FROM calls WHERE rowid IN ({marks})", found
        ).fetchall()

    def _decode(self, value: str) -> Generation | None:
        try:
            data = orjson.loads(value)  # a few times json's speed: a cached re-run is decoding
        except orjson.JSONDecodeError:  # what orjson refuses (a lone surrogate) json reads
            data = json.loads(value)
        get = data.get
        media = get("media")
        # Marked used: the media cap deletes the images used longest ago first.
        if media is not None and not mark_used(self.media_dir / media):
            return None  # the image file was deleted: pay for it again
        # Positional (the field order of Generation): a cached re-run makes one per call.
        return Generation(
            get("output", ""),
            media,
            get("model"),
            get("usage"),
            True,  # cached
            0.0,  # latency
            None,  # limits: never cached
            get("cost"),
            get("finish_reason"),
            None,  # priced_as
            get("prompt_cache_saved"),
            None,  # response_id: never cached
            get("provider_s"),
        )

    def put(self, key: str, gen: Generation) -> None:
        """Store a successful generation: committed before this returns when the database is
        free (one small transaction), else queued for the writer thread."""
        value = _encode(gen)
        with self._lock:
            self._pending[key] = value
        self._store()

    def put_soon(self, key: str, gen: Generation) -> None:
        """Store a successful generation as :meth:`put` does, for a caller on an event loop:
        the answer is encoded, appended to this process's journal (safe from a ``kill -9``
        when this returns) and queued, and the writer thread folds what is queued into the
        database every :data:`_FOLD_EVERY` seconds while answers come (see the module
        docstring). Lookups see it at once (it is queued).

        Without a journal (its folder cannot be written) the writer commits what is queued as
        soon as it runs and then every :data:`_POLL` seconds, and when it has left an entry
        waiting over :data:`_LAG_BOUND` (it found no CPU) the caller commits the queue itself.
        """
        # Runs on the event loop for every answer bought: the usual case (a journal, the
        # writer already woken) is this much and no more; the rest is _queued's.
        value = _encode_quick(gen)
        line = line_of(key, value)
        with self._lock:
            self._pending[key] = value
            # Read under the lock: a fold takes the queue and swaps the journal under it, so
            # a journal holds exactly the answers of the queue it was swapped out with.
            journal = self._journal
            journaled = False
            if journal is not None:
                try:
                    journal.write(line)
                    journaled = True
                except OSError as exc:
                    self._journal_failed(exc)
                # Woken already: the writer finds it (it empties the queue under this lock
                # before it goes idle).
                if journaled and self._rung:
                    return
        self._queued(line, journaled)

    def _queued(self, line: bytes, journaled: bool) -> None:
        """The rest of :meth:`put_soon` for an answer queued while the writer thread was
        idle, or not yet ``journaled`` (``line``): the journal made at the first answer, the
        writer woken, and without a journal the queue committed here when the writer lags."""
        if not journaled and self._journal is None and self._journal_ok:
            self._open_journal()
        with self._lock:
            journal = self._journal
            if journal is not None and not journaled:
                # Just made. A fold may have taken (and committed) this answer meanwhile: a
                # second copy of a committed line is harmless.
                try:
                    journal.write(line)
                except OSError as exc:
                    journal = None
                    self._journal_failed(exc)
            rung, self._rung = self._rung, True
            lagging = False
            if journal is None:
                now = time.perf_counter()
                since = self._since
                if since is None:
                    self._since = since = now
                lagging = now - since > _LAG_BOUND
        if lagging:
            self._store_inline()
        if not rung:
            self._ring()  # even after an inline commit: the writer then resets _rung, idle

    def _open_journal(self) -> None:
        """Make this process's journal (at its first answer, not when the cache opens: most
        opened caches store nothing); without one when it cannot be made."""
        with self._lock:
            if self._journal is None and self._journal_ok:
                try:
                    self._journal = Journal(journal_dir(self.path))
                except OSError as exc:
                    self._journal_failed(exc)

    def _journal_failed(self, exc: OSError) -> None:
        """Go on without a journal (the lock held): answers are committed one by one again."""
        self._journal_ok = False
        if self._journal is not None:
            self._retired.append(self._journal)  # its lines are queued: deleted once committed
            self._journal = None
        warn(
            f"the call cache's journal in {journal_dir(self.path)} cannot be written ({exc}); "
            "answers are committed one by one",
            RuntimeWarning,
        )

    def _fold_orphans(self) -> None:
        """Fold into the database the journals of processes that died before folding them
        (a ``kill -9``): the answers they received are found from now on."""
        try:
            with orphans(journal_dir(self.path)) as found:
                rows = dict(row for _, data in found for row in read_lines(data))
                if rows:  # the writer's lock only then: another live process's is no orphan
                    with self._write_lock:
                        _insert(self._wdb, rows)
        except (OSError, sqlite3.Error) as exc:
            self._failed(exc)  # they stay, for the next process that opens the cache

    def _ring(self) -> None:
        """Wake the writer thread (started on first use)."""
        if self._writer is None:
            with self._lock:
                if self._writer is None:
                    self._writer = threading.Thread(
                        target=self._write_loop, name=f"flownb-cache-{self.path.name}", daemon=True
                    )
                    self._writer.start()
        self._bell.put(None)

    def _store(self) -> None:
        """Commit what is queued on the caller's thread when the database is free, else leave
        it to the writer thread."""
        # On the caller's thread: no hand-over to another thread that may wait for the GIL (a
        # thread's commit lagged 5-45 ms behind its answer on a busy machine). Never when the
        # writer is busy or the last such try found the database locked.
        if not self._store_inline():
            self._ring()

    def _store_inline(self) -> bool:
        """Commit what is queued on the caller's thread unless the writer is committing or
        the last such try found the database locked; returns whether it did."""
        if self._inline_ok and self._write_lock.acquire(blocking=False):
            try:
                done = self._commit_with(self._idb, quiet=True)
            finally:
                self._write_lock.release()
            if done:
                return True
            self._inline_ok = False  # locked by another process: leave it to the writer
        return False

    def put_many(self, items: Iterable[tuple[str, Generation]]) -> None:
        """Store many generations and commit them in one transaction (a batch's answers);
        a store failure keeps them queued and is recorded in ``errors``, not raised."""
        values = {key: _encode(g) for key, g in items}
        with self._lock:
            self._pending.update(values)
        self._commit()

    def put_answers(self, items: Iterable[tuple[str, Generation]]) -> None:
        """Store many generations in one transaction, as :meth:`put_many` does, faster for
        the tens of thousands of answers of a provider batch: each encoded by
        :func:`_encode_quick`, and inserted in key order (SQLite then fills its B-tree's pages
        in order: about 40% less CPU than random keys). A store failure keeps them queued and
        is recorded in ``errors``, not raised."""
        values = sorted((key, _encode_quick(g)) for key, g in items)
        with self._lock:
            self._pending.update(values)
        self._commit()

    def _write_loop(self) -> None:
        """The writer thread: commit what is queued, in one transaction, every
        :data:`_FOLD_EVERY` seconds after it is woken (without a journal: at once, then every
        :data:`_POLL` seconds) while answers keep coming (the puts meanwhile do not wake it: a
        wake per answer cost more CPU than the commit), until a fold finds the queue empty."""
        bell = self._bell
        while True:
            bell.get()  # waits without the GIL
            while not self._closed:
                if self._journal is not None:
                    # Let answers gather for one transaction: the journal keeps them safe.
                    time.sleep(_FOLD_EVERY)
                try:
                    committed = self._commit()
                except sqlite3.ProgrammingError:
                    return  # closed meanwhile: close() committed what there was
                if committed:
                    self._inline_ok = True
                    if self._journal is None:
                        time.sleep(_POLL)
                else:
                    # Locked by another process or a disk error: the entries stay queued (and
                    # visible to lookups); try again shortly rather than in a tight loop.
                    time.sleep(_RETRY_AFTER)
                with self._lock:
                    if not self._pending:
                        self._rung = False  # idle: the next put wakes us
                        break
            if self._closed:
                return

    def _commit(self) -> bool:
        """Commit every queued entry in one transaction, waiting up to ``busy_timeout`` for
        another process's lock; returns False when the store failed (the entries stay queued
        for the next attempt, the failure is in ``errors``).

        Raises:
            sqlite3.ProgrammingError: the cache was closed.
        """
        with self._write_lock:
            return self._commit_with(self._wdb)

    def _commit_with(self, db: sqlite3.Connection, quiet: bool = False) -> bool:
        """Commit the queue through ``db`` (the write lock held), then empty or delete the
        journals that held it; ``quiet``: a failure is not recorded (another attempt follows)."""
        fresh = self._fresh_journal()
        with self._lock:
            if fresh is not None and self._journal is not None:
                # The answers put from now on go to a new journal; the old one holds `rows`.
                self._retired.append(self._journal)
                self._journal = fresh
                fresh = None
            # The queue taken whole (a new one for the puts from now on), not copied: lookups
            # see it as _folding until it is committed.
            rows = self._folding = self._pending
            self._pending = {}
            done = list(self._retired)
            if not rows:  # nothing to commit: what the journals held was dropped
                self._folding = {}
                self._retired = []
                self._empty_journal()
        if fresh is not None:
            fresh.retire()  # not needed after all (another commit swapped meanwhile)
        if not rows:
            for journal in done:
                journal.retire()
            return True
        try:
            _insert(db, rows)
        except sqlite3.Error as exc:
            # Locked past the timeout or a disk error: keep the entries (the generations
            # themselves already reached the caller, and the journals keep them safe) and try
            # again at the next commit; closed (ProgrammingError): a bug of ours, raised.
            with self._lock:
                rows.update(self._pending)  # a newer put of a key wins
                self._pending = rows
                self._folding = {}
            if isinstance(exc, sqlite3.ProgrammingError):
                raise
            if not quiet:
                self._failed(exc)
            return False
        with self._lock:
            self._folding = {}
            pending = self._pending
            # What is left was queued after the rows were taken: it waits from about now.
            self._since = time.perf_counter() if pending else None
            self._retired = [j for j in self._retired if j not in done]
            if not pending:
                self._empty_journal()
        for journal in done:  # every answer they held is committed
            journal.retire()
        return True

    def _empty_journal(self) -> None:
        """Empty the current journal when nothing is queued (the lock held): every line in it
        is committed (or was dropped). While answers keep coming it grows instead, and a
        commit swaps it for a new one past :data:`_JOURNAL_MAX` (making one costs more than a
        commit saves, so not at every fold)."""
        if self._journal is not None and self._journal.size:
            self._journal.empty()

    def _fresh_journal(self) -> Journal | None:
        """Return a new journal for the answers put after this commit takes the queue, when
        the current one has grown past :data:`_JOURNAL_MAX` (made before the lock is taken:
        it is a few system calls)."""
        journal = self._journal
        if journal is None or journal.size < _JOURNAL_MAX:
            return None
        try:
            return Journal(journal_dir(self.path))
        except OSError:
            return None  # the current one goes on growing

    def forget_media(self, names: Iterable[str]) -> int:
        """Drop every entry (queued or stored) whose answer is one of the images ``names``
        (deleted to keep the media folder under its cap); return how many stored rows went.
        A store that fails is recorded in ``errors``, not raised."""
        gone = set(names)
        if not gone:
            return 0
        with self._lock:
            for key, value in list(self._pending.items()):
                if json.loads(value).get("media") in gone:
                    del self._pending[key]
        removed = 0
        try:
            with self._write_lock:
                # A digest appears in no other field; the JSON is read to be sure (in Python:
                # stored values may hold NaN, which SQLite's json functions refuse).
                doomed = [
                    key
                    for name in sorted(gone)
                    for key, value in self._wdb.execute(
                        "SELECT key, value FROM calls WHERE instr(value, ?) > 0", (name,)
                    )
                    if json.loads(value).get("media") == name
                ]
                for key in doomed:
                    removed += self._wdb.execute("DELETE FROM calls WHERE key = ?", (key,)).rowcount
        except sqlite3.ProgrammingError:
            return removed  # closed meanwhile
        except sqlite3.Error as exc:
            self._failed(exc)
        return removed

    def _failed(self, exc: BaseException) -> None:
        if not self.errors:
            warn(
                f"the call cache {self.path} failed ({exc}); runs go on, results may not be cached",
                RuntimeWarning,
            )
        self.errors.append(exc)

    def flush(self) -> None:
        """Commit every queued entry now, in the calling thread (a store failure keeps them
        queued and is recorded in ``errors``, not raised)."""
        self._commit()

    def __len__(self) -> int:
        self.flush()
        with self._lock:
            return self._db.execute("SELECT count(*) FROM calls").fetchone()[0]

    def clear(self) -> None:
        """Forget every entry (those in dead processes' journals too)."""
        with self._write_lock:
            with self._lock:
                self._pending.clear()
            self._commit_with(self._wdb, quiet=True)  # nothing queued: retires the journals
            with contextlib.suppress(OSError), orphans(journal_dir(self.path)):
                pass  # deleted unread
            self._wdb.execute("DELETE FROM calls")

    def close(self) -> None:
        """Commit what is queued, stop the writer thread and close the database."""
        self.flush()
        self._closed = True
        self._bell.put(None)
        if self._writer is not None and self._writer is not threading.current_thread():
            self._writer.join(self.busy_timeout + 1)
        with self._write_lock, self._lock:
            self._wdb.close()
            self._idb.close()
            self._db.close()
            for journal in (self._journal, *self._retired):
                if journal is None:
                    continue
                if self._pending:
                    journal.close()  # not committed: left for the next process to fold
                else:
                    journal.retire()
            self._journal, self._retired = None, []


def _encode_quick(gen: Generation) -> str:
    """Return what :func:`_encode` returns, in orjson's compact form (a few times json's
    speed). orjson writes NaN and infinities as null, so those are written in json's
    spelling (``NaN``, which :meth:`CallCache._decode` reads back); what orjson refuses (a
    lone surrogate, a huge integer) json encodes."""
    # On the event loop for every answer bought: one check of the usual answer's figures
    # (finite, and so is their sum: a NaN or an infinity makes the sum so; a sum past the
    # largest float only costs the slower path).
    if not _isfinite((gen.cost or 0.0) + (gen.provider_s or 0.0) + (gen.prompt_cache_saved or 0.0)):
        return _encode_odd(gen)
    try:
        return _dumps(_stored(gen)).decode()
    except (orjson.JSONEncodeError, UnicodeDecodeError):
        return _encode(gen)


def _encode_odd(gen: Generation) -> str:
    """Return :func:`_encode_quick` of a generation with a NaN or an infinite figure: those
    appended in json's spelling."""
    stored = _stored(gen)
    odd = ""
    for name in ("cost", "provider_s", "prompt_cache_saved"):
        value = stored.get(name)
        if value is not None and not math.isfinite(value):
            del stored[name]
            spelling = _NOT_FINITE[math.copysign(1.0, value) if value == value else 0.0]
            odd += f',"{name}":{spelling}'
    try:
        text = orjson.dumps(stored).decode()
    except (orjson.JSONEncodeError, UnicodeDecodeError):
        return _encode(gen)
    return text[:-1] + odd + "}"


_dumps = orjson.dumps
_isfinite = math.isfinite
# json's spelling of the floats JSON has no literal for, by sign (0.0: NaN).
_NOT_FINITE = {0.0: "NaN", 1.0: "Infinity", -1.0: "-Infinity"}


_caches: dict[Path, CallCache] = {}
_caches_lock = threading.Lock()
_open_caches: weakref.WeakSet[CallCache] = weakref.WeakSet()
_inherited: list[object] = []  # a forked child's copies of its parent's connections


def _reopen_caches_in_child() -> None:
    global _caches_lock
    _caches_lock = threading.Lock()
    for cache in list(_open_caches):
        cache.after_fork_in_child()


os.register_at_fork(after_in_child=_reopen_caches_in_child)


def _forget_evicted(directory: Path, names: list[str]) -> None:
    """Drop the cache entries naming images the media cap deleted from ``directory``: in every
    cache open in this process that keeps its images there, else in the home's cache file."""
    folder = directory.absolute()
    served = [c for c in list(_open_caches) if c.media_dir.absolute() == folder]
    if not served and (directory.parent / CACHE_FILE).is_file():
        try:
            served = [open_cache(directory.parent)]
        except ConfigError:
            return  # a cache that cannot be opened holds nothing to serve (its entries miss)
    for cache in served:
        cache.forget_media(names)


on_evict(_forget_evicted)


def open_cache(home: str | Path) -> CallCache:
    """Return this process's cache for the FLOWNB_HOME ``home`` (created on first use)."""
    path = (Path(home) / CACHE_FILE).resolve()
    with _caches_lock:
        cache = _caches.get(path)
        if cache is None or not cache.path.parent.exists():
            cache = _caches[path] = CallCache(path, media_dir_of(Path(home)))
        return cache
