"""The run log: one row per run (per batch element) in SQLite under ``FLOWNB_HOME/runs.sqlite``,
read back as a DataFrame with :func:`runs`.

Each row keeps the flow, the inputs, the outputs, the provider and model(s), the latency, the
token usage the provider reported (fresh calls only: cached outputs cost nothing; the details
such as ``cached_tokens``, ``reasoning_tokens`` and ``image_tokens`` kept apart), which outputs
came from the cache, the error of a failed run, and the money (:mod:`flownb.config.pricing`):
``cost_usd`` (what the run spent: its paid calls; a cache hit costs 0), ``saved_usd`` (what its
cached outputs cost when bought), ``price_usd`` (its list price: every call at what it cost when
bought, cached or not, the same on every re-run) and ``unpriced_calls`` (calls without a known
price, left out of those sums, which are then lower bounds; a sum is NaN, never 0, when none of
its calls has a price). Rows are collected in memory while a batch
runs and written by a writer thread, one INSERT per chunk of rows (every 500 rows of real calls,
every 10,000 rows of an offline batch, and when interrupted), so logging stays off the run's path.

How a chunk is stored: the JSON list of its rows (rows answered at once: their columns, see
:mod:`flownb.runtime.logtext`), compressed with Zstandard (level 1: a few bytes to a few tens of
bytes a row, against some 150-260 as text; the writer thread compresses it in one call that
lets the run's thread go on meanwhile), with the chunk's number of rows (``n``) and its last
finishing time (``finished``) beside it, which ``flownb gc`` reads. Chunks compressed with zlib
(as flownb wrote them before) are read as they are, told apart by their first bytes, and so are
chunks written before compression (their rows stored as JSON text, without ``n`` and
``finished``); the ``runs`` SQL view expands those only: :func:`runs` reads every chunk.
"""

from __future__ import annotations

import contextlib
import math
import os
import sqlite3
import sys
import threading
import time
import uuid
import weakref
import zlib
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from itertools import repeat
from operator import itemgetter
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import orjson

from ..errors import ConfigError
from ..infra.private import private_dir, private_file
from ..infra.writable import folder_problem, unwritable
from ..show.frame_views import mark_frame
from .logrows import inline_tail, log_rows
from .logtext import columns_text, expand

if TYPE_CHECKING:
    import pandas as pd

    from .result import OnResult, RunResult

__all__ = ["RUNLOG_FILE", "RunLog", "RunRecorder", "open_runlog", "runs"]

RUNLOG_FILE = "runs.sqlite"
_FLUSH_EVERY = 500
_FLUSH_AFTER = 1.0  # seconds
# Inline (offline) runs: rarely, so the writer thread seldom competes with the run, but often
# enough that a 100,000-row batch never holds more than this many results for the log.
_INLINE_FLUSH_EVERY = 10_000
_WAL_PAGES = 4096  # pages of the WAL (4 KiB each) that start a checkpoint

# A batch's rows are stored as chunks: one JSON array of up to 10,000 rows per table row (or,
# for rows answered at once, one JSON object of their columns: see logtext), compressed (see
# the module docstring), so logging costs one encoding and one INSERT per chunk, not per run.
# ``rows`` holds the compressed JSON as a BLOB (a chunk written before compression: the JSON
# as TEXT); ``n`` and ``finished`` (NULL in those older chunks) let SQL count and age
# chunks without reading their rows.
_SCHEMA = """
CREATE TABLE IF NOT EXISTS chunks (
    id INTEGER PRIMARY KEY,
    run_id TEXT NOT NULL,
    flow TEXT NOT NULL,
    provider TEXT NOT NULL,
    rows TEXT NOT NULL,
    n INTEGER,
    finished REAL
);
CREATE INDEX IF NOT EXISTS chunks_flow ON chunks (flow);
"""
# The columns a run log made before compression lacks (added, NULL in its chunks).
_ADDED = {"n": "INTEGER", "finished": "REAL"}
# Zstandard's level 1: a chunk's JSON repeats its keys, glue and prompt text on every row, which
# level 1 shrinks 10- to 60-fold at some 1.7 GB/s (zlib's level 1, used before: 300-450 MB/s,
# for up to three times the bytes). Higher levels are slower and, on such text, no smaller.
_LEVEL = 1
# How a Zstandard frame begins; a zlib stream (what chunks written before hold) begins with 0x78.
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
# The ``runs`` view expands the chunks stored as JSON text (written before compression) into
# one SQL row per run, for anyone querying the file directly; flownb.runs() reads them all.
_VIEW = """
DROP VIEW IF EXISTS runs;
CREATE VIEW runs AS
SELECT c.run_id AS run_id, c.flow AS flow, c.provider AS provider,
       json_extract(r.value, '$[0]') AS idx, json_extract(r.value, '$[1]') AS finished,
       json_extract(r.value, '$[2]') AS model, json_extract(r.value, '$[3]') AS inputs,
       json_extract(r.value, '$[4]') AS outputs, json_extract(r.value, '$[5]') AS latency,
       json_extract(r.value, '$[6]') AS prompt_tokens,
       json_extract(r.value, '$[7]') AS completion_tokens,
       json_extract(r.value, '$[8]') AS total_tokens, json_extract(r.value, '$[9]') AS cached,
       json_extract(r.value, '$[10]') AS error, json_extract(r.value, '$[11]') AS usage_details,
       json_extract(r.value, '$[12]') AS cost_usd, json_extract(r.value, '$[13]') AS saved_usd,
       json_extract(r.value, '$[14]') AS price_usd, json_extract(r.value, '$[15]') AS unpriced_calls
FROM chunks AS c, json_each(CASE WHEN typeof(c.rows) = 'text' THEN c.rows ELSE '[]' END) AS r;
"""
_INSERT = "INSERT INTO chunks (run_id, flow, provider, rows, n, finished) VALUES (?, ?, ?, ?, ?, ?)"

COLUMNS = [
    "run_id",
    "index",
    "finished",
    "flow",
    "provider",
    "model",
    "inputs",
    "outputs",
    "latency",
    "prompt_tokens",
    "completion_tokens",
    "total_tokens",
    "cached",
    "cached_outputs",
    "error",
    "usage_details",
    "cost_usd",
    "saved_usd",
    "price_usd",
    "unpriced_calls",
]


class RunLog:
    """The run-log database. Safe from several threads (one lock); WAL for several processes.

    A forked child gets its own connection, writer thread and lock (the parent's are unusable
    there), so a flow loaded before the fork keeps logging in the child.

    Raises:
        ConfigError: the file cannot be used as the run log.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._db = self._connect()
        # Serialising and inserting happen on one writer thread, off the run's path; pending
        # writes finish before the interpreter exits, and readers wait for them (``sync``).
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="flownb-runlog")
        self.write_errors: list[BaseException] = []
        _open_logs.add(self)

    def _connect(self) -> sqlite3.Connection:
        try:
            private_dir(self.path.parent)
            private_file(self.path)  # 0600 before SQLite opens it: its WAL files take its mode
            db = sqlite3.connect(
                self.path, check_same_thread=False, timeout=30, isolation_level=None
            )
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            # A 10,000-row batch logs about 2.6 MB: with SQLite's default (a checkpoint, and its
            # fsync, once the WAL passes 4 MB) every other batch would pay one; 16 MB spreads
            # the same copying over fewer, larger checkpoints.
            db.execute(f"PRAGMA wal_autocheckpoint={_WAL_PAGES}")
            db.executescript(_SCHEMA)
            have = {row[1] for row in db.execute("PRAGMA table_info(chunks)")}
            for name, kind in _ADDED.items():
                if name not in have:
                    with contextlib.suppress(sqlite3.OperationalError):  # another process did
                        db.execute(f"ALTER TABLE chunks ADD COLUMN {name} {kind}")
        except (sqlite3.Error, OSError) as exc:
            if folder_problem(self.path.parent) is not None:  # deleting the file cannot help
                raise unwritable(
                    self.path.parent,
                    exc,
                    f"the run log ({self.path.name})",
                    switch="run with log=False / FLOWNB_RUNLOG=0",
                ) from exc
            raise ConfigError(
                f"the run log {self.path} cannot be used ({exc}); delete the file, or run with "
                "log=False / FLOWNB_RUNLOG=0"
            ) from exc
        # An SQLite without JSON functions cannot make the view; it is a convenience only.
        with contextlib.suppress(sqlite3.OperationalError):
            db.executescript(_VIEW)
        return db

    def after_fork_in_child(self) -> None:
        """After a fork, in the child: a connection, writer thread and lock of its own.

        SQLite forbids using a connection across a fork, and closing the inherited one would
        drop the child's own file locks, so it is kept, unused, for the child's lifetime.
        """
        _inherited.extend((self._db, self._writer))
        self._lock = threading.Lock()
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="flownb-runlog")
        try:
            self._db = self._connect()
        except ConfigError as exc:  # the writes fail (into write_errors); the run goes on
            self.write_errors.append(exc)
            self._db = sqlite3.connect(":memory:", check_same_thread=False)

    def submit(self, job: Callable[[], None]) -> None:
        """Run ``job`` on the writer thread (jobs run one at a time, in order)."""

        def guarded() -> None:
            try:
                job()
            except Exception as exc:  # a full disk must not break the run that was logged
                self.write_errors.append(exc)

        self._writer.submit(guarded)

    def sync(self) -> None:
        """Return once every write submitted so far is committed."""
        self._writer.submit(lambda: None).result()

    def recorder(
        self,
        flow: str,
        provider: str,
        batch: Sequence[Mapping[str, str]],
        *,
        detailed: bool = True,
        run_id: str | None = None,
    ) -> RunRecorder:
        """Return a recorder for one batch of ``flow`` (wrap its ``on_result``, then ``flush``).

        ``detailed=False`` (inline providers: no tokens, nothing cached, one model) skips the
        per-generation bookkeeping, keeping a 10,000-row offline batch's log to milliseconds.
        ``run_id`` names the batch (a fresh one by default); a batch run again under the same
        id (a Dask partition rescheduled after its worker died) is read back once by :func:`runs`.
        """
        return RunRecorder(self, flow, provider, batch, detailed, run_id)

    def write(self, run_id: str, flow: str, provider: str, rows: list[list[Any]]) -> None:
        """Append one chunk of a batch's rows in one transaction."""
        if rows:
            finished = max(row[1] for row in rows)
            self.write_text(run_id, flow, provider, orjson.dumps(rows), len(rows), finished)

    def write_text(
        self, run_id: str, flow: str, provider: str, rows: bytes, count: int, finished: float
    ) -> None:
        """Append one chunk of a batch's rows, given as the UTF-8 JSON text of their list
        (compressed, not decoded here): ``count`` rows, the last finished at ``finished``."""
        packed = _compress(rows)  # outside the lock: other threads run meanwhile
        with self._lock:
            self._db.execute(_INSERT, (run_id, flow, provider, packed, count, finished))

    def read(self, flow: str | None = None) -> list[tuple[str, str, str, list[Any]]]:
        """Return every chunk (oldest first) as ``(run_id, flow, provider, rows)``."""
        self.sync()
        sql = "SELECT run_id, flow, provider, rows FROM chunks"
        args: list[Any] = []
        if flow is not None:
            sql += " WHERE flow = ?"
            args.append(flow)
        with self._lock:
            chunks = self._db.execute(sql + " ORDER BY id", args).fetchall()
        return [(r, f, p, _rows_of(orjson.loads(_unpacked(rows)))) for r, f, p, rows in chunks]

    def clear(self) -> None:
        """Delete every row."""
        self.sync()
        with self._lock:
            self._db.execute("DELETE FROM chunks")


def _zstd() -> ModuleType:
    """Return the Zstandard module: the standard library's from Python 3.14, its backport
    before. Imported when a chunk is first compressed or read (on the writer thread, for a
    run), so no run's start waits for it."""
    if sys.version_info >= (3, 14):
        from compression import zstd
    else:
        from backports import zstd
    return zstd


def _compress(text: bytes) -> bytes:
    """Return ``text`` as one Zstandard frame (:data:`_LEVEL`): a chunk in one call, with its
    output allocated at once, so the thread leaves the GIL once a chunk (zlib's output grew in
    blocks, each taking the GIL back from the run's thread)."""
    return _zstd().compress(text, _LEVEL)


def _unpacked(rows: bytes | str) -> bytes | str:
    """Return a chunk's rows as JSON text: decompressed (Zstandard, or zlib for chunks written
    before), or as stored before compression."""
    if not isinstance(rows, bytes):
        return rows
    if rows[:4] != _ZSTD_MAGIC:
        return zlib.decompress(rows)
    return _zstd().decompress(rows)


def _rows_of(chunk: list[list[Any]] | dict[str, Any]) -> list[list[Any]]:
    """Return a chunk's rows: a list of rows, or rows stored as columns (see
    :mod:`flownb.runtime.logtext`)."""
    return expand(chunk) if isinstance(chunk, dict) else chunk


class RunRecorder:
    """Collects one batch's outcomes as they arrive; serialises and writes them in bulk."""

    __slots__ = (
        "_batch",
        "_detailed",
        "_flow",
        "_flushing",
        "_log",
        "_pending",
        "_provider",
        "run_id",
    )

    def __init__(
        self,
        log: RunLog,
        flow: str,
        provider: str,
        batch: Sequence[Mapping[str, str]],
        detailed: bool = True,
        run_id: str | None = None,
    ) -> None:
        self._detailed = detailed
        self._log = log
        self._flow = flow
        self._provider = provider
        self._batch = batch
        self._pending: list[tuple[int, float, RunResult | None, BaseException | None]] = []
        # The loop thread, a timer thread and the caller's thread may all flush at once: one
        # at a time, or two could take the same rows and drop the ones appended in between.
        self._flushing = threading.Lock()
        self.run_id = run_id or uuid.uuid4().hex[:16]

    def record(self, i: int, result: RunResult | None, exc: BaseException | None) -> None:
        """Record one element's outcome (an observer of the run; see ``Observers``)."""
        pending = self._pending
        pending.append((i, time.time(), result, exc))
        self._added(first=len(pending) == 1)

    __call__ = record  # the recorder is the run's observer (see ``Observers``)

    def many(self, indexes: Sequence[int], results: Sequence[RunResult]) -> None:
        """Record elements ``indexes`` as finished now with ``results`` (a chunk of cached
        rows; see :func:`flownb.runtime.result.report_all`), as one :meth:`record` each would."""
        if not indexes:
            return
        pending = self._pending
        first = not pending
        # Made first, then added in one step: a flush on the timer thread sees all or none.
        pending += list(zip(indexes, repeat(time.time()), results, repeat(None), strict=False))
        self._added(first=first)

    def _added(self, *, first: bool) -> None:
        """Flush once enough outcomes are pending; after the first of a batch with real calls,
        flush within a second (``first``: nothing was pending before them)."""
        # Real calls: a chunk every 500 rows, so a crash loses little. Inline (offline) runs:
        # a chunk every 10,000 rows (see _INLINE_FLUSH_EVERY).
        if len(self._pending) >= (_FLUSH_EVERY if self._detailed else _INLINE_FLUSH_EVERY):
            self.flush()
        elif first and self._detailed:
            # Real calls: what finished reaches the log within a second even if the rest of
            # the batch hangs and the process is killed.
            timer = threading.Timer(_FLUSH_AFTER, self.flush)
            timer.daemon = True
            timer.start()

    def record_columns(
        self,
        inputs: Mapping[str, Sequence[str]],
        outputs: Mapping[str, Sequence[str]],
        model: str | None,
        seconds: float,
        *,
        start: int = 0,
        rows: int | None = None,
    ) -> None:
        """Record ``rows`` elements of the batch from ``start`` (default: all of them) as
        answered at once, without an error (see :mod:`flownb.runtime.columns`): ``inputs`` maps
        each of the batch's variables, and ``outputs`` each output name, to one value per
        element; each element's latency is its even share of ``seconds``.

        The rows are those :meth:`record` would log for an inline run, stored as columns (see
        :mod:`flownb.runtime.logtext`: one encoder call); the writer thread compresses and
        inserts them while the caller goes on."""
        finished = time.time()
        n = len(self._batch) - start if rows is None else rows
        # After the outputs: the latency, then what every inline row ends with.
        tail = [seconds / n if n else 0.0, *inline_tail(self._provider)]
        text = columns_text(inputs, outputs, [finished, model], tail, first=start, rows=n)
        log = self._log
        log.submit(
            partial(log.write_text, self.run_id, self._flow, self._provider, text, n, finished)
        )

    def wrap(self, on_result: OnResult) -> OnResult:
        """Return an ``on_result`` that records each outcome, then calls ``on_result``."""
        record = self.record

        def recorded(i: int, result: RunResult | None, exc: BaseException | None) -> None:
            record(i, result, exc)
            on_result(i, result, exc)

        return recorded

    def flush(self) -> None:
        """Hand what was recorded so far to the writer thread (each outcome is written once,
        whichever threads flush at the same time)."""
        pending = self._pending
        with self._flushing:
            taken = pending[:]
            if not taken:
                return
            # Appends only ever go to the end: deleting the front keeps what arrived meanwhile.
            del pending[: len(taken)]
            # The rows are made and encoded here, and only inserted on the writer thread: its
            # Python work would take turns with this thread's for the GIL, and each time this
            # one waits on SQLite (a cached re-run's lookups) the writer would hold it for up to
            # a switch interval (5 ms). Submitted under the lock, so chunks stay in order.
            rows = log_rows(taken, self._batch, self._provider, detailed=self._detailed)
            last = max(map(itemgetter(1), taken))
            log, write = self._log, self._log.write_text
            log.submit(
                partial(write, self.run_id, self._flow, self._provider, rows, len(taken), last)
            )


_logs: dict[Path, RunLog] = {}
_logs_lock = threading.Lock()
_open_logs: weakref.WeakSet[RunLog] = weakref.WeakSet()
_inherited: list[object] = []  # a forked child's copies of its parent's connections and threads


def _reopen_logs_in_child() -> None:
    global _logs_lock
    _logs_lock = threading.Lock()
    for log in list(_open_logs):
        log.after_fork_in_child()


os.register_at_fork(after_in_child=_reopen_logs_in_child)


def open_runlog(home: str | Path) -> RunLog:
    """Return this process's run log for the FLOWNB_HOME ``home`` (created on first use)."""
    path = (Path(home) / RUNLOG_FILE).resolve()
    with _logs_lock:
        log = _logs.get(path)
        if log is None or not path.parent.exists():
            log = _logs[path] = RunLog(path)
        return log


def runs(
    flow: str | None = None, *, limit: int | None = None, by: str | Sequence[str] | None = None
) -> pd.DataFrame:
    """Return the run log as a DataFrame, oldest first: one row per run (batch element); with
    ``by``, the totals per ``"flow"``, ``"model"`` or ``"day"`` (UTC), or a list of those.

    Columns: ``run_id`` (one per batch), ``index`` (position in the batch), ``finished``
    (timestamp), ``flow``, ``provider``, ``model``, ``inputs`` and ``outputs`` (dicts),
    ``latency`` (seconds), ``prompt_tokens`` / ``completion_tokens`` / ``total_tokens`` (as the
    provider reported them for fresh calls; missing otherwise), ``cached`` (every output came
    from the cache), ``cached_outputs`` (their names), ``error`` (``code: message``),
    ``usage_details`` (a dict of the other token counts the provider reported for fresh calls,
    summed over the run's calls: ``cached_tokens``, ``reasoning_tokens``, ``image_tokens``, ...;
    ``None`` when there were none), ``cost_usd`` (US dollars the run spent: 0 for fully cached
    and offline runs; NaN when no paid call has a known price, or the run failed),
    ``saved_usd`` (what its cached outputs cost when bought), ``price_usd`` (the run's list
    price: every call at what it cost when bought, cached or not, the same on every re-run) and
    ``unpriced_calls`` (calls without a known price: the money figures sum the others, so they
    are lower bounds when this is over 0; missing for runs logged before it was kept).

    The totals (``by=``) have one row per group: ``runs``, ``errors``, ``prompt_tokens``,
    ``completion_tokens``, ``cost_usd``, ``saved_usd`` and ``price_usd`` (sums of the known
    values; NaN when none is known) and ``unpriced`` (successful runs some or all of whose calls
    have no price: the sums leave those calls out).

    ``flow`` keeps one flow's runs (its file name without ``.json``); ``limit`` the last ones.
    A row logged twice under one ``run_id`` and ``index`` (a Dask partition recomputed after
    its worker died) appears once, as its last write.

    Raises:
        ConfigError: ``by`` names something other than flow, model or day.
    """
    import pandas as pd

    from ..config.settings import resolve_run_config

    home = resolve_run_config(local=False).home
    chunks = open_runlog(home).read(flow) if (home / RUNLOG_FILE).exists() else []
    records = []
    for run_id, flow_name, provider, rows in chunks:
        for row in rows:
            idx, finished, model, inputs, out, latency, pt, ct, tt, cached, error = row[:11]
            # Rows logged before usage details (11 fields) have none; failed runs and rows
            # logged before costs were kept (under 14 fields) have an unknown cost (NaN).
            details = row[11] if len(row) > 11 else None
            cost, saved = (row[12], row[13]) if len(row) > 13 else (None, None)
            # Rows logged before prices were kept (14 fields): the price is unknown.
            price, unpriced = (row[14], row[15]) if len(row) > 15 else (None, None)
            cached_names = cached or []
            records.append(
                (
                    run_id,
                    idx,
                    finished,
                    flow_name,
                    provider,
                    model,
                    inputs,
                    out,
                    latency,
                    pt,
                    ct,
                    tt,
                    bool(out) and len(cached_names) >= len(out),
                    cached_names,
                    error,
                    details,
                    math.nan if cost is None else cost,
                    math.nan if saved is None else saved,
                    math.nan if price is None else price,
                    unpriced,
                )
            )
    records = _last_writes(records, limit)
    columns = list(zip(*records, strict=True)) if records else [()] * len(COLUMNS)
    # Object columns keep None for "not there" (no NaN standing in for a missing dict or error).
    df = pd.DataFrame(
        {
            name: pd.Series(list(values), dtype=object)
            for name, values in zip(COLUMNS, columns, strict=True)
        }
    )
    df = df.astype(_DTYPES)
    df["finished"] = pd.to_datetime(df["finished"].astype(float), unit="s", utc=True)
    # Marked: after %load_ext flownb, the outputs' "$" are shown as written (see frame_html).
    return mark_frame(df if by is None else _totals(df, by))


# The typed columns of runs()'s frame (the others stay objects: None for "not there").
_DTYPES = {
    "index": "int64",
    "prompt_tokens": "Int64",
    "completion_tokens": "Int64",
    "total_tokens": "Int64",
    "cached": bool,
    "latency": float,
    "cost_usd": float,
    "saved_usd": float,
    "price_usd": float,
    "unpriced_calls": "Int64",
}


def _last_writes(records: list[tuple[Any, ...]], limit: int | None) -> list[tuple[Any, ...]]:
    """Return ``records`` (run_id and index first) with only the last write of each (run_id,
    index) (a recomputed Dask partition logs its rows again), the last ``limit`` of them."""
    last = {(r[0], r[1]): n for n, r in enumerate(records)}
    if len(last) < len(records):
        records = [records[n] for n in sorted(last.values())]
    if limit is not None:
        records = records[-limit:] if limit > 0 else []
    return records


_GROUPS = ("flow", "model", "day")


def _totals(df: pd.DataFrame, by: str | Sequence[str]) -> pd.DataFrame:
    keys = [by] if isinstance(by, str) else list(by)
    unknown = [k for k in keys if k not in _GROUPS]
    if unknown or not keys:
        raise ConfigError(f"runs(by=...) takes flow, model or day (or a list), got {by!r}")
    frame = df.assign(
        day=df["finished"].dt.strftime("%Y-%m-%d"),
        model=df["model"].fillna("-"),
        errors=df["error"].notna(),
        # Runs some of whose calls have no price: their sums are lower bounds ("at least").
        unpriced=df["error"].isna()
        & (df["cost_usd"].isna() | (df["unpriced_calls"].fillna(0) > 0)),
        runs=1,
    )
    grouped = frame.groupby(keys, sort=True)
    out = grouped.agg(
        runs=("runs", "sum"),
        errors=("errors", "sum"),
        prompt_tokens=("prompt_tokens", "sum"),
        completion_tokens=("completion_tokens", "sum"),
        unpriced=("unpriced", "sum"),
    )
    # min_count=1: a group with no known price sums to NaN, never to a 0 that reads as free.
    out["cost_usd"] = grouped["cost_usd"].sum(min_count=1)
    out["saved_usd"] = grouped["saved_usd"].sum(min_count=1)
    out["price_usd"] = grouped["price_usd"].sum(min_count=1)
    return out[
        [
            "runs",
            "errors",
            "prompt_tokens",
            "completion_tokens",
            "cost_usd",
            "saved_usd",
            "price_usd",
            "unpriced",
        ]
    ]
