"""Screenshots of what the real-browser tests saw, for a person to look at: written to
``test-artifacts/`` when ``FLOWNB_TEST_SCREENSHOTS`` is set (to anything but ``0``), skipped
otherwise.

No test reads them back: the tests check the page itself (its text, elements and styles). Taken
on every run they cost chromium, the Playwright driver and the test about 5 CPU-s a run (each
one rendered, PNG-encoded, sent over DevTools as base64 and written), a tenth of the browser
tests' CPU, for files nobody opened. A failing test still leaves its screenshot and the
server's log whatever the setting (its ``except`` branch, not this), where they help most.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import playwright.sync_api as playwright_sync

from tests.conftest import ROOT

__all__ = ["ARTIFACTS", "screenshot", "screenshots_wanted"]

ARTIFACTS = ROOT / "test-artifacts"


# Read once, when the suite imports this (collection, in every xdist worker): each test runs
# with the FLOWNB_ variables removed from its environment (tests/conftest.py's flownb_env).
_WANTED = os.environ.get("FLOWNB_TEST_SCREENSHOTS", "0") not in ("", "0")


def screenshots_wanted() -> bool:
    """Return whether ``FLOWNB_TEST_SCREENSHOTS`` asked for the screenshots when the suite
    started."""
    return _WANTED


def screenshot(
    target: playwright_sync.Page | playwright_sync.Locator, name: str, **options: Any
) -> Path | None:
    """Save a screenshot of ``target`` (a page or an element; ``options``: Playwright's
    ``screenshot`` keywords) as ``test-artifacts/<name>`` when screenshots are wanted.

    Returns:
        The file written, or ``None`` when screenshots are not wanted.
    """
    if not screenshots_wanted():
        return None
    path = ARTIFACTS / name
    path.parent.mkdir(parents=True, exist_ok=True)
    target.screenshot(path=str(path), **options)
    return path
