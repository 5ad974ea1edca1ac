"""A loopback HTTP server in a daemon thread with its own event loop: what the vendor fakes and a
test's own scripted servers share (start once the port is bound, stop dropping what still
hangs), so a test process can serve and call in the same process without blocking itself.

In a test::

    def make_app() -> web.Application:
        app = web.Application()
        app.router.add_get("/", hello)
        return app

    with LoopbackServer(make_app) as server:
        ...  # call server.url
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Self

from aiohttp import web

__all__ = ["LoopbackServer"]


class LoopbackServer:
    """Serves the aiohttp application ``make_app()`` builds on ``host``:``port`` (``0``: a free
    port, read from :attr:`port` once started), in a daemon thread named ``name`` with an event
    loop of its own. Use as a context manager, or call :meth:`start` / :meth:`stop`."""

    def __init__(
        self,
        make_app: Callable[[], web.Application],
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        name: str = "loopback-server",
    ) -> None:
        self.make_app = make_app
        self.host = host
        self.port = port
        self.name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The server's origin, ``http://host:port``."""
        return f"http://{self.host}:{self.port}"

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The event loop serving the application while it runs, else None."""
        return self._loop

    def start(self, timeout: float = 10.0) -> Self:
        """Start serving; returns self once the port is bound.

        Raises:
            RuntimeError: the server did not start within ``timeout`` seconds (the reason, such
                as a port in use, is raised from it when known).
        """
        ready = threading.Event()
        failed: list[BaseException] = []
        loop = asyncio.new_event_loop()

        async def serve() -> None:
            # A short shutdown grace: a request a test left hanging is dropped at stop().
            runner = web.AppRunner(self.make_app(), access_log=None, shutdown_timeout=0.1)
            await runner.setup()
            site = web.TCPSite(runner, self.host, self.port)
            await site.start()
            self.port = runner.addresses[0][1]
            self._runner = runner

        def run() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(serve())
            except BaseException as exc:  # handed to start(), which raises it
                failed.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            try:
                loop.run_forever()
            finally:
                # Closed here, once stopped: a loop left open is reported unclosed
                # (ResourceWarning) whenever it is collected, in whatever code runs then.
                loop.close()

        self._thread = threading.Thread(target=run, name=self.name, daemon=True)
        self._thread.start()
        if not ready.wait(timeout) or failed:
            self._thread = None
            cause = failed[0] if failed else None
            raise RuntimeError(f"the {self.name} server did not start") from cause
        self._loop = loop
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop serving (requests still hanging are dropped); a server not started is left
        alone."""
        loop, runner = self._loop, self._runner
        if loop is None or runner is None:
            return
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(timeout)
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(timeout)
        self._loop = self._runner = self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
