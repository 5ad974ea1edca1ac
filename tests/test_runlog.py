# ruff: noqa: F811  (pytest fixtures imported from openai_fake are parameters here)
"""The run log: every run appended to SQLite under FLOWNB_HOME and read back with flownb.runs()."""

from __future__ import annotations

import math
import sqlite3
import sys
import zlib
from contextlib import closing
from pathlib import Path
from typing import Any

import orjson
import pandas as pd
import pytest

import flownb
from flownb.errors import BatchError
from flownb.providers.base import Generation
from flownb.runtime.logrows import (
    Outcome,
    _cached_rows,
    _fresh_rows,
    _rows_one_by_one,
    log_rows,
)
from flownb.runtime.result import RunResult
from flownb.runtime.runlog import COLUMNS, RUNLOG_FILE
from flownb.testing.fake_openai import FakeOpenAI, echo
from tests.conftest import make_flow
from tests.openai_fake import fake, fake_server  # noqa: F401 (fixtures)

if sys.version_info >= (3, 14):
    from compression import zstd
else:
    from backports import zstd

PROMPTS = {"intro": "Intro about {topic}.", "title": "Title about {topic}."}


def rows(n: int) -> list[dict[str, str]]:
    return [{"topic": f"t{i}"} for i in range(n)]


def test_empty_log_is_an_empty_frame_with_the_columns() -> None:
    df = flownb.runs()
    assert isinstance(df, pd.DataFrame)
    assert list(df.columns) == COLUMNS and len(df) == 0


def test_openai_runs_are_logged_with_usage_cache_and_errors(fake: FakeOpenAI) -> None:
    fake.configure(fail_markers={"500": "t3."})
    flow = flownb.load_flow(make_flow(PROMPTS, ["topic"]), retries=0)
    with pytest.raises(BatchError):
        flow.run_batch(rows(4))
    fake.configure(fail_markers={})
    flow.run_batch(rows(4))  # t0-t2 from the cache, t3 fresh

    df = flownb.runs()
    assert len(df) == 8
    first, second = df.iloc[:4], df.iloc[4:]
    assert first["run_id"].nunique() == 1 and second["run_id"].nunique() == 1
    assert first["run_id"].iloc[0] != second["run_id"].iloc[0]
    assert set(df["flow"]) == {"flow"} and set(df["provider"]) == {"openai"}
    assert set(df["model"].dropna()) == {"gpt-4o-mini"}

    failed = first[first["index"] == 3].iloc[0]
    assert failed["error"].startswith(
        "provider_error: nodes 'intro', 'title' failed: OpenAI API error 500"
    )
    assert failed["outputs"] is None and failed["inputs"] == {"topic": "t3"}

    ok = first[first["index"] == 0].iloc[0]
    assert ok["outputs"] == {"intro": echo("Intro about t0."), "title": echo("Title about t0.")}
    assert ok["error"] is None and not ok["cached"]
    # The fake counts words: "Intro about t0." is 3, "echo: Intro about t0." is 4; two nodes.
    assert ok["prompt_tokens"] == 6 and ok["completion_tokens"] == 8 and ok["total_tokens"] == 14
    assert ok["latency"] > 0

    rerun = second.set_index("index")
    assert bool(rerun.loc[0, "cached"]) and rerun.loc[0, "cached_outputs"] == ["intro", "title"]
    assert pd.isna(rerun.loc[0, "total_tokens"])  # nothing paid: no usage
    assert not rerun.loc[3, "cached"] and rerun.loc[3, "total_tokens"] == 14
    assert df["finished"].dt.tz is not None


def test_offline_runs_are_logged_too(flownb_env: Path) -> None:
    flow = flownb.load_flow(make_flow(PROMPTS, ["topic"]), provider="offline")
    flow.run_batch(rows(1000))
    flow.run(topic="single")
    df = flownb.runs()
    assert len(df) == 1001
    assert df.iloc[-1]["inputs"] == {"topic": "single"}
    assert df.iloc[-1]["outputs"] == {
        "intro": "Intro about single.",
        "title": "Title about single.",
    }
    assert set(df["provider"]) == {"offline"} and set(df["model"]) == {"offline"}
    assert df["index"].iloc[:1000].tolist() == list(range(1000))
    assert (flownb_env / RUNLOG_FILE).is_file()


def test_filter_by_flow_and_limit(tmp_path: Path) -> None:
    a = tmp_path / "alpha.json"
    b = tmp_path / "beta.json"
    import json

    a.write_text(json.dumps(make_flow(PROMPTS, ["topic"])))
    b.write_text(json.dumps(make_flow(PROMPTS, ["topic"])))
    flownb.load_flow(a).run_batch(rows(3))
    flownb.load_flow(b).run_batch(rows(2))
    assert len(flownb.runs("alpha")) == 3
    assert len(flownb.runs("beta")) == 2
    last = flownb.runs(limit=2)
    assert len(last) == 2 and set(last["flow"]) == {"beta"}


def test_log_false_and_flownb_runlog_0(monkeypatch: pytest.MonkeyPatch) -> None:
    flownb.load_flow(make_flow(PROMPTS, ["topic"]), log=False).run_batch(rows(3))
    monkeypatch.setenv("FLOWNB_RUNLOG", "0")
    flownb.load_flow(make_flow(PROMPTS, ["topic"])).run_batch(rows(3))
    assert len(flownb.runs()) == 0


def test_chunks_are_stored_compressed_with_their_count_and_last_finish(
    flownb_env: Path,
) -> None:
    flownb.load_flow(make_flow(PROMPTS, ["topic"])).run_batch(rows(5))
    logged = flownb.runs()  # waits for the writer thread
    with sqlite3.connect(flownb_env / RUNLOG_FILE) as db:
        ((stored, n, finished),) = db.execute("SELECT rows, n, finished FROM chunks").fetchall()
    assert isinstance(stored, bytes) and n == 5 == len(logged)
    kept = orjson.loads(zstd.decompress(stored))  # one Zstandard frame
    assert [row[3] for row in kept] == rows(5) and finished == max(row[1] for row in kept)


def test_chunks_compressed_with_zlib_as_before_are_read_as_they_were(flownb_env: Path) -> None:
    flownb.load_flow(make_flow(PROMPTS, ["topic"])).run_batch(rows(3))
    before = flownb.runs()
    with closing(sqlite3.connect(flownb_env / RUNLOG_FILE)) as db, db:
        ((chunk_id, stored),) = db.execute("SELECT id, rows FROM chunks").fetchall()
        # The same rows as flownb stored them before Zstandard: zlib, level 1.
        old = zlib.compress(zstd.decompress(stored), 1)
        db.execute("UPDATE chunks SET rows = ? WHERE id = ?", (old, chunk_id))
    flownb.load_flow(make_flow(PROMPTS, ["topic"])).run_batch(rows(2))
    after = flownb.runs()
    assert len(after) == 5 and after["inputs"].tolist() == [*rows(3), *rows(2)]
    pd.testing.assert_frame_equal(after.iloc[:3], before)


def test_a_run_log_written_before_compression_is_read_and_extended(flownb_env: Path) -> None:
    # A run log as flownb wrote it before compression: rows as JSON text, no n or finished.
    old_row = [0, 1_700_000_000.0, "offline", {"topic": "old"}, {"intro": "Intro about old."}]
    old_row += [0.001, None, None, None, None, None, None, 0.0, 0.0, 0.0, 0]
    flownb_env.mkdir(parents=True, exist_ok=True)
    with closing(sqlite3.connect(flownb_env / RUNLOG_FILE)) as db, db:
        db.executescript(
            "CREATE TABLE chunks (id INTEGER PRIMARY KEY, run_id TEXT NOT NULL, "
            "flow TEXT NOT NULL, provider TEXT NOT NULL, rows TEXT NOT NULL);"
        )
        db.execute(
            "INSERT INTO chunks (run_id, flow, provider, rows) VALUES ('old', 'f', 'offline', ?)",
            (orjson.dumps([old_row]).decode(),),
        )
    flownb.load_flow(make_flow(PROMPTS, ["topic"])).run_batch(rows(2))
    logged = flownb.runs()
    assert logged["run_id"].iloc[0] == "old" and len(logged) == 3
    assert logged["inputs"].tolist() == [{"topic": "old"}, *rows(2)]
    with closing(sqlite3.connect(flownb_env / RUNLOG_FILE)) as db:
        # The SQL view still expands the chunk kept as text.
        got = db.execute("SELECT idx, json_extract(inputs, '$.topic') FROM runs").fetchall()
    assert got == [(0, "old")]


def test_bad_runlog_setting_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLOWNB_RUNLOG", "maybe")
    with pytest.raises(flownb.ConfigError, match="FLOWNB_RUNLOG"):
        flownb.load_flow(make_flow(PROMPTS, ["topic"]))


def test_a_runlog_that_is_not_a_database_is_a_clear_config_error(flownb_env: Path) -> None:
    flownb_env.mkdir(parents=True, exist_ok=True)
    (flownb_env / RUNLOG_FILE).write_bytes(b"garbage" * 200)
    with pytest.raises(flownb.ConfigError, match=r"run log .* cannot be used"):
        flownb.load_flow(make_flow(PROMPTS, ["topic"]))
    flownb.load_flow(make_flow(PROMPTS, ["topic"]), log=False).run(topic="x")


# -- rows made column by column are the rows made one by one -------------------------------------


def _outcomes(
    gens_per_row: list[list[Generation | None]], cached: frozenset[str] = frozenset()
) -> list[Outcome]:
    return [
        (i, 1700000000.0 + i, RunResult({"a": f"x{i}"}, provider="openai", cached=cached,
                                        latency=0.25 * i, generations=gens), None)
        for i, gens in enumerate(gens_per_row)
    ]  # fmt: skip


def _gen(model: str | None, cost: float | None, usage: dict[str, int] | None, **kw: Any) -> Any:
    return Generation("out", model=model, cost=cost, usage=usage, **kw)


USAGE = {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10, "cached_tokens": 2}


@pytest.mark.parametrize(
    "gens_per_row",
    [
        # two nodes, usage with a detail count, two models
        [[_gen("m1", 0.001 * i, dict(USAGE)), _gen("m2", 0.1 + i, {**USAGE, "total_tokens": i})]
         for i in range(5)],
        # one node; a usage without the token columns' names
        [[_gen("m1", 0.5, {"input_tokens": i, "output_tokens": 2})] for i in range(4)],
        # three nodes, no model named, costs that add up inexactly in floating point
        [[_gen(None, 0.1, {"total_tokens": 1}), _gen(None, 0.2, {"total_tokens": 2}),
          _gen(None, 0.3, {"total_tokens": 3})] for _ in range(3)],
    ],
)  # fmt: skip
def test_rows_with_real_calls_made_in_bulk_are_the_rows_made_one_by_one(
    gens_per_row: list[list[Generation | None]],
) -> None:
    taken = _outcomes(gens_per_row)
    batch = [{"topic": f"t{i}"} for i in range(len(taken))]
    assert _fresh_rows(taken, batch, "openai") is not None  # the bulk path is the one taken
    one_by_one = orjson.dumps(_rows_one_by_one(taken, batch, "openai"))
    assert log_rows(taken, batch, "openai", detailed=True) == one_by_one


@pytest.mark.parametrize(
    ("gens_per_row", "why"),
    [
        ([[_gen("m", 0.1, dict(USAGE)), _gen("m", 0.1, dict(USAGE), cached=True)]], "a cache hit"),
        ([[_gen("m", math.nan, dict(USAGE))]], "an unknown price"),
        ([[_gen("m", None, dict(USAGE))]], "not priced"),
        ([[_gen("m", 0.1, None)]], "no usage"),
        ([[_gen("m", 0.1, {"total_tokens": 1})], [_gen("m", 0.1, {"prompt_tokens": 1})]],
         "usages of other shapes"),
        ([[_gen("m", 0.1, dict(USAGE))], [_gen("n", 0.1, dict(USAGE))]], "another model"),
        ([[_gen("m", 0.1, dict(USAGE))], [_gen("m", 0.1, dict(USAGE))] * 2], "more calls"),
    ],
)  # fmt: skip
def test_rows_the_bulk_path_does_not_take_are_made_one_by_one(
    gens_per_row: list[list[Generation | None]], why: str
) -> None:
    taken = _outcomes(gens_per_row)
    batch = [{"topic": f"t{i}"} for i in range(len(taken))]
    assert _fresh_rows(taken, batch, "openai") is None, why
    one_by_one = orjson.dumps(_rows_one_by_one(taken, batch, "openai"))
    assert log_rows(taken, batch, "openai", detailed=True) == one_by_one


def test_a_reruns_rows_made_in_bulk_are_the_rows_made_one_by_one() -> None:
    gens = [
        [_gen("m1", 0.001 * i, None, cached=True), _gen("m2", 0.1 + i, None, cached=True)]
        for i in range(4)
    ]
    taken = _outcomes(gens, cached=frozenset({"a"}))
    batch = [{"topic": f"t{i}"} for i in range(len(taken))]
    assert _cached_rows(taken, batch) is not None  # the bulk path is the one taken
    one_by_one = orjson.dumps(_rows_one_by_one(taken, batch, "openai"))
    assert log_rows(taken, batch, "openai", detailed=True) == one_by_one
