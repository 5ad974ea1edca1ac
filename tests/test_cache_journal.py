"""The call cache's journal: every answer a killed process received is found by the next one,
a cut-short line is skipped, a live process's journal is left alone, the journal is emptied
once folded, a cache file from before the rowid table is moved to it, and a folder where no
journal can be made leaves the cache working as it did without one."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from flownb.providers.base import Generation
from flownb.runtime.cache import CallCache
from flownb.runtime.cache_journal import Journal, journal_dir, read_lines

PREFIX = CallCache.prefix({"provider": "p"}, "text", {"model": "m"})


def home(tmp_path: Path) -> Path:
    """Return a private folder for the cache (a FLOWNB_HOME: 0700)."""
    folder = tmp_path / "home"
    folder.mkdir(mode=0o700, exist_ok=True)
    return folder


def key(i: int) -> str:
    return CallCache.key(PREFIX, f"prompt {i}")


def stored_count(db: Path) -> int:
    with sqlite3.connect(db) as reader:
        return int(reader.execute("SELECT count(*) FROM calls").fetchone()[0])


def lines_of(journal: Path) -> list[tuple[str, str]]:
    """Return the whole lines a journal file holds, as the next process would read them."""
    return list(read_lines(journal.read_bytes()))


def journals(db: Path) -> list[Path]:
    folder = journal_dir(db)
    return sorted(folder.glob("*.log")) if folder.is_dir() else []


def putter(db: Path, tmp_path: Path, n: int) -> subprocess.Popen[str]:
    """Return a process that has put ``n`` answers (``out 0`` ...) as a run on an event loop
    does and never folds them (its writer waits an hour between folds), waiting to be killed."""
    script = textwrap.dedent(
        f"""
        import time
        from flownb.runtime import cache as c
        from flownb.providers.base import Generation
        c._FOLD_EVERY = 3600
        cache = c.CallCache({str(db)!r}, {str(tmp_path / "media")!r})
        prefix = c.CallCache.prefix({{"provider": "p"}}, "text", {{"model": "m"}})
        for i in range({n}):
            cache.put_soon(c.CallCache.key(prefix, f"prompt {{i}}"), Generation(f"out {{i}}"))
        print("put", flush=True)
        time.sleep(600)
        """
    )
    child = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    line = child.stdout.readline()
    if line != "put\n":
        child.kill()
        raise AssertionError(child.stderr.read() if child.stderr else "no answers put")
    return child


def test_answers_of_a_process_killed_before_its_fold_are_found_by_the_next(
    tmp_path: Path,
) -> None:
    db = home(tmp_path) / "cache.sqlite"
    child = putter(db, tmp_path, 50)
    try:
        assert stored_count(db) == 0  # nothing folded: all 50 are in its journal alone
        [journal] = journals(db)
        # A live process's journal is not another's to fold.
        alive = CallCache(db, tmp_path / "media")
        assert alive.get(key(0)) is None and journal.exists()
        alive.close()
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    cache = CallCache(db, tmp_path / "media")  # the next process to open the cache
    found = cache.get_many(key(i) for i in range(50))
    assert sorted(g.output for g in found.values()) == sorted(f"out {i}" for i in range(50))
    assert stored_count(db) == 50
    assert journals(db) == []  # folded, then deleted
    cache.close()


def test_a_cut_short_last_line_and_lines_not_of_the_shape_are_skipped(tmp_path: Path) -> None:
    db = home(tmp_path) / "cache.sqlite"
    folder = journal_dir(db)
    folder.mkdir(mode=0o700)
    good = f'{key(1)}\t{{"output": "one"}}\n'
    cut = f'{key(2)}\t{{"output": "tw'  # the crash struck mid-write
    (folder / "123-abc.log").write_text(f"{good}no tab here\n\t\n{cut}")
    (folder / "123-abc.log").chmod(0o600)
    cache = CallCache(db, tmp_path / "media")
    one = cache.get(key(1))
    assert one is not None and one.output == "one" and one.cached
    assert cache.get(key(2)) is None
    assert stored_count(db) == 1
    cache.close()


def test_the_journal_is_emptied_once_folded_and_gone_after_close(tmp_path: Path) -> None:
    db = home(tmp_path) / "cache.sqlite"
    cache = CallCache(db, tmp_path / "media")
    for i in range(5):
        cache.put_soon(key(i), Generation(f"out {i}"))
    [journal] = journals(db)
    assert len(lines_of(journal)) == 5  # each answer is in the file at once
    cache.flush()  # what a run's end does
    assert stored_count(db) == 5
    assert lines_of(journal) == []  # every line is in the database
    assert journal.read_bytes().strip(b"\0") == b""  # zeroed: a crash now finds none
    cache.put_soon(key(5), Generation("out 5"))
    deadline = time.monotonic() + 60
    while stored_count(db) < 6 and time.monotonic() < deadline:  # the writer thread folds it
        time.sleep(0.01)
    assert stored_count(db) == 6
    cache.close()
    assert journals(db) == []


def test_a_journal_grown_past_its_bound_is_swapped_at_a_fold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flownb.runtime import cache as cache_module

    monkeypatch.setattr(cache_module, "_JOURNAL_MAX", 1)
    db = home(tmp_path) / "cache.sqlite"
    cache = CallCache(db, tmp_path / "media")
    cache.put_soon(key(0), Generation("out 0"))
    [first] = journals(db)
    cache.flush()
    cache.put_soon(key(1), Generation("out 1"))
    [second] = journals(db)
    assert second != first and not first.exists()  # folded, so deleted
    assert second.read_text().startswith(key(1))
    cache.close()
    again = CallCache(db, tmp_path / "media")
    assert [g.output for g in again.get_many([key(0), key(1)]).values()] == ["out 0", "out 1"]
    again.close()


def test_a_cache_file_from_before_the_rowid_table_is_moved_to_it(tmp_path: Path) -> None:
    db = home(tmp_path) / "cache.sqlite"
    old = sqlite3.connect(db)
    old.execute(
        "CREATE TABLE calls (key TEXT PRIMARY KEY, value TEXT NOT NULL, created REAL NOT NULL)"
        " WITHOUT ROWID"
    )
    old.execute("INSERT INTO calls VALUES (?, ?, ?)", (key(0), '{"output": "kept"}', 1.0))
    old.commit()
    old.close()
    db.chmod(0o600)
    cache = CallCache(db, tmp_path / "media")
    kept = cache.get(key(0))
    assert kept is not None and kept.output == "kept"
    cache.put(key(1), Generation("new"))
    cache.close()
    with sqlite3.connect(db) as reader:
        [(sql,)] = reader.execute("SELECT sql FROM sqlite_master WHERE name = 'calls'")
        assert "WITHOUT ROWID" not in sql.upper()
        # What an older flownb writes still fits: three values, replaced by key.
        reader.execute("INSERT OR REPLACE INTO calls VALUES (?, ?, ?)", (key(1), "{}", 2.0))
        assert reader.execute("SELECT count(*) FROM calls").fetchone()[0] == 2


def test_a_file_where_the_journals_folder_would_be_leaves_the_cache_as_it_was(
    tmp_path: Path,
) -> None:
    db = home(tmp_path) / "cache.sqlite"
    journal_dir(db).write_text("a file where the journals' folder would be")
    journal_dir(db).chmod(0o600)
    cache = CallCache(db, tmp_path / "media")
    with pytest.warns(RuntimeWarning, match="journal .* cannot be written"):
        cache.put_soon(key(0), Generation("out 0"))
    cache.put_soon(key(1), Generation("out 1"))
    deadline = time.monotonic() + 60
    while stored_count(db) < 2 and time.monotonic() < deadline:  # committed without one
        time.sleep(0.01)
    assert stored_count(db) == 2
    cache.close()


def test_a_journal_outlives_its_process_only_while_unfolded(tmp_path: Path) -> None:
    db = home(tmp_path) / "cache.sqlite"
    journal = Journal(journal_dir(db))
    journal.append(key(7), '{"output": "seven"}')
    journal.close()  # its process gone without folding: an orphan
    cache = CallCache(db, tmp_path / "media")
    seven = cache.get(key(7))
    assert seven is not None and seven.output == "seven"
    assert not journal.path.exists()
    cache.close()


def test_a_journal_grows_past_its_first_map_and_reads_back_whole(tmp_path: Path) -> None:
    """Answers longer in all than the file a journal starts with: it grows, every line whole
    and in order, and an empty journal holds no line (its bytes are zeros)."""
    folder = tmp_path / "pending"
    journal = Journal(folder)
    start = journal.path.stat().st_size
    big = "x" * 70_000
    for i in range(40):  # 40 x 70 KB: past the first size
        journal.append(key(i), f'{{"output": "{big}{i}"}}')
    assert journal.path.stat().st_size > start
    read = list(read_lines(journal.path.read_bytes()))
    assert [k for k, _ in read] == [key(i) for i in range(40)]
    assert read[-1][1].endswith('39"}')
    journal.empty()
    assert list(read_lines(journal.path.read_bytes())) == []
    journal.append(key(99), '{"output": "after"}')
    assert list(read_lines(journal.path.read_bytes())) == [(key(99), '{"output": "after"}')]
    journal.retire()
    assert not journal.path.exists()


def test_a_bulk_lookup_folds_the_journal_of_a_process_killed_while_the_cache_was_open(
    tmp_path: Path,
) -> None:
    """A process with the cache open (a Dask worker that survives another's kill -9) finds the
    dead one's answers at its next bulk lookup, without opening the cache again."""
    db = home(tmp_path) / "cache.sqlite"
    alive = CallCache(db, tmp_path / "media")  # open before the other process dies
    alive.put_soon(key(99), Generation("mine"))  # with a journal of its own
    child = putter(db, tmp_path, 20)
    try:
        assert alive.get_many([key(0)]) == {}  # alive: its journal is its own to fold
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    found = alive.get_many(key(i) for i in range(20))
    assert sorted(g.output for g in found.values()) == sorted(f"out {i}" for i in range(20))
    assert len(journals(db)) == 1  # the dead one's folded and deleted; this one's own stays
    alive.close()
    assert journals(db) == []
