"""A notebook opened in JupyterLab in chromium, as the real-browser tests drive one: the notebook
file, the server and the page, and the steps a user takes (open it, run every cell)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import playwright.sync_api as playwright_sync
import pytest

from .chromium import Chromium, browser_context
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


def _refuse(route: playwright_sync.Route) -> None:
    route.abort()


@contextmanager
def lab_page(
    server: Lab,
    chromium: Chromium,
    root: Path,
    env: Mapping[str, str],
    *,
    height: int = 1000,
    timeout_ms: float = 45_000,
    outside: Callable[[playwright_sync.Route], None] = _refuse,
) -> Iterator[tuple[Lab, playwright_sync.Page]]:
    """Serve ``root`` (a folder under the shared server's root) from JupyterLab ``server``, its
    kernels in environment ``env`` (see :func:`lab_for`), to a page of its own in ``chromium``;
    yield the test's view of the server and the page, whose requests to other hosts go to
    ``outside`` (refused by default). The page's context is closed, then the test's kernels
    shut down, on exit."""
    with (
        lab_for(server, root, env) as lab,
        browser_context(chromium, viewport={"width": 1400, "height": height}) as context,
    ):
        context.set_default_timeout(timeout_ms)
        context.route(OUTSIDE, outside)
        yield lab, context.new_page()


def open_notebook(page: playwright_sync.Page, lab: Lab, name: str) -> None:
    """Open notebook ``name`` and wait until its cells are shown and its kernel is idle."""
    page.goto(lab.notebook_url(name), wait_until="domcontentloaded")
    page.locator(".jp-Notebook .jp-Cell").first.wait_for(state="visible", timeout=60_000)
    lab.wait_idle(timeout=60)


def open_another_notebook(page: playwright_sync.Page, lab: Lab, name: str) -> None:
    """Open notebook ``name`` in a new tab of the JupyterLab already shown in ``page``, as a
    user would (File, Open from Path), and wait until it is the current tab. Navigating the
    page to it instead loads JupyterLab again (about 4 CPU-s more of chromium and the server).
    Its kernel may still be starting when this returns."""
    page.locator(".lm-MenuBar-itemLabel", has_text="File").first.click()
    page.get_by_role("menuitem", name="Open from Path…", exact=True).click()
    page.locator(".jp-Dialog input").first.fill(lab.path(name))
    page.locator(".jp-Dialog .jp-mod-accept").click()
    current = page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab.jp-mod-current")
    playwright_sync.expect(current).to_contain_text(Path(name).name, timeout=60_000)


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
