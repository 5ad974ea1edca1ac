"""The live results view in a real browser: JupyterLab on loopback (its kernels started by the
server, so ``FLOWNB_LIVE=auto`` turns the view on), Debian's chromium via Playwright, and a slow
loopback OpenAI server.

Runs a notebook whose cell runs a frame through a flow, and checks that the page shows the view
filling in (the bar and some rows, not all) while the cell runs, then the static table of the
returned frame once it ends, with no widget left in the saved notebook. Screenshots go to
``test-artifacts/`` for a human to look at.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import playwright.sync_api as playwright_sync
import pytest

from flownb.testing.fake_openai import FakeOpenAI
from tests.browser.artifacts import ARTIFACTS, screenshot
from tests.browser.chromium import Chromium
from tests.browser.lab import Lab
from tests.browser.notebook import lab_page, open_notebook, write_notebook

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = "live.ipynb"
ROWS = 16
WIDGET = "application/vnd.jupyter.widget-view+json"

pytestmark = pytest.mark.timeout(240)

CELL = f"""import flownb, pandas as pd
flow = flownb.load_flow("blog.json", provider="openai", concurrency=2, retries=0)
df = pd.DataFrame({{"topic": ["BROKEN reef"] + [f"kelp {{i:02d}}" for i in range({ROWS - 1})],
                   "tone": "dry"}})
out = flow.run_dataframe(df)"""


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI(latency=0.4, fail_markers={"500": "BROKEN"}).start()
    try:
        yield server
    finally:
        server.stop()


def _write_notebook(work: Path) -> None:
    shutil.copy(ROOT / "notebooks" / "flows" / "blog-intro.json", work / "blog.json")
    write_notebook(work / NOTEBOOK, [CELL])


def test_the_live_view_fills_in_in_jupyterlab(
    tmp_path: Path, flownb_env: Path, chromium: Chromium, jupyterlab: Lab, fake: FakeOpenAI
) -> None:
    import os

    work = tmp_path / "work"
    work.mkdir()
    _write_notebook(work)
    ARTIFACTS.mkdir(exist_ok=True)
    env = dict(os.environ)  # conftest: clean of flownb/OpenAI/proxy vars, FLOWNB_HOME temporary
    env.update(OPENAI_BASE_URL=fake.url, OPENAI_API_KEY="not-a-real-key")
    with lab_page(jupyterlab, chromium, work, env) as (lab, page):
        try:
            open_notebook(page, lab, NOTEBOOK)
            page.locator(".jp-Notebook .jp-Cell .jp-InputArea-editor").first.click()
            page.keyboard.press("Shift+Enter")
            # While the cell runs: the widget, with the bar and some of the rows.
            bar = page.locator(".widget-html .flownb-live-bar").first
            bar.wait_for(state="visible", timeout=60_000)
            rows = page.locator(".widget-html .flownb-live-rows tbody tr")
            deadline = time.monotonic() + 60
            while rows.count() < 2 and time.monotonic() < deadline:
                time.sleep(0.1)
            partial = rows.count()
            text = bar.inner_text()
            screenshot(page, "browser-live-running.png")
            assert 2 <= partial < ROWS, partial
            assert f"/{ROWS} rows" in text and f"{ROWS}/{ROWS}" not in text, text
            # The failed row is first in the table while the batch runs on.
            first = page.locator(".widget-html .flownb-live-rows tbody tr").first
            playwright_sync.expect(first).to_contain_text("BROKEN reef", timeout=60_000)
            # Then: the returned frame's table, static HTML, and no widget left.
            final = page.locator(".jp-OutputArea-output .flownb-live .flownb-frame").first
            final.wait_for(state="visible", timeout=90_000)
            playwright_sync.expect(page.locator(".widget-html .flownb-live")).to_have_count(0)
            assert final.locator("tbody tr").count() == ROWS
            assert final.locator("img").count() == ROWS - 1  # thumbnails of the images
            screenshot(page, "browser-live-done.png")
            lab.wait_idle(timeout=90)
            page.keyboard.press("Control+s")
            saved = _saved_outputs(work / NOTEBOOK)
            assert saved and all(WIDGET not in out.get("data", {}) for out in saved), saved
            assert any(
                "flownb-frame" in "".join(o.get("data", {}).get("text/html", "")) for o in saved
            )
        except BaseException:
            with contextlib.suppress(Exception):
                page.screenshot(path=str(ARTIFACTS / "browser-live-failure.png"), timeout=10_000)
            raise


def _saved_outputs(path: Path, timeout: float = 30) -> list[dict]:
    """Wait for the saved notebook to hold the cell's outputs; return them."""
    deadline = time.monotonic() + timeout
    outputs: list[dict] = []
    while time.monotonic() < deadline:
        with contextlib.suppress(ValueError, KeyError, IndexError):
            outputs = json.loads(path.read_text(encoding="utf-8"))["cells"][0]["outputs"]
            if outputs:
                return outputs
        time.sleep(0.2)
    return outputs
