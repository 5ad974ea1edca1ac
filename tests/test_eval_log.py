"""The evaluation log is a versioned pydantic model that reads and writes itself; run logs kept
before the version existed are still read."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import orjson
import pandas as pd
import pytest

import flownb
from flownb import scorers as S
from flownb.errors import ConfigError
from flownb.evaluation.record.store import EVAL_LOG_VERSION, EvalLog, load_scores
from flownb.runtime.runlog import RUNLOG_FILE
from tests.conftest import make_flow

FLOW = make_flow({"say": "say {word}"}, ["word"])


def evaluated(home: Path) -> flownb.EvalReport:
    flow = flownb.load_flow(FLOW)
    data = pd.DataFrame({"word": ["zz", "b"]})
    report = flownb.evaluate({"v": flow}, data, [S.contains("say", "zz")], progress=False)
    report.store(home)
    return report


def test_a_stored_evaluation_carries_its_version_and_reads_back(tmp_path: Path) -> None:
    report = evaluated(tmp_path)
    with closing(sqlite3.connect(tmp_path / RUNLOG_FILE)) as db:
        (version,) = db.execute(
            "SELECT version FROM evaluations WHERE id = ?", (report.id,)
        ).fetchone()
    assert version == EVAL_LOG_VERSION == 3
    log = EvalLog.read(report.id, tmp_path)
    assert log.variants == ["v"]
    assert log.frame()["contains_say"].tolist() == [True, False]
    again = EvalLog.from_json(log.to_json())
    assert again == log and orjson.loads(log.to_json())["version"] == 3


def test_a_run_log_kept_before_the_version_is_read_and_then_extended(tmp_path: Path) -> None:
    scores = {"variant": ["v"], "index": ["0"], "passed": [True], "error": [None]}
    with closing(sqlite3.connect(tmp_path / RUNLOG_FILE)) as db:
        db.execute(
            "CREATE TABLE evaluations (id TEXT PRIMARY KEY, created REAL NOT NULL, "
            "variants TEXT NOT NULL, scores TEXT NOT NULL)"
        )
        db.execute(
            "INSERT INTO evaluations VALUES (?, ?, ?, ?)",
            ("old1", 1.0, '["v"]', orjson.dumps(scores).decode()),
        )
        db.commit()
    assert load_scores("old1", tmp_path).to_dict("list") == scores
    assert EvalLog.read("old1", tmp_path).version == 1
    report = evaluated(tmp_path)  # the same table, now with its version column
    assert EvalLog.read(report.id, tmp_path).version == 3
    assert EvalLog.from_json(b'{"id": "x", "variants": [], "scores": {}}').version == 1


def test_a_version_2_log_reads_as_one_repeat(tmp_path: Path) -> None:
    report = evaluated(tmp_path)
    with closing(sqlite3.connect(tmp_path / RUNLOG_FILE)) as db:
        (kept,) = db.execute("SELECT report FROM evaluations WHERE id = ?", (report.id,)).fetchone()
        made = orjson.loads(kept)
        del made["repeats"]  # what version 2 wrote: no repeats
        db.execute(
            "UPDATE evaluations SET version = 2, report = ? WHERE id = ?",
            (orjson.dumps(made).decode(), report.id),
        )
        db.commit()
    log = EvalLog.read(report.id, tmp_path)
    assert (log.version, log.repeats) == (2, 1)
    back = flownb.load_report(report.id, tmp_path)
    assert back.repeats == 1 and back.results["contains_say"].tolist() == [True, False]
    assert back.runs["repeat"].tolist() == [0, 0] and "flips" not in back.results.columns


def test_a_log_from_a_newer_flownb_is_refused_in_one_line(tmp_path: Path) -> None:
    newer = {"version": EVAL_LOG_VERSION + 1, "id": "x", "variants": [], "scores": {}}
    with pytest.raises(ConfigError, match="kept by a newer flownb"):
        EvalLog.from_json(orjson.dumps(newer))
    with pytest.raises(ConfigError, match="not an evaluation log"):
        EvalLog.from_json(b"[1, 2]")
