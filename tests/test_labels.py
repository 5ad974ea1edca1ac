"""Human labels on an evaluation: kept in the run log as given (a new process reads them back
with load_report), listed by reports(), read by S.human() columns, and a scorer checked against
them with report.agreement (kappa on the textbook table)."""

from __future__ import annotations

import math
import os
import sqlite3
import subprocess
import sys
import textwrap
from contextlib import closing
from pathlib import Path

import numpy as np
import orjson
import pandas as pd
import pytest

import flownb
from flownb import scorers as S
from flownb.errors import ConfigError
from flownb.runtime.runlog import RUNLOG_FILE
from tests.conftest import make_flow

pytestmark = pytest.mark.timeout(120)

FLOW = make_flow({"say": "say {word}"}, ["word"])
ROOT = Path(__file__).resolve().parents[1]


def words(n: int) -> pd.DataFrame:
    return pd.DataFrame({"word": [f"w{i}" for i in range(n)]}, index=[f"r{i}" for i in range(n)])


def evaluated(home: Path, data: pd.DataFrame, *scorers: S.Scorer) -> flownb.EvalReport:
    flow = flownb.load_flow(FLOW)
    report = flownb.evaluate(
        {"a": flow, "b": flow}, data, [S.contains("say", "w1"), *scorers], progress=False, log=False
    )
    report.store(home)
    return report


def run_python(code: str, home: Path) -> str:
    env = {**os.environ, "FLOWNB_HOME": str(home), "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_labels_given_in_one_process_come_back_in_another(tmp_path: Path) -> None:
    made = run_python(
        f"""
        import pandas as pd, flownb
        from flownb import scorers as S
        from tests.conftest import make_flow
        flow = flownb.load_flow({FLOW!r})
        data = pd.DataFrame({{"word": ["w0", "w1", "w2"]}}, index=[10, 11, 12])
        report = flownb.evaluate({{"a": flow, "b": flow}}, data, [S.human()], progress=False)
        report.label(10, "a", passed=True, note="fine")
        report.label(11, "b", passed=False, score=2)
        report.label(10, "a", passed=False, note="changed my mind")
        print(report.id)
        """,
        tmp_path,
    )
    eval_id = made.strip().splitlines()[-1]
    read = run_python(
        f"""
        import flownb
        report = flownb.load_report({eval_id!r})
        shown = report.labels[["row", "variant", "passed", "score", "note"]]
        print(shown.to_json(orient="records"))
        print(report.results["human"].to_json(orient="values"))
        print(flownb.reports()[["id", "rows", "labels"]].to_json(orient="records"))
        """,
        tmp_path,
    ).splitlines()
    labels = orjson.loads(read[0])
    assert labels == [
        {"row": 10, "variant": "a", "passed": False, "score": None, "note": "changed my mind"},
        {"row": 11, "variant": "b", "passed": False, "score": 2.0, "note": ""},
    ]
    # The S.human() column follows the labels in force: rows a/10, a/11, a/12, b/10, ...
    human = orjson.loads(read[1])
    assert human[0] == 0.0 and human[4] == 0.0
    assert [h is None for h in human] == [False, True, True, True, False, True]
    assert orjson.loads(read[2]) == [{"id": eval_id, "rows": 3, "labels": 2}]
    # Every label was kept as given, the replaced one too.
    with closing(sqlite3.connect(tmp_path / RUNLOG_FILE)) as db:
        (kept,) = db.execute(
            "SELECT COUNT(*) FROM eval_labels WHERE eval_id = ?", (eval_id,)
        ).fetchone()
    assert kept == 3


def test_a_loaded_report_has_the_results_summary_and_views(tmp_path: Path) -> None:
    report = evaluated(tmp_path, words(4), S.human("score"))
    report.label("r1", "b", score=4)
    back = flownb.load_report(report.id, tmp_path)
    assert back.variants == ["a", "b"] and back.outputs == report.outputs
    assert back.results["say"].tolist() == report.results["say"].tolist()
    assert back.results["contains_say"].tolist() == report.results["contains_say"].tolist()
    assert back.summary.loc["a", "contains_say"] == pytest.approx(0.25)
    assert back.summary.loc["b", "labels"] == 1 and back.summary.loc["a", "labels"] == 0
    assert back.results["human_score"].tolist()[5] == 4.0
    assert math.isnan(back.results["human_score"].tolist()[1])
    assert "w3" in back.compare().data  # the side-by-side view of the outputs read back
    assert "labels" in back._repr_html_()


def test_labels_given_before_a_report_is_stored_are_kept_with_it(tmp_path: Path) -> None:
    flow = flownb.load_flow(FLOW)
    report = flownb.evaluate({"a": flow}, words(2), [S.human()], progress=False, log=False)
    report.label("r0", "a", passed=np.True_)  # type: ignore[arg-type]  (a value from a frame)
    assert report.results["human"].tolist()[0] == 1.0
    assert flownb.reports(tmp_path).empty
    report.store(tmp_path)
    assert flownb.load_report(report.id, tmp_path).labels["passed"].tolist() == [True]
    assert flownb.reports(tmp_path)["labels"].tolist() == [1]


def test_bad_labels_are_refused_in_one_line(tmp_path: Path) -> None:
    report = evaluated(tmp_path, words(2))
    with pytest.raises(ConfigError, match="no variant 'zz'"):
        report.label("r0", "zz", passed=True)
    with pytest.raises(ConfigError, match="no input row 'nope'"):
        report.label("nope", "a", passed=True)
    with pytest.raises(ConfigError, match="passed is True, False or None"):
        report.label("r0", "a", passed="yes")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="from 1 to 5"):
        report.label("r0", "a", score=math.nan)
    with pytest.raises(ConfigError, match="from 1 to 5, not 99"):
        report.label("r0", "a", score=99)
    with pytest.raises(ConfigError, match="lone surrogate"):
        report.label("r0", "a", note="ok \udcff")
    with pytest.raises(ConfigError, match="at most 10,000 characters"):
        report.label("r0", "a", note="x" * 10_000_000)
    with pytest.raises(ConfigError, match="note is text"):
        report.label("r0", "a", passed=True, note=b"bytes")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="needs passed="):
        report.label("r0", "a")
    with pytest.raises(ConfigError, match="no evaluation 'missing'"):
        flownb.load_report("missing", tmp_path)
    assert report.labels.empty and list(report.labels.columns) == [
        "row",
        "variant",
        "passed",
        "score",
        "note",
        "labelled_at",
        "word",  # what was labelled: the input row's columns, then the outputs
        "say",
    ]


def test_a_version_1_log_loads_with_its_scores(tmp_path: Path) -> None:
    scores = {
        "variant": ["v", "v"],
        "index": ["0", "1"],
        "ok": [True, False],
        "passed": [True, False],
        "error": [None, None],
    }
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
    report = flownb.load_report("old1", tmp_path)
    assert report.results["passed"].tolist() == [True, False]
    assert report.summary.loc["v", "pass_rate"] == 0.5
    report.label("1", "v", passed=True)
    assert flownb.load_report("old1", tmp_path).labels["row"].tolist() == ["1"]


def _textbook(home: Path) -> flownb.EvalReport:
    # 50 rows: judge yes/human yes 20, judge yes/human no 5, judge no/human yes 10, both no 15.
    pairs = [(True, True)] * 20 + [(True, False)] * 5 + [(False, True)] * 10 + [(False, False)] * 15
    data = pd.DataFrame({"word": [f"w{i}" for i in range(50)]})
    verdict = {f"w{i}": j for i, (j, _) in enumerate(pairs)}
    judge = S.python(lambda row: verdict[row["word"]], "judge_ok")
    flow = flownb.load_flow(FLOW)
    report = flownb.evaluate({"v": flow}, data, [judge], progress=False, log=False)
    report.store(home)
    for i, (_, human) in enumerate(pairs):
        report.label(i, "v", passed=human)
    return report


def test_agreement_gives_the_textbook_kappa_and_how_many_labels(tmp_path: Path) -> None:
    report = _textbook(tmp_path)
    found = report.agreement("judge_ok")
    assert found.kappa == pytest.approx(0.4) and found.n == 50
    assert found.table.loc[True, False] == 5 and found.table.loc[False, True] == 10
    assert len(found.disagreements) == 15
    assert set(found.disagreements.columns) >= {"index", "word", "say", "judge_ok", "human"}
    # The same from a report read back from the run log.
    again = flownb.load_report(report.id, tmp_path).agreement("judge_ok")
    assert again.kappa == pytest.approx(0.4) and again.n == 50
    assert report.summary.loc["v", "labels"] == 50


def test_a_score_agreement_uses_rho_and_unknown_scorers_fail(tmp_path: Path) -> None:
    data = pd.DataFrame({"word": [f"w{i}" for i in range(6)]})
    judged = {f"w{i}": s for i, s in enumerate([0.1, 0.2, 0.3, 0.4, 0.5, 0.6])}
    judge = S.python(lambda row: judged[row["word"]], "judge_s")
    flow = flownb.load_flow(FLOW)
    report = flownb.evaluate({"v": flow}, data, [judge], progress=False, log=False)
    with pytest.raises(ConfigError, match="no labels with score"):
        report.agreement("judge_s")
    # On the 1-5 scale; ranked 2 1 4 3 6 5, as the judge's are 1..6.
    for i, s in enumerate([1.5, 1, 3, 2.5, 5, 4]):
        report.label(i, "v", score=s)
    found = report.agreement(judge)
    assert found.kind == "score" and found.rho == pytest.approx(1 - 36 / 210) and found.n == 6
    with pytest.raises(ConfigError, match="no scorer 'nope'"):
        report.agreement("nope")
