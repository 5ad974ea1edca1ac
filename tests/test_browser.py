"""The forms notebook in a real browser: JupyterLab on loopback, Debian's chromium via Playwright.

Runs the notebook's cells from the Run menu, types into a variable field of the ``FlowForm``,
clicks Run, and waits for the output text (the offline provider's text is the rendered prompt,
so it contains what was typed) and the output image (loaded, with a non-zero natural size) to
appear in the page. Screenshots go to ``test-artifacts/`` for a human to look at.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import playwright.sync_api as playwright_sync
import pytest

import flownb
from tests.browser.artifacts import ARTIFACTS, screenshot
from tests.browser.chromium import Chromium
from tests.browser.lab import Lab
from tests.browser.notebook import (
    lab_page,
    open_another_notebook,
    open_notebook,
    page_errors,
    run_all_cells,
    run_until_shown,
    write_notebook,
)
from tests.conftest import make_flow

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
FORMS_NOTEBOOK = "03-forms-and-magics.ipynb"
TYPED = "glass octopus 4821"  # unlikely to appear anywhere else in the page

pytestmark = pytest.mark.timeout(180)


def _stripped_copy(src: Path, dst: Path) -> None:
    """Copy a notebook without its saved outputs: all the test sees comes from this run."""
    nb = json.loads(src.read_text(encoding="utf-8"))
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "code":
            cell["outputs"] = []
            cell["execution_count"] = None
    nb.get("metadata", {}).pop("widgets", None)
    nb.setdefault("metadata", {})["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3 (ipykernel)",
        "language": "python",
    }
    dst.write_text(json.dumps(nb, indent=1), encoding="utf-8")


def _workdir(tmp_path: Path) -> Path:
    """A temporary copy of ``notebooks/`` (flows and data included), outputs stripped."""
    work = tmp_path / "notebooks"
    shutil.copytree(NOTEBOOKS, work, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    for nb in work.glob("*.ipynb"):
        _stripped_copy(nb, nb)
    return work


def _drive_form(page: playwright_sync.Page, lab: Lab, notebook: str) -> None:
    """Open ``notebook``, run all cells, fill the first form's first field, click Run, and
    check the output text and image; screenshots go to ``test-artifacts/`` when asked for
    (tests/browser/artifacts.py)."""
    open_notebook(page, lab, notebook)
    # The notebook's other cells have run too once this returns.
    form = run_until_shown(page, lab, ".flownb-form")
    form.scroll_into_view_if_needed()

    field = form.locator("input[type=text], textarea").first
    field.click()
    field.fill(TYPED)
    field.press("Tab")  # blur: ipywidgets syncs on change as well as on input
    form.locator(".flownb-run").first.click()

    output = form.locator(".flownb-output").first
    playwright_sync.expect(output).to_contain_text(TYPED, timeout=45_000)
    image = output.locator("img").first
    image.wait_for(state="visible", timeout=30_000)
    image.evaluate(
        "img => img.complete ? null : new Promise((ok, bad) => {"
        " img.onload = ok; img.onerror = () => bad(new Error('image failed to load')); })"
    )
    size = image.evaluate("img => [img.naturalWidth, img.naturalHeight]")
    assert size[0] > 0 and size[1] > 0, f"output image did not load: natural size {size}"
    # The widget really rendered (not the "Loading widget..." placeholder).
    assert "Loading widget" not in form.inner_text()

    form.scroll_into_view_if_needed()
    screenshot(page, "browser-form.png")
    screenshot(form, "browser-form-widget.png")


# A form whose second node's first call is held in flight until the test lets it go (by writing
# the file RELEASE next to the notebook, the kernel's working folder), so Stop is pressed while it
# is in flight however slow the machine: the Stop button's notebook. Stop lets that call finish in
# the background (it was sent, so paid for), and the next Run, started while it is still held, is
# served its answer instead of buying it again.
STOP_NOTEBOOK = "stop-form.ipynb"
RELEASE = "release-held-call"
_STOP_CELL = f"""import asyncio, json, os
import flownb
from flownb.providers.base import Generation, Provider

class HeldOnce(Provider):
    name = "held-once"
    held = False

    async def generate(self, call):
        if "HOLD" in call.prompt and not self.held:
            type(self).held = True
            while not os.path.exists({RELEASE!r}):
                await asyncio.sleep(0.05)
        return Generation("said " + call.prompt)

held_form = flownb.load_flow(json.loads(FLOW), provider=HeldOnce(), name="held").form()
held_form"""


def _write_stop_notebook(work: Path) -> None:
    flow = make_flow({"first": "first {text}", "second": "second {text} HOLD"}, ["text"])
    write_notebook(work / STOP_NOTEBOOK, [f"FLOW = {json.dumps(json.dumps(flow))}\n{_STOP_CELL}"])


def _stop_form(page: playwright_sync.Page, lab: Lab, work: Path) -> None:
    """Open the Stop notebook (in ``work``), run it, click Run, then Stop: the form says it
    stopped, and the next Run completes with the finished node from the cache and the stopped
    one's answer."""
    open_another_notebook(page, lab, STOP_NOTEBOOK)
    cell = page.locator(".jp-Notebook .jp-Cell .jp-InputPrompt:visible").first
    cell.wait_for(state="visible", timeout=60_000)
    # A second notebook may be asked which kernel to start (the default one): until its kernel
    # is up, accept that dialog if it shows.
    select = page.locator(".jp-Dialog .jp-mod-accept")
    deadline = time.monotonic() + 60
    while not lab.has_kernel(STOP_NOTEBOOK):
        assert time.monotonic() < deadline, f"no kernel for {STOP_NOTEBOOK} within 60 s"
        if select.is_visible():
            select.click()
        page.wait_for_timeout(200)
    lab.wait_idle(timeout=60)
    cell.click()  # the forms notebook is open in another tab: make this one the current one
    run_all_cells(page)
    # The forms notebook stays open in another tab: this notebook's form is the "held" one.
    title = page.locator(".flownb-title", has_text="held")
    form = page.locator(".flownb-form", has=title).first
    try:
        form.wait_for(state="visible", timeout=60_000)
    except playwright_sync.TimeoutError:
        pytest.fail(f"no held form rendered; errors in page:\n{page_errors(page)}")
    lab.wait_idle(timeout=60)
    form.scroll_into_view_if_needed()
    status = form.locator(".flownb-status").first
    form.locator(".flownb-run").first.click()
    playwright_sync.expect(status).to_contain_text("Running", timeout=45_000)
    stop = form.locator(".flownb-stop").first
    playwright_sync.expect(stop).to_be_enabled(timeout=45_000)
    stop.click()
    playwright_sync.expect(status).to_contain_text("Stopped", timeout=45_000)
    playwright_sync.expect(stop).to_be_disabled(timeout=45_000)
    form.locator(".flownb-run").first.click()
    playwright_sync.expect(status).to_contain_text("Running", timeout=45_000)
    (work / RELEASE).touch()  # the held call ends now, while this Run waits for it
    playwright_sync.expect(status).to_contain_text("Done", timeout=45_000)
    output = form.locator(".flownb-output").first
    playwright_sync.expect(output).to_contain_text("said second", timeout=45_000)
    playwright_sync.expect(output).to_contain_text("first (cached)", timeout=45_000)
    screenshot(form, "browser-form-stopped.png")


def test_forms_notebook_runs_in_chromium(
    tmp_path: Path, flownb_env: Path, chromium: Chromium, jupyterlab: Lab
) -> None:
    work = _workdir(tmp_path)
    _write_stop_notebook(work)
    notebook = FORMS_NOTEBOOK
    ARTIFACTS.mkdir(exist_ok=True)
    for stale in ("browser-failure.png", "browser-failure-jupyterlab.log"):
        (ARTIFACTS / stale).unlink(missing_ok=True)
    env = dict(os.environ)  # conftest: clean of flownb/OpenAI/proxy vars, FLOWNB_HOME temporary
    env["FLOWNB_HOME"] = str(flownb_env)
    # The kernel runs the server's interpreter (the python3 spec maps "python" to it) in the
    # notebooks' folder: that must import the installed flownb, not some copy lying around.
    found = subprocess.run(
        [sys.executable, "-c", "import flownb; print(flownb.__file__)"],
        cwd=work, env=env, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    kernel_flownb = Path(found.stdout.strip()).resolve()
    assert kernel_flownb == Path(flownb.__file__).resolve(), (
        f"the kernel would import {kernel_flownb}, not the flownb under test"
    )

    # lab_page fails the test if the page (JupyterLab's load included) asked any host but the
    # Lab server for something: on a machine without internet that would hang or fail.
    with lab_page(jupyterlab, chromium, work, env) as (lab, page):
        try:
            _drive_form(page, lab, notebook)
            _stop_form(page, lab, work)
        except BaseException:
            # Leave evidence for CI: what the page looked like, and the server's log.
            with contextlib.suppress(Exception):
                page.screenshot(path=str(ARTIFACTS / "browser-failure.png"), timeout=10_000)
            shutil.copy(lab.log, ARTIFACTS / "browser-failure-jupyterlab.log")
            raise
    # The kernel got FLOWNB_HOME from its kernelspec's environment: the image it drew is there.
    assert list((flownb_env / "media").glob("*.png")), "no image in the FLOWNB_HOME given to Lab"


def test_the_shared_page_is_handed_on_clean(
    tmp_path: Path, flownb_env: Path, chromium: Chromium, jupyterlab: Lab
) -> None:
    """The browser tests share one JupyterLab page: a dialog one test leaves open on it is gone
    when the next one gets the page, which still answers its menus."""
    work = tmp_path / "work"
    work.mkdir()
    env = {**os.environ, "FLOWNB_HOME": str(flownb_env)}
    file_menu = ".lm-MenuBar-itemLabel"
    with lab_page(jupyterlab, chromium, work, env) as (_, page):
        page.locator(file_menu, has_text="File").first.click()
        page.get_by_role("menuitem", name="Open from Path…", exact=True).click()
        playwright_sync.expect(page.locator(".jp-Dialog")).to_have_count(1)
    with lab_page(jupyterlab, chromium, work, env) as (_, page):
        playwright_sync.expect(page.locator(".jp-Dialog")).to_have_count(0)
        playwright_sync.expect(page.locator(".jp-Notebook")).to_have_count(0)
        page.locator(file_menu, has_text="File").first.click()
        item = page.get_by_role("menuitem", name="Open from Path…", exact=True)
        playwright_sync.expect(item).to_be_visible()
        page.keyboard.press("Escape")
