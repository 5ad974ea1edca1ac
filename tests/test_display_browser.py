"""Model text is data, in a real browser: a notebook whose outputs hold markup, math
delimiters, an ``onerror`` image, ``file://`` URLs and terminal escapes through every display
path (a run, a stream, a batch table, ``%flow batch``, an evaluation's bar and summary, compare,
the review and the form, the run's picture, ``print``).

1. Executed and exported with ``jupyter nbconvert --execute --to html``, the page opened from
   disk in Debian's chromium: every text visible as written, no dialog, no local file read.
2. Run in JupyterLab in chromium: the same texts visible as written, nothing typeset as math
   (no MathJax element in any output), no dialog, and a flow as a cell's value drawn as SVG.
   Screenshots of each view go to ``test-artifacts/display/``.
"""

from __future__ import annotations

import base64
import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import playwright.sync_api as playwright_sync
import pytest
from PIL import Image

from flownb.show.escape import term_text
from flownb.testing.fake_openai import FakeOpenAI
from tests.browser.artifacts import screenshot
from tests.browser.chromium import Chromium, browser_context
from tests.browser.lab import Lab
from tests.browser.notebook import (
    lab_page,
    open_notebook,
    page_errors,
    run_all_cells,
    write_notebook,
)
from tests.conftest import make_flow
from tests.kernels import KERNEL_OPTIONS, isolated, jupyter_app

NOTEBOOK = "hostile.ipynb"

pytestmark = pytest.mark.timeout(420)

# What a model may write: each must be shown as these characters (ESC shown as ␛).
TEXTS = [
    "ANSWER<e for night owls in three bullet points.>",
    "Dear <Customer Name>, a < b",
    "<img src=x onerror=alert(document.domain)> hello",
    "money $5 and $7, math $x$",
    "red \x1b[31mALERT\x1b[0m done",
]
WORDS = " ".join(f"word{i}" for i in range(1, 31))


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(stream_delay=0.05) as running:
        yield running


def _write(work: Path) -> Path:
    """Write the flows, a local image that must never be read, and the notebook; return the
    image's path."""
    (work / "echo.json").write_text(json.dumps(make_flow({"answer": "{x}"}, ["x"])))
    (work / "pic.json").write_text(
        json.dumps(make_flow({"answer": "{x}", "pic": "a picture of {x}"}, ["x"], images=("pic",)))
    )
    secret = work / "secret.png"
    out = io.BytesIO()
    Image.new("RGB", (40, 40), "magenta").save(out, format="PNG")
    secret.write_bytes(out.getvalue())
    texts = [*TEXTS, secret.as_uri()]
    cells = [
        "import flownb, pandas as pd\n%load_ext flownb\n"
        "flow = flownb.load_flow('echo.json')\npic = flownb.load_flow('pic.json')\n"
        f"texts = {texts!r}\ndf = pd.DataFrame({{'x': texts}})",
        "flow",
        "result = flow.run(x=' | '.join(texts))\nresult",
        f"flow.run(x={WORDS!r})",
        "pic.run_dataframe(df)",
        "%flow batch echo.json --df df",
        "dollar = flownb.scorers.contains('answer', '$')\n"
        "report = flownb.evaluate({'a': flow, 'b': pic}, df, [dollar])\nreport",
        "report.compare()",
        "report.review()",
        "form = flow.form()\nform.inputs['x'].value = texts[2]\nform",
        "result.trace_picture()",
        "print(result)",
        # The control: HTML that is not flownb's, which JupyterLab does typeset.
        "from IPython.display import HTML\nHTML('control: $x^2$ is math here')",
        # The other frames flownb hands back: each "$" as written, in flownb's view (the
        # results hold the image variant's column) or pandas' own (a part of them; the run log).
        "report.results",
        "report.results[['variant', 'x', 'answer']]",
        "flownb.runs().tail(3)",
    ]
    write_notebook(work / NOTEBOOK, cells)
    return secret


def _env(home: Path, fake: FakeOpenAI) -> dict[str, str]:
    return {
        **os.environ,
        "FLOWNB_HOME": str(home),
        "OPENAI_BASE_URL": fake.url,
        "OPENAI_API_KEY": "sk-test",
        "FLOWNB_PROVIDER": "openai",
        "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
    }


# Every text node of the page's HTML outputs (not the control's, not preformatted) that holds a
# "$": counted, and listed when it holds two (a pair MathJax would read) or sits outside
# tex2jax_ignore.
_TYPESET_JS = """() => {
  const bad = []; let dollars = 0;
  for (const area of document.querySelectorAll('.jp-OutputArea-output')) {
    if (area.innerText.includes('control:')) continue;
    const walker = document.createTreeWalker(area, NodeFilter.SHOW_TEXT);
    let node;
    while ((node = walker.nextNode())) {
      const text = node.nodeValue;
      if (!text.includes('$') || node.parentElement.closest('pre, code, style, script')) continue;
      dollars += 1;
      const pair = text.split('$').length > 2;
      if (pair || !node.parentElement.closest('.tex2jax_ignore')) {
        bad.push(text.slice(0, 120));
      }
    }
  }
  return {dollars, bad};
}"""


def _visible(text: str) -> str:
    return " ".join(term_text(text).split())


def test_an_exported_notebook_shows_model_text_as_written(
    tmp_path: Path, flownb_env: Path, chromium: Chromium, fake: FakeOpenAI
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    secret = _write(work)
    with isolated(_env(flownb_env, fake)) as env:
        done = subprocess.run(
            [
                # What `jupyter nbconvert` runs (that command execs a process of its own).
                *jupyter_app("nbconvert"),
                "--execute",
                "--to",
                "html",
                *KERNEL_OPTIONS,
                NOTEBOOK,
            ],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
    assert done.returncode == 0, done.stderr[-3000:]
    page_path = work / "hostile.html"
    markup = page_path.read_text(encoding="utf-8")
    # The local image a text named was not read into the page.
    assert base64.b64encode(secret.read_bytes()).decode()[:60] not in markup
    dialogs: list[str] = []
    files: list[str] = []
    with browser_context(chromium, viewport={"width": 1400, "height": 1000}) as context:
        page = context.new_page()
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))

        def route(r: playwright_sync.Route) -> None:
            url = r.request.url
            if url.startswith("file:") and url != page_path.as_uri():
                files.append(url)  # a local file the page asked for
            r.abort() if not url.startswith(("file:", "data:")) else r.continue_()

        page.route("**/*", route)
        page.goto(page_path.as_uri(), wait_until="load")
        body = " ".join(page.inner_text("body").split())
        # MathJax is not loaded offline, so what it would typeset is read from the page:
        # every "$" of an HTML output (but the control's) must sit inside an element
        # MathJax skips (MathJax 2, nbconvert's: tex2jax_ignore), and no text holds a pair
        # of them. Preformatted text is never typeset.
        typeset = page.evaluate(_TYPESET_JS)
        screenshot(page, "display/nbconvert.png", full_page=True)
    assert dialogs == []
    assert files == []
    assert typeset["dollars"] > 20, typeset  # the frames' and the views' "$" were all looked at
    assert typeset["bad"] == [], typeset["bad"]
    for text in [*TEXTS, secret.as_uri()]:
        assert _visible(text) in body, text
    assert "a form: run the notebook to use it" in body  # the form's static copy
    assert "a review: run the notebook to answer" in body
    assert "0%" not in body.split("evaluate", 1)[1][:40]  # the bar saved its final state


def _output(page: playwright_sync.Page, index: int) -> playwright_sync.Locator:
    return page.locator(".jp-Notebook .jp-Cell").nth(index).locator(".jp-Cell-outputArea")


def test_jupyterlab_shows_model_text_as_written_and_draws_the_flow(
    tmp_path: Path, flownb_env: Path, chromium: Chromium, jupyterlab: Lab, fake: FakeOpenAI
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    secret = _write(work)
    dialogs: list[str] = []
    files: list[str] = []
    with lab_page(jupyterlab, chromium, work, _env(flownb_env, fake), height=1400) as (
        lab,
        page,
    ):

        def on_dialog(dialog: playwright_sync.Dialog) -> None:
            dialogs.append(dialog.message)
            dialog.dismiss()

        def on_request(request: playwright_sync.Request) -> None:
            if request.url.startswith("file:"):
                files.append(request.url)

        # The page is shared with the other browser tests: its listeners go with the test.
        page.on("dialog", on_dialog)
        page.on("request", on_request)
        try:
            _look_at_lab(page, lab)
        finally:
            page.remove_listener("dialog", on_dialog)
            page.remove_listener("request", on_request)
    assert dialogs == []
    assert [f for f in files if secret.name in f] == []


def _look_at_lab(page: playwright_sync.Page, lab: Lab) -> None:
    """Open the notebook, run it, and check what each output shows (screenshots of each)."""
    open_notebook(page, lab, NOTEBOOK)
    run_all_cells(page)
    # The stream: part of the answer on screen while it arrives.
    live = _output(page, 3).locator(".flownb-live").first
    live.wait_for(state="visible", timeout=60_000)
    playwright_sync.expect(live).to_contain_text("word1", timeout=30_000)
    screenshot(_output(page, 3), "display/lab-stream.png")
    last = _output(page, 11)
    try:
        playwright_sync.expect(last).to_contain_text("ALERT", timeout=180_000)
    except AssertionError:
        pytest.fail(f"the notebook did not finish; errors:\n{page_errors(page)}")
    lab.wait_idle(timeout=120)
    page.wait_for_timeout(500)  # let MathJax's asynchronous typesetting have its chance
    names = {
        1: "flow",
        2: "run",
        3: "stream-done",
        4: "batch",
        5: "flow-batch",
        6: "evaluate",
        7: "compare",
        8: "review",
        9: "form",
        10: "trace-picture",
    }
    for index, name in names.items():
        screenshot(_output(page, index), f"display/lab-{name}.png")
    outputs = page.locator(".jp-Notebook .jp-OutputArea")
    # Nothing of flownb's typeset as math (MathJax 3 draws into mjx-container elements),
    # while the control cell's is: the typesetter was there and running.
    control = _output(page, 12).locator("mjx-container")
    control.first.wait_for(state="attached", timeout=60_000)
    # report.results and runs(): pandas' own tables, their "$" shown as written.
    for index, name in ((13, "results"), (14, "results-text"), (15, "runs")):
        table = _output(page, index).locator("table.dataframe")
        table.first.wait_for(state="attached", timeout=60_000)
        screenshot(_output(page, index), f"display/lab-{name}.png")
        assert "$5 and $7, math $x$" in _output(page, index).inner_text(), name
    assert page.locator(".jp-OutputArea mjx-container").count() == control.count()
    texts = [t for t in outputs.all_inner_texts() if "control:" not in t]
    shown = " ".join(" ".join(texts).split())
    for text in TEXTS:
        assert _visible(text) in shown, text
    # The flow as a cell's value: an SVG drawing, from the HTML that outranks everything.
    flow_out = _output(page, 1)
    assert flow_out.locator('[data-mime-type="text/html"] svg g.node').count() >= 3
    assert flow_out.locator('[data-mime-type="text/markdown"]').count() == 0
    # The run's result: each $ as written, the money of the bar too.
    assert "$5 and $7" in _output(page, 2).inner_text()
    assert "$" in _output(page, 6).inner_text()
    # Only the image node's outputs are images, none of them the local file.
    assert _output(page, 4).locator("img").count() == len(TEXTS) + 1
    assert _output(page, 2).locator("img").count() == 0
    # The form's inputs stay inside the output area.
    area = _output(page, 9).bounding_box()
    for box in _output(page, 9).locator(".flownb-input").all():
        mine = box.bounding_box()
        assert area is not None and mine is not None
        assert mine["x"] + mine["width"] <= area["x"] + area["width"] + 1
    # Compare tables read from the left.
    cell = _output(page, 7).locator("table.flownb-eval td").first
    assert cell.evaluate("e => getComputedStyle(e).textAlign") in ("left", "start")
    screenshot(page, "display/lab-page.png", full_page=True)
