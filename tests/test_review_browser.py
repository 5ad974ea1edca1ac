"""report.review() in a real browser: JupyterLab on loopback, Debian's chromium via Playwright.

A notebook evaluates two variants and shows the labelling widget; the test clicks a variant's
pass button and types shortcuts into the keys box, checks the progress count and that the
scores appear only once answered, then reads the labels back from the run log in this process
with ``flownb.load_report``. The screenshot goes to ``test-artifacts/review-widget.png`` when
asked for (tests/browser/artifacts.py).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import playwright.sync_api as playwright_sync
import pytest

import flownb
from tests.browser.artifacts import screenshot
from tests.browser.chromium import Chromium
from tests.browser.lab import Lab
from tests.browser.notebook import lab_page, open_notebook, run_until_shown, write_notebook
from tests.conftest import make_flow

pytestmark = pytest.mark.timeout(240)

CELL = """\
import flownb, pandas as pd
from flownb import scorers as S
flow = flownb.load_flow("flow.json", provider="offline")
data = pd.DataFrame({"topic": ["owls", "tides"]}, index=["r0", "r1"])
report = flownb.evaluate({"a": flow, "b": flow}, data, [S.length("intro")], progress=False)
open("report_id.txt", "w").write(report.id)
report.review()
"""


IMAGE_CELL = """\
import flownb, pandas as pd
flow = flownb.load_flow("flow.json", provider="offline")
other = flow.with_prompts({"pic": "a drawing of {topic}"})
data = pd.DataFrame({"topic": ["owls", "tides", "moss"]}, index=["r0", "r1", "r2"])
report = flownb.evaluate({"a": flow, "b": other}, data, progress=False)
report.review()
"""


def review_notebook(work: Path, cell: str = CELL, flow: dict | None = None) -> str:
    """Make folder ``work`` holding ``flow`` (by default one text node ``intro`` on ``topic``)
    as flow.json and a notebook of the one ``cell``; return the notebook's name."""
    work.mkdir()
    flow = flow or make_flow({"intro": "An intro about {topic}."}, ["topic"])
    (work / "flow.json").write_text(json.dumps(flow), encoding="utf-8")
    write_notebook(work / "review.ipynb", [cell])
    return "review.ipynb"


@contextmanager
def shown_widget(
    tmp_path: Path,
    home: Path,
    browser: tuple[Lab, Chromium],
    notebook: str,
    selector: str,
    height: int = 1000,
) -> Iterator[playwright_sync.Locator]:
    """Serve ``tmp_path / "work"`` from JupyterLab with FLOWNB_HOME ``home``, open ``notebook``
    in chromium (``browser``: the server and the browser) and run it; yield the first
    ``selector`` element once shown."""
    env = {**os.environ, "FLOWNB_HOME": str(home)}
    with lab_page(*browser, tmp_path / "work", env, timeout_ms=60_000, height=height) as (
        lab,
        page,
    ):
        open_notebook(page, lab, notebook)
        yield run_until_shown(page, lab, selector)


def test_labelling_in_the_browser_reaches_the_run_log(
    tmp_path: Path, flownb_env: Path, chromium: Chromium, jupyterlab: Lab
) -> None:
    work = tmp_path / "work"
    notebook = review_notebook(work)
    with shown_widget(
        tmp_path, flownb_env, (jupyterlab, chromium), notebook, ".flownb-review"
    ) as widget:
        progress = widget.locator(".flownb-progress")
        playwright_sync.expect(progress).to_contain_text("row 1 of 2")
        playwright_sync.expect(widget.locator(".flownb-review-inputs")).to_contain_text("owls")
        panels = widget.locator(".flownb-review-variant")
        playwright_sync.expect(panels.first).to_contain_text("An intro about owls.")
        judge = panels.first.locator(".flownb-judge")
        assert "length_intro" not in judge.inner_text()  # hidden before the answer
        panels.first.locator(".flownb-pass").click()
        playwright_sync.expect(progress).to_contain_text("1 of 4 labelled")
        playwright_sync.expect(judge).to_contain_text("length_intro")
        keys = widget.locator(".flownb-keys input")
        keys.click()
        keys.press_sequentially("n")
        playwright_sync.expect(progress).to_contain_text("row 2 of 2")
        keys.press_sequentially("f")
        playwright_sync.expect(progress).to_contain_text("2 of 4 labelled")
        screenshot(widget, "review-widget.png")
    eval_id = (work / "report_id.txt").read_text().strip()
    labels = flownb.load_report(eval_id, flownb_env).labels
    got = {(r.row, r.variant): bool(r.passed) for r in labels.itertuples()}
    assert got == {("r0", "a"): True, ("r1", "a"): False}


def test_image_outputs_show_as_a_grid_in_the_browser(
    tmp_path: Path, flownb_env: Path, chromium: Chromium, jupyterlab: Lab
) -> None:
    work = tmp_path / "work"
    pics = make_flow({"pic": "a picture of {topic}"}, ["topic"], images=("pic",))
    notebook = review_notebook(work, IMAGE_CELL, pics)
    with shown_widget(
        tmp_path, flownb_env, (jupyterlab, chromium), notebook, ".flownb-review", height=1200
    ) as widget:
        grid = widget.locator(".flownb-review-grid")
        cells = grid.locator("td[data-variant]")
        playwright_sync.expect(cells).to_have_count(6)  # 3 rows x 2 variants
        where = cells.evaluate_all("tds => tds.map(t => t.dataset.variant + t.dataset.row)")
        assert where == ["ar0", "br0", "ar1", "br1", "ar2", "br2"]
        images = grid.locator("img")
        playwright_sync.expect(images).to_have_count(6)
        sizes = images.evaluate_all("imgs => imgs.map(i => [i.complete, i.naturalWidth])")
        assert all(done and width > 0 for done, width in sizes), sizes
        # The image being labelled is shown large in its variant's panel.
        panel = widget.locator(".flownb-review-variant").first.locator("img")
        assert panel.evaluate("i => i.complete && i.naturalWidth > 160")
        widget.locator(".flownb-review-variant").first.locator(".flownb-pass").click()
        playwright_sync.expect(cells.first).to_contain_text("pass")
        screenshot(widget, "review-image-grid.png")
