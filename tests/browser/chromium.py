"""The browser every real-browser test drives: Debian's chromium through Playwright, started
once per pytest process (``chromium`` in tests/conftest.py) and reached by each test over the
DevTools protocol, in a browser context of its own (cookies, storage and cache its own).

A Playwright session kept open across tests would leave its event loop set as the main thread's
running loop (``asyncio.run`` then refuses to start), so each test opens its own short session
and connects to the running browser (about 0.6 CPU-s, against 4.6 for a browser of its own).

A missing browser is handled one way everywhere: the ``chromium`` fixture (tests/conftest.py)
fails the test with one line saying how to install it. Never a skip: CI must not pass without
the browser tests having run (``scripts/test`` apt-installs chromium).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import playwright.sync_api as playwright_sync
import pytest

__all__ = [
    "CHROMIUM",
    "CHROMIUM_ARGS",
    "Chromium",
    "browser_context",
    "require_chromium",
    "running_chromium",
]

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
    # Chromium 15x renders the address bar's suggestion popups (chrome://omnibox-popup) ahead
    # of use, a renderer of their own for every window: every test's browser context paid for
    # two that no test shows (measured: about 1.2 of the 5 CPU-s a JupyterLab page load costs).
    "--disable-features=WebUIOmniboxPopup,WebUIOmniboxAimPopup",
]


def require_chromium() -> Path:
    """Return the browser's path; fail the calling test when it is not installed."""
    if not CHROMIUM.exists():
        pytest.fail(
            f"{CHROMIUM} missing: scripts/test apt-installs Debian's chromium", pytrace=False
        )
    return CHROMIUM


@dataclass(frozen=True)
class Chromium:
    """A running headless chromium: ``endpoint`` is its DevTools address; ``scratch`` the folder
    it was started with (its profile, its log, and node's compile cache for the Playwright
    drivers that reach it: :func:`browser_context`)."""

    endpoint: str
    process: subprocess.Popen[bytes]
    scratch: Path


@contextmanager
def running_chromium(path: Path, scratch: Path, timeout: float = 60) -> Iterator[Chromium]:
    """Start the chromium at ``path`` headless, its profile under ``scratch``, listening for
    DevTools on a loopback port it picks itself (no port race); stop it, and every process it
    started, on exit.

    Raises:
        RuntimeError: it exited before listening.
        TimeoutError: it did not listen within ``timeout`` seconds.
    """
    profile = scratch / "profile"
    profile.mkdir(parents=True, exist_ok=True)
    with (scratch / "chromium.log").open("wb") as log:
        process = subprocess.Popen(
            [str(path), "--headless", f"--user-data-dir={profile}", "--remote-debugging-port=0",
             "--remote-debugging-address=127.0.0.1", *CHROMIUM_ARGS, "about:blank"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: its renderers end with it
        )  # fmt: skip
    try:
        # Chromium writes the port it listens on to this file once it listens.
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + timeout
        while not (port_file.exists() and port_file.read_text().strip()):
            if process.poll() is not None:
                raise RuntimeError(f"chromium exited early ({process.returncode})")
            if time.monotonic() > deadline:
                raise TimeoutError(f"chromium did not listen within {timeout:.0f}s")
            time.sleep(0.05)
        port = int(port_file.read_text().split()[0])
        yield Chromium(f"http://127.0.0.1:{port}", process, scratch)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


@contextmanager
def browser_context(chromium: Chromium, **options: Any) -> Iterator[playwright_sync.BrowserContext]:
    """Yield a new browser context (``options``: Playwright's ``new_context`` keywords) of the
    running ``chromium``, in a Playwright session of its own; the context is closed and the
    session ended on exit, the browser left running."""
    with contextlib.ExitStack() as session:
        # Each session starts Playwright's driver, a node process that first compiles about
        # 7 MB of JavaScript: with node's compile cache (read from the environment the driver
        # starts in, set only for that) the sessions after the first reuse the compiled code
        # (measured: 0.8 -> 0.6 CPU-s a start).
        cache = {"NODE_COMPILE_CACHE": str(chromium.scratch / "node-compile-cache")}
        with mock.patch.dict(os.environ, cache):
            pw = session.enter_context(playwright_sync.sync_playwright())
        browser = pw.chromium.connect_over_cdp(chromium.endpoint)
        try:
            yield browser.new_context(**options)
        finally:
            browser.close()  # closes the contexts this connection made, and disconnects
