"""report.review(): the labelling widget driven as a Python object: its buttons clicked and its
keys typed, the labels it gives read back from the run log, the scores hidden until answered."""

from __future__ import annotations

import base64
import io
import re
from pathlib import Path

import pandas as pd
import pytest
from PIL import Image

import flownb
from flownb import scorers as S
from flownb.errors import ConfigError
from flownb.evaluation.labels.review import LabelReview
from tests.conftest import make_flow

FLOW = make_flow({"say": "say {word}"}, ["word"])


def evaluated(home: Path, n: int = 3) -> flownb.EvalReport:
    flow = flownb.load_flow(FLOW)
    data = pd.DataFrame({"word": [f"w{i}" for i in range(n)]}, index=[f"r{i}" for i in range(n)])
    report = flownb.evaluate(
        {"a": flow, "b": flow},
        data,
        [S.python(lambda row: (0.25, "too plain"), "judge_fake"), S.human()],
        progress=False,
        log=False,
    )
    assert isinstance(report, flownb.EvalReport)
    report.store(home)
    return report


def test_clicks_and_keys_label_rows_kept_in_the_run_log(tmp_path: Path) -> None:
    report = evaluated(tmp_path)
    review = report.review()
    assert isinstance(review, LabelReview) and review.rows == ["r0", "r1", "r2"]
    assert "row 1 of 3" in review.progress.value and "0 of 6 labelled" in review.progress.value
    assert "say w0" in review.panels["a"].output.value
    # The judge's score and reason stay hidden until this variant is answered.
    assert review.panels["a"].judge.value == "" and review.panels["b"].judge.value == ""
    review.panels["a"].note.value = "fine"
    review.panels["a"].passed.click()
    shown = review.panels["a"].judge.value
    assert "too plain" in shown and "0.25" in shown
    assert review.panels["b"].judge.value == ""
    review.panels["b"].score.value = 4  # a 1-5 score, then a fail: both kept
    review.panels["b"].failed.click()
    assert "2 of 6 labelled" in review.progress.value
    # Keys: n goes to the next row, p / 3 answer for the active variant (a, then b).
    review.shortcuts.value = "n"
    assert review.position == 1 and "say w1" in review.panels["a"].output.value
    review.shortcuts.value = "p"
    review.shortcuts.value = "3"
    assert review.shortcuts.value == ""  # each key is consumed
    review.shortcuts.value = "b"
    assert review.position == 0 and review.panels["b"].score.value == 4
    back = flownb.load_report(report.id, tmp_path).labels
    got = {(r.row, r.variant): (r.passed, r.score, r.note) for r in back.itertuples()}
    assert got[("r0", "a")] == (True, pytest.approx(float("nan"), nan_ok=True), "fine")
    assert got[("r0", "b")][:2] == (False, 4.0)
    assert bool(got[("r1", "a")][0]) and got[("r1", "b")][1] == 3.0
    assert report.results["human"].tolist()[:2] == [1.0, 1.0]


def test_review_shows_chosen_variants_and_refuses_unknown_ones(tmp_path: Path) -> None:
    report = evaluated(tmp_path, 2)
    only_b = report.review(output="say", variants=["b"])
    assert list(only_b.panels) == ["b"]
    with pytest.raises(ConfigError, match="no variant 'zz'"):
        report.review(variants=["zz"])
    with pytest.raises(ConfigError, match="no output 'nope'"):
        report.review(output="nope")


def test_image_outputs_are_shown_inline(tmp_path: Path) -> None:
    buf = io.BytesIO()
    Image.new("RGB", (4, 4), "red").save(buf, format="PNG")
    uri = "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()
    flow = flownb.load_flow(FLOW)
    report = flownb.evaluate(flow, pd.DataFrame({"word": ["x"]}), progress=False, log=False)
    assert isinstance(report, flownb.EvalReport)
    report.results["say"] = [uri]
    report.kinds["say"] = "image"
    review = report.review()
    first = report.variants[0]
    shown = re.search(
        r'<img src="data:image/\w+;base64,([^"]+)"', review.panels[first].output.value
    )
    assert shown is not None
    with Image.open(io.BytesIO(base64.b64decode(shown.group(1)))) as img:
        assert img.size == (4, 4) and img.convert("RGB").getpixel((0, 0)) == (255, 0, 0)
    # The image overview: variants by rows, the person's labels only (no scorer's).
    assert (
        review.grid in review.children
        and f"data-variant='{first}' data-row='0'" in review.grid.value
    )
