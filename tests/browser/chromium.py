"""The browser every real-browser test drives: Debian's chromium through Playwright, started
once per pytest process (``chromium`` in tests/conftest.py) and reached by each test over the
DevTools protocol, in a browser context of its own (cookies, storage and cache its own) or in
the JupyterLab tab the tests share (tests/browser/notebook.py).

One Playwright session (its driver, a node process, connected to the browser) serves all the
tests of a process (:class:`Driver`): a session per test cost about 0.6 CPU-s to start, and the
shared JupyterLab tab lives in the session that opened it. A session marks its event loop as
the main thread's running loop (``asyncio.run`` then refuses to start), so the loop is marked
only while a test uses the browser (:meth:`Driver.connected`), and the session is ended once
the process has no more browser tests to run (tests/conftest.py).

A missing browser is handled one way everywhere: the ``chromium`` fixture (tests/conftest.py)
fails the test with one line saying how to install it. Never a skip: CI must not pass without
the browser tests having run (``scripts/test`` apt-installs chromium).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
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
    "Driver",
    "browser_context",
    "require_chromium",
    "running_chromium",
    "stop_drivers",
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


# Every Driver made in this process, so the suite can end their sessions once no test needs
# the browser any more (stop_drivers).
_DRIVERS: list[Driver] = []


class Driver:
    """One Playwright session connected to the chromium at ``endpoint`` over DevTools, started
    by the first test that uses it and kept for the next ones; ``kept`` holds what those tests
    share on it (the JupyterLab tab, by server), emptied whenever a new session starts."""

    def __init__(self, endpoint: str, scratch: Path) -> None:
        self._endpoint = endpoint
        self._scratch = scratch
        self._playwright: playwright_sync.Playwright | None = None
        self._browser: playwright_sync.Browser | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._depth = 0
        self.kept: dict[str, Any] = {}
        _DRIVERS.append(self)

    @contextmanager
    def connected(self) -> Iterator[playwright_sync.Browser]:
        """Yield the browser, connected (a new session if there is none or it was lost); the
        session's loop is marked as running only inside (see the module's docstring)."""
        outermost = self._depth == 0
        if outermost and self._loop is not None and not self._loop.is_closed():
            asyncio._set_running_loop(self._loop)
        self._depth += 1
        # The session's file writes (screenshots) run on threads of the loop's executor: one
        # of the test's own, its threads ended with the test (they are not daemons).
        executor = ThreadPoolExecutor(thread_name_prefix="playwright-files") if outermost else None
        try:
            if self._browser is None or not self._browser.is_connected():
                self._start()
            assert self._browser is not None and self._loop is not None
            if executor is not None:
                self._loop.set_default_executor(executor)
            yield self._browser
        finally:
            self._depth -= 1
            if executor is not None:
                asyncio._set_running_loop(None)
                executor.shutdown(wait=True)

    def _start(self) -> None:
        self.stop()
        asyncio._set_running_loop(None)  # a lost session's loop: sync_playwright refuses it
        # The driver first compiles about 7 MB of JavaScript: with node's compile cache (read
        # from the environment the driver starts in, set only for that) a later session (a new
        # pytest process, or after a lost one) reuses the compiled code (0.8 -> 0.6 CPU-s).
        cache = {"NODE_COMPILE_CACHE": str(self._scratch / "node-compile-cache")}
        with mock.patch.dict(os.environ, cache):
            self._playwright = playwright_sync.sync_playwright().start()
        self._loop = asyncio._get_running_loop()  # the session's, marked running by start()
        self._browser = self._playwright.chromium.connect_over_cdp(self._endpoint)

    def stop(self) -> None:
        """End the session (the contexts it made close with it), if there is one; the browser
        keeps running."""
        playwright, self._playwright = self._playwright, None
        browser, self._browser = self._browser, None
        self.kept.clear()
        if playwright is None:
            return
        if self._loop is not None and not self._loop.is_closed():
            asyncio._set_running_loop(self._loop)
        try:
            if browser is not None:
                with contextlib.suppress(playwright_sync.Error):
                    browser.close()  # closes the contexts this session made, and disconnects
        finally:
            playwright.stop()
            self._loop = None
            if self._depth == 0:
                asyncio._set_running_loop(None)


def stop_drivers() -> None:
    """End every Playwright session of this process (see :class:`Driver`)."""
    for driver in _DRIVERS:
        driver.stop()


@dataclass(frozen=True)
class Chromium:
    """A running headless chromium: ``endpoint`` is its DevTools address; ``scratch`` the folder
    it was started with (its profile, its log, and node's compile cache for the Playwright
    driver); ``driver`` the Playwright session the tests reach it through."""

    endpoint: str
    process: subprocess.Popen[bytes]
    scratch: Path
    driver: Driver


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
        endpoint = f"http://127.0.0.1:{port}"
        driver = Driver(endpoint, scratch)
        try:
            yield Chromium(endpoint, process, scratch, driver)
        finally:
            driver.stop()
            _DRIVERS.remove(driver)
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
    running ``chromium``, through its shared Playwright session; the context is closed on exit,
    the browser and the session left running."""
    with chromium.driver.connected() as browser:
        context = browser.new_context(**options)
        try:
            yield context
        finally:
            with contextlib.suppress(playwright_sync.Error):  # the session was lost meanwhile
                context.close()
