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

from .chromium import CHROMIUM_ARGS
from .lab import Lab, running_lab

__all__ = [
    "OUTSIDE",
    "lab_page",
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
    root: Path,
    scratch: Path,
    env: Mapping[str, str],
    chromium: Path,
    *,
    height: int = 1000,
    timeout_ms: float = 45_000,
    outside: Callable[[playwright_sync.Route], None] = _refuse,
) -> Iterator[tuple[Lab, playwright_sync.Page]]:
    """Start JupyterLab serving ``root`` (see :func:`running_lab`) and a headless ``chromium``;
    yield the server and a page whose requests to other hosts go to ``outside`` (refused by
    default). The browser is closed, then the server stopped, on exit."""
    launched: list[playwright_sync.Browser] = []
    with playwright_sync.sync_playwright() as pw:

        def launch() -> None:
            # While the server starts up: the two take about as long, and neither needs the other.
            launched.append(
                pw.chromium.launch(executable_path=str(chromium), args=CHROMIUM_ARGS, headless=True)
            )

        with running_lab(root, scratch, env, starting=launch) as lab:
            browser = launched[0]
            try:
                page = browser.new_page(viewport={"width": 1400, "height": height})
                page.set_default_timeout(timeout_ms)
                page.route(OUTSIDE, outside)
                yield lab, page
            finally:
                browser.close()


def open_notebook(page: playwright_sync.Page, lab: Lab, name: str) -> None:
    """Open notebook ``name`` and wait until its cells are shown and its kernel is idle."""
    page.goto(lab.notebook_url(name), wait_until="domcontentloaded")
    page.locator(".jp-Notebook .jp-Cell").first.wait_for(state="visible", timeout=60_000)
    lab.wait_idle(timeout=60)


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
