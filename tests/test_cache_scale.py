# ruff: noqa: F811  (pytest fixtures imported from openai_fake are parameters here)
"""The call cache at the size of a large re-run: a cache of 100,000+ answers, far larger than
SQLite's page cache, gives back exactly what was put, key by key, read in bulk in any order,
with no read system call a row once its pages are at hand (the file is read mapped); a file
moved from the former table reads the same; and a file another process shrinks (``flownb gc``
pruning and vacuuming it) while this one holds it open reads exactly what was kept. A re-run
asking in the order the cache was filled reads each chunk's rows after the last chunk's, in
the table's order, not by key; one in any other order finds exactly the same."""

from __future__ import annotations

import random
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import flownb
from flownb.providers.base import Generation
from flownb.runtime.cache import CallCache, Place, open_cache
from flownb.testing.fake_openai import FakeOpenAI
from tests.conftest import make_flow
from tests.openai_fake import fake, fake_server  # noqa: F401 (fixtures)

PREFIX = CallCache.prefix({"provider": "p"}, "text", {"model": "m"})
CHUNK = 2048  # keys a lookahead's chunk asks for at once (1,024 rows of two nodes)


def key(i: int) -> str:
    return CallCache.key(PREFIX, f"prompt {i}")


def answer(i: int) -> Generation:
    """Return answer ``i``: its text, usage and price all its own."""
    return Generation(
        f"answer {i} " + "x" * (i % 300),
        model="m",
        usage={"prompt_tokens": i, "completion_tokens": i % 97, "total_tokens": i + i % 97},
        cost=i * 1e-7,
        provider_s=i / 1000,
    )


def home(tmp_path: Path) -> Path:
    folder = tmp_path / "home"
    folder.mkdir(mode=0o700, exist_ok=True)
    return folder


def read_in_chunks(cache: CallCache, keys: list[str]) -> dict[str, Generation]:
    """Return what ``cache`` holds of ``keys``, asked a lookahead's chunk at a time."""
    found: dict[str, Generation] = {}
    for start in range(0, len(keys), CHUNK):
        found.update(cache.get_many(keys[start : start + CHUNK]))
    return found


def same_answer(got: Generation, i: int) -> bool:
    want = answer(i)
    return (got.output, got.model, got.usage, got.cost, got.provider_s, got.cached) == (
        want.output,
        want.model,
        want.usage,
        want.cost,
        want.provider_s,
        True,
    )


def read_calls() -> int | None:
    """Return the read system calls this process made so far (``None``: not on this OS)."""
    try:
        with open("/proc/self/io") as io:
            return next(int(line.split()[1]) for line in io if line.startswith("syscr"))
    except (OSError, StopIteration):
        return None


def test_a_cache_of_100k_answers_returns_exactly_what_was_put(tmp_path: Path) -> None:
    db = home(tmp_path) / "cache.sqlite"
    n = 100_000
    order = list(range(n))
    random.Random(42).shuffle(order)  # stored in one order, asked for in another
    cache = CallCache(db, tmp_path / "media")
    cache.put_answers((key(i), answer(i)) for i in order)
    assert not cache.errors
    size = db.stat().st_size + db.with_name(db.name + "-wal").stat().st_size
    assert size > 20 * 2_000 * 1024  # many times SQLite's default page cache (2,000 KiB)
    cache.close()

    cache = CallCache(db, tmp_path / "media")  # a later process: nothing in memory
    wanted = [key(i) for i in range(n)] + [key(n + i) for i in range(100)]  # 100 never put
    found = read_in_chunks(cache, wanted)
    assert len(found) == n
    assert all(same_answer(found[key(i)], i) for i in range(n))
    assert key(n) not in found
    single = cache.get(key(n - 1))
    assert single is not None and same_answer(single, n - 1)

    before = read_calls()
    if before is None:
        cache.close()
        pytest.skip("this OS does not count a process's read system calls")
    again = read_in_chunks(cache, wanted)
    reads = read_calls() - before  # type: ignore[operator]
    assert len(again) == n
    # Its pages read in place (mapped), not copied in with a system call each: with SQLite's
    # own page cache only, asking in chunks read most of the key index again for each chunk,
    # about 0.9 reads a key at this size. The few left are other threads' (the test runner's).
    assert reads < n // 100, reads
    cache.close()


def test_a_large_file_moved_from_the_former_table_reads_the_same(tmp_path: Path) -> None:
    db = home(tmp_path) / "cache.sqlite"
    n = 20_000
    old = sqlite3.connect(db)
    old.execute(
        "CREATE TABLE calls (key TEXT PRIMARY KEY, value TEXT NOT NULL, created REAL NOT NULL)"
        " WITHOUT ROWID"
    )
    writer = CallCache(tmp_path / "scratch.sqlite", tmp_path / "media")
    writer.put_answers((key(i), answer(i)) for i in range(n))
    rows = writer._db.execute("SELECT key, value, created FROM calls").fetchall()
    writer.close()
    old.executemany("INSERT INTO calls VALUES (?, ?, ?)", rows)
    old.commit()
    old.close()
    db.chmod(0o600)

    cache = CallCache(db, tmp_path / "media")  # moves the rows to the rowid table
    found = read_in_chunks(cache, [key(i) for i in reversed(range(n))])
    assert len(found) == n
    assert all(same_answer(found[key(i)], i) for i in range(n))
    (sql,) = cache._db.execute("SELECT sql FROM sqlite_master WHERE name = 'calls'").fetchone()
    assert "WITHOUT ROWID" not in sql.upper()
    cache.close()


def test_a_file_another_process_shrinks_reads_exactly_what_it_kept(tmp_path: Path) -> None:
    folder = home(tmp_path)
    db = folder / "cache.sqlite"
    n = 30_000
    cache = CallCache(db, folder / "media")
    cache.put_answers((key(i), answer(i)) for i in range(n))
    cache._wdb.execute("UPDATE calls SET created = 1.0 WHERE rowid % 2 = 0")  # an old half
    old = {k for (k,) in cache._db.execute("SELECT key FROM calls WHERE created = 1.0")}
    wanted = [key(i) for i in range(n)]
    assert len(read_in_chunks(cache, wanted)) == n  # every page of it read (mapped) here
    grown = db.stat().st_size

    # flownb gc in another process, this one holding the file open: the old half deleted,
    # the file vacuumed and checkpointed, so it shrinks under this process's map.
    script = f"""
        import sqlite3, time
        from flownb.server.housekeeping import prune
        pruned = prune({str(folder)!r}, older_than=3600.0, now=time.time())
        assert pruned.cache_rows_removed == {len(old)}, pruned.cache_rows_removed
        sqlite3.connect({str(db)!r}).execute("PRAGMA wal_checkpoint(TRUNCATE)")
    """
    subprocess.run([sys.executable, "-c", textwrap.dedent(script)], check=True, timeout=300)
    assert db.stat().st_size < grown * 3 // 4  # shrunk: the pages of the old half are gone

    found = read_in_chunks(cache, wanted)
    assert set(found) == set(wanted) - old
    assert all(same_answer(found[key(i)], i) for i in range(n) if key(i) in found)
    assert all(cache.get(k) is None for k in sorted(old)[:50])
    assert not cache.errors
    cache.close()


def lookups(cache: CallCache, keys: list[str], place: Place | None) -> tuple[dict, list[str]]:
    """Return what ``cache`` holds of ``keys`` asked a chunk at a time with ``place``, and the
    statements the lookups ran."""
    statements: list[str] = []
    cache._db.set_trace_callback(statements.append)
    try:
        found: dict[str, Generation] = {}
        for start in range(0, len(keys), CHUNK):
            found.update(cache.get_many(keys[start : start + CHUNK], place))
    finally:
        cache._db.set_trace_callback(None)
    return found, statements


def by_key(statements: list[str]) -> int:
    return sum("WHERE key IN" in s for s in statements)


def in_order(statements: list[str]) -> int:
    return sum("WHERE rowid >" in s for s in statements)


def test_a_rerun_in_the_order_of_the_fill_reads_the_rows_in_order_not_by_key(
    tmp_path: Path,
) -> None:
    n = 20_000
    cache = CallCache(home(tmp_path) / "cache.sqlite", tmp_path / "media")
    for start in range(0, n, 500):  # stored as a run folds them: a few hundred at a time
        cache.put_many((key(i), answer(i)) for i in range(start, min(n, start + 500)))
    # Two answers asked for out of turn: found all the same.
    wanted = [key(i) for i in range(n)]
    wanted[100], wanted[9_000] = wanted[9_000], wanted[100]
    found, statements = lookups(cache, wanted, Place())
    assert len(found) == n and all(same_answer(found[key(i)], i) for i in range(n))
    chunks = -(-n // CHUNK)
    # The first chunk by key (no place yet), and the chunks after the two whose rows did not
    # lie together (each held one far away); every other chunk read in the table's order,
    # looking up by key only the one answer it did not find there.
    assert in_order(statements) == chunks - 3, statements
    assert by_key(statements) == 4, statements
    # Without a place: every chunk by key, the same answers.
    alone, statements = lookups(cache, wanted, None)
    assert alone == found and by_key(statements) == chunks and in_order(statements) == 0
    cache.close()


@pytest.mark.parametrize("order", ["shuffled", "reversed", "every other"])
def test_a_rerun_in_another_order_finds_the_same(tmp_path: Path, order: str) -> None:
    n = 20_000
    cache = CallCache(home(tmp_path) / "cache.sqlite", tmp_path / "media")
    cache.put_many((key(i), answer(i)) for i in range(n))  # the table in the order of i
    numbers = list(range(n))
    if order == "shuffled":
        random.Random(7).shuffle(numbers)
    elif order == "reversed":
        numbers.reverse()
    else:
        numbers = numbers[::2]
    missing = [key(n + i) for i in range(50)]  # never stored
    wanted = [key(i) for i in numbers] + missing
    found, statements = lookups(cache, wanted, Place())
    assert set(found) == {key(i) for i in numbers}
    assert all(same_answer(found[key(i)], i) for i in numbers)
    # Every chunk had keys the rows after the last chunk's did not hold: looked up by key.
    assert by_key(statements) == -(-len(wanted) // CHUNK)
    if order != "every other":
        # No chunk's rows lay after the last one's: read in order at most once, to no avail
        # (every other row: half of each chunk is found that way, so it goes on).
        assert in_order(statements) == (1 if order == "reversed" else 0), statements
    cache.close()


def test_a_place_sees_answers_queued_and_stored_meanwhile(tmp_path: Path) -> None:
    cache = CallCache(home(tmp_path) / "cache.sqlite", tmp_path / "media")
    cache.put_answers((key(i), answer(i)) for i in range(4 * CHUNK))
    place = Place()
    first = cache.get_many([key(i) for i in range(CHUNK)], place)
    assert len(first) == CHUNK
    # Replaced since: the newer answer is read (a row replaced moves to the table's end).
    cache.put_answers([(key(CHUNK + 1), answer(0))])
    cache.put_soon(key(CHUNK + 2), answer(1))  # queued, maybe not yet committed
    second = cache.get_many([key(i) for i in range(CHUNK, 2 * CHUNK)], place)
    assert len(second) == CHUNK
    assert same_answer(second[key(CHUNK + 1)], 0) and same_answer(second[key(CHUNK + 2)], 1)
    assert all(same_answer(second[key(i)], i) for i in range(CHUNK + 3, 2 * CHUNK))
    cache.close()


def test_a_cached_rerun_reads_its_later_chunks_in_the_tables_order(
    fake: FakeOpenAI, flownb_env: Path
) -> None:
    """A batch re-run as it was first run: its lookahead's chunks after the first are read
    where the last one's rows ended, the results are the first run's, nothing is sent."""
    flow = flownb.load_flow(
        make_flow({"intro": "Intro {topic}.", "title": "Title {topic}."}, ["topic"])
    )
    batch = [{"topic": f"t{i}"} for i in range(3000)]  # three chunks of the lookahead
    first = flow.run_batch(batch, concurrency=8)
    fake.reset()
    cache = open_cache(flownb_env)
    statements: list[str] = []
    cache._db.set_trace_callback(statements.append)
    try:
        again = flow.run_batch(batch)
    finally:
        cache._db.set_trace_callback(None)
    assert fake.requests == []
    assert [dict(r) for r in again] == [dict(r) for r in first]
    assert all(r.cached == {"intro", "title"} for r in again)
    assert in_order(statements) == 2, statements  # the second and third chunks
