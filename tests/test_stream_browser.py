"""A streamed single run in a real browser: JupyterLab on loopback, Debian's chromium via
Playwright, the fake OpenAI streaming one word per 200 ms. While the text arrives the page shows
the live area (``.flownb-live``) with part of the answer, for ``flow.run`` as a cell's value and
for the form's Run button; once done, the usual result and no live area. Screenshots taken while
the text arrives go to ``test-artifacts/``."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import playwright.sync_api as playwright_sync
import pytest

from flownb.testing.fake_openai import FakeOpenAI
from tests.browser.artifacts import ARTIFACTS, screenshot
from tests.browser.chromium import Chromium
from tests.browser.lab import Lab
from tests.browser.notebook import (
    lab_page,
    open_notebook,
    page_errors,
    run_all_cells,
    write_notebook,
)
from tests.conftest import make_flow

WORDS = " ".join(f"word{i}" for i in range(1, 21))  # 20 words: 4 s of streaming
NOTEBOOK = "stream.ipynb"

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def streaming_fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(stream_delay=0.2) as fake:
        yield fake


def _write_notebook(work: Path) -> None:
    (work / "story.json").write_text(json.dumps(make_flow({"story": "{x}"}, ["x"])))
    cells = [
        "import flownb\nflow = flownb.load_flow('story.json')",
        f"flow.run(x={WORDS!r})",
        "form = flow.form()\nform",
    ]
    write_notebook(work / NOTEBOOK, cells)


def _partial(text: str) -> bool:
    """Whether ``text`` holds the start of the answer but not its end (still arriving)."""
    return "echo: word1" in text and "word20" not in text


def test_a_streamed_run_grows_in_jupyterlab(
    tmp_path: Path,
    flownb_env: Path,
    chromium: Chromium,
    jupyterlab: Lab,
    streaming_fake: FakeOpenAI,
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    _write_notebook(work)
    ARTIFACTS.mkdir(exist_ok=True)
    env = {
        **os.environ,
        "FLOWNB_HOME": str(flownb_env),
        "OPENAI_BASE_URL": streaming_fake.url,
        "OPENAI_API_KEY": "sk-test",
        "FLOWNB_PROVIDER": "openai",
        "FLOWNB_CACHE": "0",
    }
    with lab_page(jupyterlab, chromium, work, env) as (lab, page):
        try:
            open_notebook(page, lab, NOTEBOOK)
            run_all_cells(page)

            # flow.run as the cell's value: part of the answer on screen while it streams.
            run_cell = page.locator(".jp-Notebook .jp-Cell").nth(1)
            live = run_cell.locator(".jp-OutputArea .flownb-live").first
            live.wait_for(state="visible", timeout=60_000)
            playwright_sync.expect(live).to_contain_text("echo: word1", timeout=30_000)
            seen = live.inner_text()
            screenshot(page, "browser-stream-live.png")
            assert _partial(seen), seen
            result = run_cell.locator(".jp-OutputArea-output", has_text="word20").first
            result.wait_for(state="visible", timeout=60_000)
            playwright_sync.expect(run_cell.locator(".flownb-live")).to_have_count(
                0, timeout=30_000
            )

            # The form's Run button: the live area inside the form grows, then the output.
            form = page.locator(".flownb-form").first
            form.wait_for(state="visible", timeout=60_000)
            lab.wait_idle(timeout=60)
            form.scroll_into_view_if_needed()
            field = form.locator("input[type=text], textarea").first
            field.click()
            field.fill(WORDS)
            field.press("Tab")
            form.locator(".flownb-run").first.click()
            area = form.locator(".flownb-live").first
            playwright_sync.expect(area).to_contain_text("echo: word1", timeout=30_000)
            text = area.inner_text()
            screenshot(form, "browser-stream-form.png")
            assert _partial(text), text
            output = form.locator(".flownb-output").first
            playwright_sync.expect(output).to_contain_text("word20", timeout=45_000)
            playwright_sync.expect(area).to_have_text("", timeout=30_000)
        except BaseException:
            with contextlib.suppress(Exception):
                page.screenshot(path=str(ARTIFACTS / "browser-stream-failure.png"))
                print(page_errors(page))
            shutil.copy(lab.log, ARTIFACTS / "browser-stream-failure-jupyterlab.log")
            raise
