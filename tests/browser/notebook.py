"""A notebook opened in JupyterLab in chromium, as the real-browser tests drive one: the notebook
file, the server and the page, and the steps a user takes (open it, run every cell).

The tests of a process share one JupyterLab page (:func:`lab_page`): loaded by the first, reset
to a known state (no notebook open, no dialog) before and after each, and loaded afresh after a
test that failed or left it in a state the reset cannot undo."""

from __future__ import annotations

import contextlib
import json
import re
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import playwright.sync_api as playwright_sync
import pytest

from .chromium import Chromium
from .lab import Lab, lab_for

__all__ = [
    "OUTSIDE",
    "lab_page",
    "open_another_notebook",
    "open_notebook",
    "page_errors",
    "run_all_cells",
    "run_until_shown",
    "write_notebook",
]

# Any URL that is not on loopback: everything the page needs comes from the Lab server.
OUTSIDE = re.compile(r"^(https?|wss?)://(?!(127\.0\.0\.1|localhost)[:/])")


def write_notebook(path: Path, sources: list[str]) -> None:
    """Write a notebook of code cells holding ``sources``, without outputs, for the python3
    kernel, to ``path``."""
    nb = {
        "cells": [
            {"cell_type": "code", "execution_count": None, "id": f"c{i}", "metadata": {},
             "outputs": [], "source": source}
            for i, source in enumerate(sources)
        ],
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3 (ipykernel)",
                                    "language": "python"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }  # fmt: skip
    path.write_text(json.dumps(nb, indent=1), encoding="utf-8")


# The shared tab's workspace: its own, emptied whenever the tab loads (``reset``), so a reload
# never reopens an earlier test's notebooks.
_WORKSPACE = "flownb-tests"

# What the tab is reset to between tests, through the JupyterLab application the page exposes
# (tests/browser/lab.py starts the server with ``expose_app_in_browser``): every main-area tab
# disposed (a notebook's unsaved changes dropped, no "save your work?" dialog), then its state
# read back: the tabs and dialogs left, and whether it is still a working JupyterLab.
_RESET_JS = """() => {
  const app = window.jupyterapp;
  if (!app || !document.querySelector('#jp-main-dock-panel')) return {lab: false};
  for (const widget of Array.from(app.shell.widgets('main'))) widget.dispose();
  return {lab: true, tabs: Array.from(app.shell.widgets('main')).length,
          dialogs: document.querySelectorAll('.jp-Dialog').length,
          notebooks: document.querySelectorAll('.jp-Notebook').length};
}"""
_CLEAN = {"lab": True, "tabs": 0, "dialogs": 0, "notebooks": 0}


@dataclass
class _Tab:
    """The JupyterLab tab the browser tests of a process share: JupyterLab loaded once (about 5
    CPU-s of chromium and the server a load) and each test's notebooks opened in it and closed
    after. ``outside``: the URLs of other hosts the page asked for since it loaded (refused)."""

    context: playwright_sync.BrowserContext
    page: playwright_sync.Page
    outside: list[str] = field(default_factory=list)

    def close(self) -> None:
        """Close the tab's browser context (the next test loads JupyterLab afresh)."""
        with contextlib.suppress(playwright_sync.Error):
            self.context.close()

    def reset(self) -> dict[str, object]:
        """Dismiss any dialog, close every notebook; return the state then (``_CLEAN`` when
        it is the known one), or what went wrong."""
        try:
            dialogs = self.page.locator(".jp-Dialog")
            for _ in range(5):  # Escape rejects a JupyterLab dialog; one may stand on another
                if dialogs.count() == 0:
                    break
                self.page.keyboard.press("Escape")
            state = self.page.evaluate(_RESET_JS)
            assert isinstance(state, dict)
            return state
        except playwright_sync.Error as exc:  # the page crashed or was closed
            return {"error": str(exc).splitlines()[0]}


def _load_tab(server: Lab, browser: playwright_sync.Browser) -> _Tab:
    """Open a page on JupyterLab ``server`` (an empty workspace of its own) and wait until the
    application has started and restored its layout; return it as the shared tab."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    tab = _Tab(context, context.new_page())

    def refuse(route: playwright_sync.Route) -> None:
        # Everything the page needs comes from the Lab server (and data: URLs): refuse and
        # record anything else, which on a machine without internet would hang or fail.
        # (Loopback traffic is not intercepted at all: the route matches only other hosts.)
        tab.outside.append(route.request.url)
        route.abort()

    try:
        context.route(OUTSIDE, refuse)
        url = f"{server.url}/lab/workspaces/{_WORKSPACE}?reset&token={server.token}"
        tab.page.goto(url, wait_until="domcontentloaded", timeout=90_000)
        tab.page.wait_for_function("() => window.jupyterapp", timeout=90_000)
        tab.page.evaluate("() => window.jupyterapp.restored")
    except BaseException:
        tab.close()
        raise
    return tab


def _ready_tab(server: Lab, chromium: Chromium, browser: playwright_sync.Browser) -> _Tab:
    """Return the shared tab on ``server``, reset to the known state (loaded afresh when it
    was not there or could not be brought back to it)."""
    tab = chromium.driver.kept.get(server.url)
    if tab is not None and tab.reset() != _CLEAN:
        tab.close()
        tab = None
    if tab is None:
        tab = _load_tab(server, browser)
        state = tab.reset()  # the launcher JupyterLab may open
        if state != _CLEAN:
            tab.close()
            raise RuntimeError(f"a freshly loaded JupyterLab is not in the known state: {state}")
        chromium.driver.kept[server.url] = tab
    return tab


@contextmanager
def lab_page(
    server: Lab,
    chromium: Chromium,
    root: Path,
    env: Mapping[str, str],
    *,
    height: int = 1000,
    timeout_ms: float = 45_000,
) -> Iterator[tuple[Lab, playwright_sync.Page]]:
    """Serve ``root`` (a folder under the shared server's root) from JupyterLab ``server``, its
    kernels in environment ``env`` (see :func:`lab_for`); yield the test's view of the server
    and the JupyterLab page of ``chromium`` the browser tests share, reset to a known state (no
    notebook open, no dialog; loaded afresh when it could not be) at ``height`` pixels high.
    Its requests to other hosts are refused; any made since JupyterLab loaded fails the test on
    exit. On exit the test's notebooks are closed (the page reloaded for the next test when the
    test failed or the page cannot be reset), then its kernels shut down.

    Raises:
        AssertionError: the page asked another host for something.
    """
    with lab_for(server, root, env) as lab, chromium.driver.connected() as browser:
        tab = _ready_tab(server, chromium, browser)
        tab.page.set_viewport_size({"width": 1400, "height": height})
        tab.page.set_default_timeout(timeout_ms)
        try:
            yield lab, tab.page
        except BaseException:
            # What the failure left on the page is not worth cleaning: the next test loads it
            # afresh.
            chromium.driver.kept.pop(server.url, None)
            tab.close()
            raise
        state, outside = tab.reset(), list(tab.outside)
        if state != _CLEAN or outside:
            chromium.driver.kept.pop(server.url, None)
            tab.close()
        if state != _CLEAN:
            warnings.warn(
                f"the shared JupyterLab tab could not be reset ({state}): reloaded", stacklevel=3
            )
        assert not outside, f"the page requested outside resources: {outside[:5]}"


def _open_from_path(page: playwright_sync.Page, lab: Lab, name: str) -> None:
    """Open notebook ``name`` in a new tab of the JupyterLab shown in ``page``, as a user
    would (File, Open from Path), and wait until it is the current tab."""
    # The test's kernelspec is newer than the page: without its name in the page's list,
    # JupyterLab would ask which kernel to start (JupyterLab refreshes the list on its own only
    # every minute or so).
    page.evaluate("() => window.jupyterapp.serviceManager.kernelspecs.refreshSpecs()")
    page.locator(".lm-MenuBar-itemLabel", has_text="File").first.click()
    page.get_by_role("menuitem", name="Open from Path…", exact=True).click()
    page.locator(".jp-Dialog input").first.fill(lab.path(name))
    page.locator(".jp-Dialog .jp-mod-accept").click()
    current = page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab.jp-mod-current")
    playwright_sync.expect(current).to_contain_text(Path(name).name, timeout=60_000)


def open_notebook(page: playwright_sync.Page, lab: Lab, name: str) -> None:
    """Open notebook ``name`` in the JupyterLab shown in ``page`` (File, Open from Path, as a
    user would) and wait until its cells are shown and its kernel is idle."""
    _open_from_path(page, lab, name)
    page.locator(".jp-Notebook .jp-Cell").first.wait_for(state="visible", timeout=60_000)
    lab.wait_idle(timeout=60)


def open_another_notebook(page: playwright_sync.Page, lab: Lab, name: str) -> None:
    """Open notebook ``name`` in a new tab of the JupyterLab already shown in ``page`` beside
    the notebooks open there, and wait until it is the current tab. Its kernel may still be
    starting when this returns."""
    _open_from_path(page, lab, name)


def run_all_cells(page: playwright_sync.Page) -> None:
    """Run every cell through the Run menu, as a user would."""
    page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
    page.get_by_role("menuitem", name="Run All Cells", exact=True).click()


def page_errors(page: playwright_sync.Page) -> str:
    """Return the text of any error outputs in the notebook (for failure messages)."""
    errs = page.locator('[data-mime-type="application/vnd.jupyter.stderr"]')
    return "\n---\n".join(errs.all_inner_texts())[-3000:]


def run_until_shown(page: playwright_sync.Page, lab: Lab, selector: str) -> playwright_sync.Locator:
    """Run every cell; return the first element matching ``selector`` once it is shown and the
    kernel is idle again. Fails the test, with the page's error outputs, when it is not shown
    within a minute."""
    run_all_cells(page)
    shown = page.locator(selector).first
    try:
        shown.wait_for(state="visible", timeout=60_000)
    except playwright_sync.TimeoutError:
        pytest.fail(f"no {selector} rendered; errors in page:\n{page_errors(page)}")
    lab.wait_idle(timeout=60)
    return shown
