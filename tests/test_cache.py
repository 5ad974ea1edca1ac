# ruff: noqa: F811  (pytest fixtures imported from openai_fake are parameters here)
"""The call cache against the loopback fake: a second run makes zero provider calls, results say
what came from the cache, any change to the call is a miss, errors are never cached, a partly
failed or interrupted batch resumes with only the missing calls, images survive, bypasses work."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

import flownb
from flownb.cli.main import cli
from flownb.errors import BatchError
from flownb.providers.base import Generation
from flownb.runtime.cache import CACHE_FILE, CallCache, open_cache
from flownb.testing.fake_openai import FakeOpenAI, echo
from tests.conftest import make_flow, write_flow
from tests.openai_fake import Retries, fake, fake_server, retried  # noqa: F401 (fixtures)

PROMPTS = {"intro": "Intro about {topic}.", "title": "Title about {topic}."}


def two_nodes(**params: object) -> dict:
    flow = make_flow(PROMPTS, ["topic"])
    if params:
        for node in flow["nodes"]:
            if node["type"] == "actionNode":
                node["data"]["modelParams"].update(params)
    return flow


def rows(n: int) -> list[dict[str, str]]:
    return [{"topic": f"t{i}"} for i in range(n)]


def test_second_run_makes_zero_provider_calls(
    fake: FakeOpenAI, flownb_env: Path, retried: Retries
) -> None:
    flow = flownb.load_flow(two_nodes())
    first = flow.run_batch(rows(10))
    asked = sorted(r["messages"][0]["content"] for r in fake.requests)
    want = sorted(p.format(topic=f"t{i}") for p in PROMPTS.values() for i in range(10))
    assert sorted(set(asked)) == want  # each of the 20 calls reached the provider...
    assert len(asked) == 20 + retried.count, fake.stats()  # ...once, but for a retry
    assert all(r.cached == frozenset() for r in first)
    fake.reset()
    again = flownb.load_flow(two_nodes()).run_batch(rows(10))  # a new flow object, same cache
    assert fake.requests == []
    assert [dict(r) for r in again] == [dict(r) for r in first]
    assert all(r.cached == {"intro", "title"} for r in again)
    assert (flownb_env / CACHE_FILE).is_file()


def test_cache_false_bypasses(fake: FakeOpenAI) -> None:
    flownb.load_flow(two_nodes()).run_batch(rows(3))
    fake.reset()
    res = flownb.load_flow(two_nodes(), cache=False).run_batch(rows(3))
    assert len(fake.requests) == 6
    assert all(not r.cached for r in res)


def test_flownb_cache_0_bypasses(fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> None:
    flownb.load_flow(two_nodes()).run_batch(rows(2))
    monkeypatch.setenv("FLOWNB_CACHE", "0")
    fake.reset()
    flownb.load_flow(two_nodes()).run_batch(rows(2))
    assert len(fake.requests) == 4


@pytest.mark.parametrize(
    "change",
    [
        {"temperature": 0.1},
        {"model": "gpt-4o"},
        {"max_tokens": 9},
        {"seed": 1},
    ],
)
def test_any_param_change_is_a_miss(fake: FakeOpenAI, change: dict) -> None:
    flownb.load_flow(two_nodes(temperature=0.5)).run_batch(rows(2))
    fake.reset()
    flownb.load_flow(two_nodes(**{"temperature": 0.5, **change})).run_batch(rows(2))
    assert len(fake.requests) == 4


def test_prompt_change_and_endpoint_change_are_misses(
    fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    flownb.load_flow(two_nodes()).run_batch(rows(2))
    fake.reset()
    flownb.load_flow(two_nodes()).run_batch([{"topic": "other"}])
    assert len(fake.requests) == 2
    fake.reset()
    # Same server under another name: another provider identity, so no reuse.
    monkeypatch.setenv("OPENAI_BASE_URL", fake.url.replace("127.0.0.1", "localhost"))
    flownb.load_flow(two_nodes()).run_batch(rows(2))
    assert len(fake.requests) == 4


def test_errors_are_never_cached_and_a_rerun_only_calls_what_failed(fake: FakeOpenAI) -> None:
    fake.configure(fail_markers={"500": "t2."})
    flow = flownb.load_flow(two_nodes(), retries=0)
    with pytest.raises(BatchError) as info:
        flow.run_batch(rows(5))
    assert set(info.value.errors) == {2}
    assert sum(r is not None for r in info.value.results) == 4
    fake.configure(fail_markers={})
    fake.reset()
    results = flow.run_batch(rows(5))
    # Only element 2's two calls were missing.
    assert sorted(b["messages"][0]["content"] for b in fake.requests) == [
        "Intro about t2.",
        "Title about t2.",
    ]
    assert results[2].cached == frozenset() and results[0].cached == {"intro", "title"}
    assert results[2] == {"intro": echo("Intro about t2."), "title": echo("Title about t2.")}


def test_resume_after_interruption(fake: FakeOpenAI, flownb_env: Path) -> None:
    """Cancel a batch part-way (as Ctrl-C does); the re-run pays only for what never finished."""
    fake.configure(latency=0.03)
    flow = flownb.load_flow(two_nodes(), concurrency=4)
    finished: list[int] = []
    enough = threading.Event()

    async def run_until_cancelled() -> None:
        def on_result(i: int, result: object, exc: object) -> None:
            finished.append(i)
            if len(finished) >= 10:
                enough.set()

        task = asyncio.ensure_future(flow.engine.run_async(rows(60), on_result, 4))
        while not enough.is_set():
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await flow.provider.aclose()  # this loop ends here; its HTTP session with it

    asyncio.run(run_until_cancelled())
    paid = len(fake.requests)
    assert 20 <= paid < 120
    # What was paid for is committed to disk on the way out (another connection sees it).
    on_disk = CallCache(flownb_env / CACHE_FILE)
    assert len(on_disk) >= 20
    on_disk.close()
    fake.configure(latency=0.0)
    fake.reset()
    results = flow.run_batch(rows(60))
    assert len(fake.requests) + paid >= 120  # nothing is lost...
    # ...and nothing answered before the interruption is paid for twice: at most the calls that
    # were in flight when it struck (4) are repeated.
    assert len(fake.requests) <= 120 - paid + 4
    assert sum(bool(r.cached) for r in results) >= 10


def test_duplicate_rows_in_one_batch_cost_one_call(fake: FakeOpenAI) -> None:
    fake.configure(latency=0.02)
    results = flownb.load_flow(two_nodes(), concurrency=8).run_batch([{"topic": "same"}] * 6)
    assert len(fake.requests) == 2
    assert all(r == results[0] for r in results)
    assert sum(not r.cached for r in results) >= 1


def test_b64_images_are_cached_and_a_deleted_file_is_paid_again(
    fake: FakeOpenAI, flownb_env: Path
) -> None:
    fake.configure(image_format="b64_json")
    flow_d = make_flow({"pic": "A picture of {topic}."}, ["topic"], images=("pic",))
    first = flownb.load_flow(flow_d).run(topic="owls")
    assert first["pic"].startswith("file://") and len(fake.requests) == 1
    again = flownb.load_flow(flow_d).run(topic="owls")
    assert again == first and again.cached == {"pic"} and len(fake.requests) == 1
    Path(first["pic"].removeprefix("file://")).unlink()
    third = flownb.load_flow(flow_d).run(topic="owls")
    assert third == first and len(fake.requests) == 2
    assert Path(third["pic"].removeprefix("file://")).is_file()


def test_offline_provider_is_not_cached(flownb_env: Path) -> None:
    flow = flownb.load_flow(two_nodes(), provider="offline")
    assert flow.engine.cache is None
    flow.run_batch(rows(3))
    assert not (flownb_env / CACHE_FILE).exists()


def test_cli_no_cache(fake: FakeOpenAI, tmp_path: Path) -> None:
    path = write_flow(tmp_path / "f.json", two_nodes())
    runner = CliRunner()
    args = ["run", str(path), "--var", "topic=owls"]
    assert runner.invoke(cli, args).exit_code == 0
    assert len(fake.requests) == 2
    assert runner.invoke(cli, args).exit_code == 0
    assert len(fake.requests) == 2  # cached by default
    result = runner.invoke(cli, [*args, "--no-cache"])
    assert result.exit_code == 0, result.output
    assert len(fake.requests) == 4
    assert echo("Intro about owls.") in result.output


def test_cache_store_round_trip_and_batched_commit(tmp_path: Path) -> None:
    cache = CallCache(tmp_path / "c.sqlite", tmp_path / "media")
    prefix = CallCache.prefix({"provider": "p"}, "text", {"model": "m", "temperature": 0.1})
    key = CallCache.key(prefix, "hello")
    assert cache.get(key) is None
    cache.put(key, Generation("out", model="m", usage={"total_tokens": 3}))
    got = cache.get(key)  # served from the write buffer before any commit
    assert got == Generation("out", model="m", usage={"total_tokens": 3}, cached=True)
    cache.flush()
    other = CallCache(tmp_path / "c.sqlite", tmp_path / "media")  # another connection
    assert other.get(key) == got
    assert len(other) == 1
    # Key material: params order does not matter, values do.
    same = CallCache.prefix({"provider": "p"}, "text", {"temperature": 0.1, "model": "m"})
    assert CallCache.key(same, "hello") == key
    assert CallCache.key(prefix, "hello ") != key
    cache.close()
    other.close()


def test_answers_put_soon_are_seen_at_once_and_committed_by_the_writer_thread(
    tmp_path: Path,
) -> None:
    import sqlite3

    cache = CallCache(tmp_path / "c.sqlite", tmp_path / "media")
    prefix = CallCache.prefix({"provider": "p"}, "text", {"model": "m"})
    keys = [CallCache.key(prefix, f"prompt {i}") for i in range(3)]
    reader = sqlite3.connect(tmp_path / "c.sqlite")  # what another process would see

    def committed() -> int:
        return reader.execute("SELECT count(*) FROM calls").fetchone()[0]

    for i, key in enumerate(keys):
        cache.put_soon(key, Generation(f"out {i}", model="m", cost=float("nan")))
    seen = [cache.get(k) for k in keys]  # served from the queue, committed or not
    assert [g.output for g in seen if g is not None] == ["out 0", "out 1", "out 2"]
    deadline = time.monotonic() + 30
    while committed() < 3 and time.monotonic() < deadline:  # nothing flushed it: the writer did
        time.sleep(0.001)
    assert committed() == 3
    [writer] = [t for t in threading.enumerate() if t.name == "flownb-cache-c.sqlite"]
    other = CallCache(tmp_path / "c.sqlite", tmp_path / "media")
    stored = other.get(keys[2])
    assert stored is not None and stored.output == "out 2"
    assert stored.cost is not None and stored.cost != stored.cost  # NaN kept, as put keeps it
    reader.close()
    cache.close()
    assert not writer.is_alive()
    other.close()


@pytest.mark.parametrize("fold", ["stores", "gives up"])
def test_answers_being_folded_are_found_and_an_answer_put_again_meanwhile_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fold: str
) -> None:
    """While the writer's fold waits for another process's write lock, the answers it took
    are still found, one by one and in bulk; an answer put again for one of their keys
    meanwhile is what is found and what is stored in the end, whether that fold stores its
    answers once the lock is let go or gives up and leaves them queued."""
    import sqlite3

    monkeypatch.setattr(CallCache, "busy_timeout", 30.0 if fold == "stores" else 1.0)
    db = tmp_path / "c.sqlite"
    cache = CallCache(db, tmp_path / "media")
    other = sqlite3.connect(db, isolation_level=None)  # another process, holding the lock
    other.execute("BEGIN IMMEDIATE")

    def wait_for(condition: Callable[[], object]) -> None:
        deadline = time.monotonic() + 30
        while not condition() and time.monotonic() < deadline:
            time.sleep(0.002)
        assert condition()

    cache.put_soon("a", Generation("a, first"))
    cache.put_soon("b", Generation("b"))
    wait_for(lambda: cache._folding)  # taken by the writer, which waits for the lock
    assert [g.output for g in cache.get_many(["a", "b"]).values()] == ["a, first", "b"]
    cache.put_soon("a", Generation("a, again"))
    found = cache.get("a")
    assert found is not None and found.output == "a, again"
    assert cache.get_many(["a"])["a"].output == "a, again"
    if fold == "gives up":
        with pytest.warns(RuntimeWarning, match="call cache"):
            wait_for(lambda: cache.errors)  # its answers queued again, under the newer one
        assert [g.output for g in cache.get_many(["a", "b"]).values()] == ["a, again", "b"]
    other.execute("ROLLBACK")
    cache.flush()
    stored = dict(other.execute("SELECT key, value FROM calls").fetchall())
    assert {k: json.loads(v)["output"] for k, v in stored.items()} == {"a": "a, again", "b": "b"}
    other.close()
    cache.close()


def test_cache_file_holds_no_key(fake: FakeOpenAI, flownb_env: Path) -> None:
    from tests.openai_fake import KEY

    flownb.load_flow(two_nodes()).run_batch(rows(3))
    open_cache(flownb_env).flush()
    data = (flownb_env / CACHE_FILE).read_bytes()
    wal = flownb_env / (CACHE_FILE + "-wal")
    if wal.exists():
        data += wal.read_bytes()
    assert KEY.encode() not in data
    assert json.dumps(echo("Intro about t1."))[1:-1].encode() in data


def test_a_file_that_is_not_a_database_is_a_clear_config_error(
    fake: FakeOpenAI, flownb_env: Path
) -> None:
    flownb_env.mkdir(parents=True, exist_ok=True)
    (flownb_env / CACHE_FILE).write_bytes(b"this is not SQLite" * 100)
    with pytest.raises(flownb.ConfigError, match=r"call cache .*cache.sqlite cannot be used"):
        flownb.load_flow(two_nodes())
    # ...and the way out the message names works.
    assert flownb.load_flow(two_nodes(), cache=False).run(topic="x")["intro"] == echo(
        "Intro about x."
    )


def test_a_locked_cache_never_loses_a_paid_answer(
    fake: FakeOpenAI, flownb_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sqlite3

    monkeypatch.setattr(CallCache, "busy_timeout", 0.05)
    flow = flownb.load_flow(two_nodes())
    cache = flow.engine.cache
    other = sqlite3.connect(flownb_env / CACHE_FILE, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")  # another process holds the write lock
    try:
        with pytest.warns(RuntimeWarning, match="call cache"):
            results = flow.run_batch(rows(3))
        assert [r["intro"] for r in results] == [echo(f"Intro about t{i}.") for i in range(3)]
        assert cache.errors
    finally:
        other.execute("ROLLBACK")
        other.close()
    cache.flush()  # the lock is gone: the kept entries are committed now
    fake.reset()
    flownb.load_flow(two_nodes()).run_batch(rows(3))
    assert fake.requests == []


def test_bulk_put_and_get_agree_with_single_ones(tmp_path: Path) -> None:
    cache = CallCache(tmp_path / "cache.sqlite", tmp_path / "media")
    items = [
        (f"k{i}", Generation(f"out {i}", model="m", usage={"total_tokens": i})) for i in range(1200)
    ]
    cache.put_many(items)
    cache.put("lone", Generation("single"))
    found = cache.get_many([*(k for k, _ in items), "lone", "missing", "k0"])
    assert len(found) == 1201 and "missing" not in found
    assert found["k7"].output == "out 7" and found["k7"].usage == {"total_tokens": 7}
    assert all(g.cached for g in found.values())
    assert cache.get("k1199") == found["k1199"]
    # An image whose file is gone is a miss in bulk too.
    cache.put_many([("img", Generation("", media="gone.png"))])
    assert "img" not in cache.get_many(["img"]) and cache.get("img") is None
    # Committed: another connection to the same file sees every entry.
    assert len(CallCache(tmp_path / "cache.sqlite", tmp_path / "media")) == 1202


def test_a_cached_rerun_reads_the_cache_in_bulk(fake: FakeOpenAI, flownb_env: Path) -> None:
    """A batch whose calls are all stored looks them up a few hundred keys per query, not one
    query per call, and calls the provider for none; a row added since is still paid once."""
    flownb.load_flow(two_nodes()).run_batch(rows(600), concurrency=8)
    fake.reset()
    cache = open_cache(flownb_env)
    statements: list[str] = []
    cache._db.set_trace_callback(statements.append)
    try:
        again = flownb.load_flow(two_nodes()).run_batch(rows(601), concurrency=8)
    finally:
        cache._db.set_trace_callback(None)
    # The new row's two calls run at once: they reach the server in either order.
    assert sorted(r["messages"][0]["content"] for r in fake.requests) == [
        "Intro about t600.",
        "Title about t600.",
    ]
    assert all(r.cached == {"intro", "title"} for r in again[:600])
    assert again[600].cached == frozenset()
    selects = [s for s in statements if s.lstrip().upper().startswith("SELECT")]
    # 1,202 calls: 3 bulk queries of at most 500 keys each, and one more query for each call
    # the bulk lookup did not find (the new row's two); one query per call would be 1,202.
    assert len(selects) <= 6, len(selects)
