"""The browser every real-browser test drives: Debian's chromium through Playwright.

A missing browser is handled one way everywhere: the ``chromium`` fixture (tests/conftest.py)
fails the test with one line saying how to install it. Never a skip: CI must not pass without
the browser tests having run (``scripts/test`` apt-installs chromium).
"""

from __future__ import annotations

from pathlib import Path

import pytest

__all__ = ["CHROMIUM", "CHROMIUM_ARGS", "require_chromium"]

CHROMIUM = Path("/usr/bin/chromium")
# Headless in a container, and nothing that would reach the network on its own.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]


def require_chromium() -> Path:
    """Return the browser's path; fail the calling test when it is not installed."""
    if not CHROMIUM.exists():
        pytest.fail(
            f"{CHROMIUM} missing: scripts/test apt-installs Debian's chromium", pytrace=False
        )
    return CHROMIUM
