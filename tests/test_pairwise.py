"""Blind pairwise review: report.prefer(...) in Python, the PairwiseReview widget driven as a
Python object (buttons clicked, keys typed), the order shuffled per row (seeded, recorded), the
preferences kept in the run log (read back by another process), and the win rates they give."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import flownb
from flownb import scorers as S
from flownb.errors import ConfigError
from flownb.evaluation.figures import stats
from flownb.evaluation.labels.pairwise import PairwiseReview, shown_order
from tests.conftest import make_flow

FLOW = make_flow({"say": "say {word}"}, ["word"])


def evaluated(n: int = 6, variants: tuple[str, ...] = ("a", "b")) -> flownb.EvalReport:
    flow = flownb.load_flow(FLOW, provider="offline")
    data = pd.DataFrame({"word": [f"w{i}" for i in range(n)]}, index=[f"r{i}" for i in range(n)])
    flows = {v: flow.with_prompts({"say": f"{v} says {{word}}"}) for v in variants}
    report = flownb.evaluate(flows, data, [S.length("say")], progress=False)
    assert isinstance(report, flownb.EvalReport)
    return report


def test_preferences_in_python_give_win_rates_and_survive_a_new_process(
    flownb_env: Path,
) -> None:
    report = evaluated()
    for row in ("r0", "r1", "r2", "r3"):
        report.prefer(row, "b")
    report.prefer("r4", "a", note="shorter")
    report.prefer("r5", "tie")
    report.prefer("r3", "a")  # a second thought replaces the first
    given = report.preferences
    assert len(given) == 6 and given.set_index("row").loc["r3", "winner"] == "a"
    assert given["shown_first"].isna().all()  # given in Python: nothing was shown
    rates = report.win_rates()
    assert rates.loc["b", ["n", "wins", "losses", "ties"]].tolist() == [6, 3, 2, 1]
    assert rates.loc["a", ["wins", "losses"]].tolist() == [2, 3]
    assert rates.loc["b", "win_rate"] == pytest.approx(3.5 / 6)
    assert rates.loc["a", "win_rate"] == pytest.approx(2.5 / 6)
    assert rates.loc["b", "p"] == pytest.approx(stats.sign_test(3, 2)) == 1.0
    assert "pairwise win rates (ties count half): a 41.7%" in report._repr_html_()
    low, high = stats.wilson(3.5, 6)
    assert rates.loc["b", ["win_rate_low", "win_rate_high"]].tolist() == [
        pytest.approx(low),
        pytest.approx(high),
    ]
    # Another process reads them from the run log.
    code = (
        "import flownb, sys\n"
        f"r = flownb.load_report({report.id!r})\n"
        "print(r.win_rates().loc['b', 'wins'], len(r.preferences))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
        env={**os.environ, "FLOWNB_HOME": str(flownb_env)},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["3", "6"]


def test_preferences_given_before_a_run_log_are_kept_when_it_is_stored(tmp_path: Path) -> None:
    flow = flownb.load_flow(FLOW, provider="offline")
    data = pd.DataFrame({"word": ["x", "y"]})
    report = flownb.evaluate({"a": flow, "b": flow}, data, progress=False, log=False)
    assert isinstance(report, flownb.EvalReport) and report.home is None
    report.prefer(1, "a")
    assert report.win_rates().loc["a", "wins"] == 1
    report.store(tmp_path)
    back = flownb.load_report(report.id, tmp_path)
    assert back.preferences[["row", "winner"]].values.tolist() == [[1, "a"]]


def test_a_one_sided_pair_is_beyond_chance_and_pairs_are_checked() -> None:
    report = evaluated(n=8, variants=("a", "b", "c"))
    with pytest.raises(ConfigError, match="say which two are compared"):
        report.prefer("r0", "a")
    with pytest.raises(ConfigError, match="winner is 'a', 'c' or 'tie'"):
        report.prefer("r0", "b", pair=("a", "c"))
    with pytest.raises(ConfigError, match="no variant 'z'"):
        report.prefer("r0", "a", pair=("a", "z"))
    with pytest.raises(ConfigError, match="no input row 'nope'"):
        report.prefer("nope", "a", pair=("a", "c"))
    for i in range(8):
        report.prefer(f"r{i}", "c", pair=("a", "c"))
    report.prefer("r0", "b", pair=("b", "c"))
    rates = report.win_rates(pair=("c", "a"))
    assert rates.index.tolist() == ["a", "c"] and rates.loc["c", "win_rate"] == 1.0
    assert rates.loc["c", "p"] == pytest.approx(2 / 2**8)
    pooled = report.win_rates()
    assert pooled.loc["c", ["n", "wins", "losses"]].tolist() == [9, 8, 1]


def test_the_blind_widget_shuffles_per_row_records_the_order_and_keeps_answers(
    flownb_env: Path,
) -> None:
    report = evaluated(n=12)
    review = report.review(pairwise=("a", "b"))
    assert isinstance(review, PairwiseReview) and review.rows == [f"r{i}" for i in range(12)]
    orders = [shown_order(report.id, row, ("a", "b")) for row in review.rows]
    assert {o[0] for o in orders} == {"a", "b"}  # both orders occur over twelve rows
    assert orders == [shown_order(report.id, row, ("a", "b")) for row in review.rows]  # seeded
    assert "0 of 12 compared" in review.progress.value
    first_a = orders[0][0]
    # Blind: the panes say A and B and the outputs, never the variant names.
    assert f"{first_a} says w0" in review.panes[0].value and "not compared yet" in (
        review.reveal.value
    )
    review.note.value = "crisper"
    review.choose["a"].click()  # A (whichever variant it was) is better
    assert f"A was <b>{first_a}</b>" in review.reveal.value
    assert "1 of 12 compared" in review.progress.value
    review.shortcuts.value = "n"
    assert review.position == 1
    review.shortcuts.value = "2"  # B better on row 1
    review.shortcuts.value = "n"
    review.shortcuts.value = "t"  # a tie on row 2
    assert review.shortcuts.value == ""
    back = flownb.load_report(report.id, flownb_env).preferences.set_index("row")
    assert back.loc["r0", "winner"] == first_a and back.loc["r0", "note"] == "crisper"
    assert back.loc["r1", "winner"] == orders[1][1] and back.loc["r2", "winner"] == "tie"
    assert back["shown_first"].tolist() == [o[0] for o in orders[:3]]
    review.shortcuts.value = "b"
    assert review.position == 1 and review.choose["b"].button_style == "info"
    with pytest.raises(ConfigError, match="pair is two different variants"):
        report.review(pairwise=("a", "a"))
