"""report.review(pairwise=...) in a real browser: JupyterLab on loopback, Debian's chromium via
Playwright.

A notebook evaluates two variants and shows the blind pairwise widget; the test clicks "A
better", types shortcuts into the keys box, checks the progress count and that which variant
was A shows only once answered, then reads the preferences back from the run log in this
process with ``flownb.load_report``. The screenshot goes to
``test-artifacts/pairwise-review.png`` when asked for (tests/browser/artifacts.py).
"""

from __future__ import annotations

from pathlib import Path

import playwright.sync_api as playwright_sync
import pytest

import flownb
from flownb.evaluation.labels.pairwise import shown_order
from tests.browser.artifacts import screenshot
from tests.browser.chromium import Chromium
from tests.browser.lab import Lab
from tests.test_review_browser import review_notebook, shown_widget

pytestmark = pytest.mark.timeout(240)

CELL = """\
import flownb, pandas as pd
from flownb import scorers as S
flow = flownb.load_flow("flow.json", provider="offline")
data = pd.DataFrame({"topic": ["owls", "tides"]}, index=["r0", "r1"])
variants = {"plain": flow, "bold": flow.with_prompts({"intro": "BOLD intro on {topic}!"})}
report = flownb.evaluate(variants, data, [S.length("intro")], progress=False)
open("report_id.txt", "w").write(report.id)
report.review(pairwise=("plain", "bold"))
"""


def test_blind_pairwise_review_in_the_browser_reaches_the_run_log(
    tmp_path: Path, flownb_env: Path, chromium: Chromium, jupyterlab: Lab
) -> None:
    work = tmp_path / "work"
    notebook = review_notebook(work, CELL)
    with shown_widget(
        tmp_path, flownb_env, (jupyterlab, chromium), notebook, ".flownb-pairwise"
    ) as widget:
        progress = widget.locator(".flownb-progress")
        playwright_sync.expect(progress).to_contain_text("row 1 of 2")
        playwright_sync.expect(progress).to_contain_text("0 of 2 compared")
        playwright_sync.expect(widget.locator(".flownb-review-inputs")).to_contain_text("owls")
        sides = widget.locator(".flownb-side")
        playwright_sync.expect(sides.first).to_contain_text("A")
        reveal = widget.locator(".flownb-reveal")
        playwright_sync.expect(reveal).to_contain_text("not compared yet")
        widget.locator(".flownb-prefer-a").click()
        playwright_sync.expect(progress).to_contain_text("1 of 2 compared")
        playwright_sync.expect(reveal).to_contain_text("A was")
        keys = widget.locator(".flownb-keys input")
        keys.click()
        keys.press_sequentially("n")
        playwright_sync.expect(progress).to_contain_text("row 2 of 2")
        keys.press_sequentially("t")
        playwright_sync.expect(progress).to_contain_text("2 of 2 compared")
        screenshot(widget, "pairwise-review.png")
    eval_id = (work / "report_id.txt").read_text().strip()
    given = flownb.load_report(eval_id, flownb_env).preferences.set_index("row")
    shown_a = shown_order(eval_id, "r0", ("plain", "bold"))[0]
    assert given.loc["r0", "winner"] == shown_a and given.loc["r0", "shown_first"] == shown_a
    assert given.loc["r1", "winner"] == "tie"
