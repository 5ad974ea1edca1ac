"""The call cache: every successful provider call, keyed by what decides its output, in SQLite
under ``FLOWNB_HOME/cache.sqlite``.

The key is a SHA-256 over the provider's identity (name and endpoint, never the key), the node
kind, every model parameter and the rendered prompt, so a change to any of them is a miss.
Only successes are stored (``put`` is called with generations, errors never reach it); a re-run
of an interrupted or partly failed batch therefore calls the provider only for what is missing.

Writes are buffered and committed in batches (every 64 entries or 0.25 s, and when a run ends
or is interrupted), so the event loop is not held by one transaction per call. Lookups see the
buffer too. One :class:`CallCache` per database file per process (see :func:`open_cache`); a
lock makes it safe from several threads, and SQLite's WAL mode lets several processes share it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import sqlite3
import threading
import time
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .errors import ConfigError
from .providers.base import Generation, Kind

__all__ = ["CACHE_FILE", "CallCache", "open_cache"]

CACHE_FILE = "cache.sqlite"
_VERSION = 1  # bump when the stored form of a generation changes
_FLUSH_EVERY = 64
_FLUSH_AFTER = 0.25  # seconds: the most a paid answer waits to be committed

_SCHEMA = """
CREATE TABLE IF NOT EXISTS calls (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL,
    created REAL NOT NULL
) WITHOUT ROWID
"""


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
        self.media_dir = Path(media_dir) if media_dir is not None else self.path.parent / "media"
        self._lock = threading.Lock()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(
                self.path, check_same_thread=False, timeout=self.busy_timeout, isolation_level=None
            )
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute(_SCHEMA)
        except (sqlite3.Error, OSError) as exc:
            raise ConfigError(
                f"the call cache {self.path} cannot be used ({exc}); delete the file, or run "
                "with cache=False / --no-cache / FLOWNB_CACHE=0"
            ) from exc
        self.errors: list[BaseException] = []  # store failures met while running (not raised)
        self._pending: dict[str, str] = {}
        self._timer: threading.Timer | None = None
        # Seconds a paid answer may wait in the buffer; 0 commits each one as it is put (Dask
        # workers sharing a disk: a worker killed mid-batch has committed all it was paid for).
        self.flush_after = _FLUSH_AFTER
        self.hits = 0
        self.misses = 0

    @staticmethod
    def prefix(identity: Mapping[str, Any], kind: Kind, params: Mapping[str, Any]) -> bytes:
        """Return the key material shared by every call of one node (all but the prompt)."""
        material = json.dumps(
            [_VERSION, dict(identity), kind, dict(params)], sort_keys=True, default=str
        )
        return material.encode("utf-8") + b"\0"

    @staticmethod
    def key(prefix: bytes, prompt: str) -> str:
        """Return the cache key of a call: SHA-256 over the node's prefix and the prompt."""
        return hashlib.sha256(prefix + prompt.encode("utf-8", "surrogatepass")).hexdigest()

    def get(self, key: str) -> Generation | None:
        """Return the stored generation (``cached=True``) or ``None``; a store that cannot be
        read right now (locked past the timeout, disk error) counts as a miss, never an error."""
        with self._lock:
            value = self._pending.get(key)
            if value is None:
                try:
                    row = self._db.execute(
                        "SELECT value FROM calls WHERE key = ?", (key,)
                    ).fetchone()
                except sqlite3.Error as exc:
                    self._failed(exc)
                    row = None
                value = row[0] if row is not None else None
        if value is None:
            self.misses += 1
            return None
        data = json.loads(value)
        media = data.get("media")
        if media is not None and not (self.media_dir / media).is_file():
            self.misses += 1  # the image file was deleted: pay for it again
            return None
        self.hits += 1
        return Generation(
            data.get("output", ""),
            media=media,
            model=data.get("model"),
            usage=data.get("usage"),
            cached=True,
        )

    def put(self, key: str, gen: Generation) -> None:
        """Store a successful generation (buffered; committed in batches)."""
        value = json.dumps(
            {"output": gen.output, "media": gen.media, "model": gen.model, "usage": gen.usage}
        )
        with self._lock:
            self._pending[key] = value
            due = len(self._pending) >= _FLUSH_EVERY or self.flush_after <= 0
            if not due and self._timer is None:
                # A paid answer reaches the disk within _FLUSH_AFTER even if no other call
                # follows (the process may be killed while the rest of a batch hangs).
                self._timer = threading.Timer(self.flush_after, self._timed_flush)
                self._timer.daemon = True
                self._timer.start()
        if due:
            self.flush()

    def _timed_flush(self) -> None:
        with contextlib.suppress(sqlite3.ProgrammingError):  # closed meanwhile: nothing to keep
            self.flush()

    def _failed(self, exc: BaseException) -> None:
        if not self.errors:
            warnings.warn(
                f"flownb: the call cache {self.path} failed ({exc}); runs go on, results may "
                "not be cached",
                RuntimeWarning,
                stacklevel=3,
            )
        self.errors.append(exc)

    def flush(self) -> None:
        """Commit every buffered entry in one transaction."""
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            if not self._pending:
                return
            rows = [(k, v, time.time()) for k, v in self._pending.items()]
            try:
                self._db.execute("BEGIN")
                try:
                    self._db.executemany("INSERT OR REPLACE INTO calls VALUES (?, ?, ?)", rows)
                    self._db.execute("COMMIT")
                except BaseException:
                    self._db.execute("ROLLBACK")
                    raise
            except sqlite3.ProgrammingError:
                raise  # closed: a bug of ours, not the disk's
            except sqlite3.Error as exc:
                # Locked past the timeout or a disk error: keep the entries (the generations
                # themselves already reached the caller) and try again at the next flush.
                self._failed(exc)
                return
            self._pending.clear()

    def __len__(self) -> int:
        self.flush()
        with self._lock:
            return self._db.execute("SELECT count(*) FROM calls").fetchone()[0]

    def clear(self) -> None:
        """Forget every entry."""
        with self._lock:
            self._pending.clear()
            self._db.execute("DELETE FROM calls")

    def close(self) -> None:
        """Commit what is buffered and close the database."""
        self.flush()
        with self._lock:
            self._db.close()


_caches: dict[Path, CallCache] = {}
_caches_lock = threading.Lock()


def open_cache(home: str | Path) -> CallCache:
    """Return this process's cache for the FLOWNB_HOME ``home`` (created on first use)."""
    path = (Path(home) / CACHE_FILE).resolve()
    with _caches_lock:
        cache = _caches.get(path)
        if cache is None or not cache.path.parent.exists():
            cache = _caches[path] = CallCache(path, Path(home) / "media")
        return cache
