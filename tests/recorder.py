"""A loopback HTTP server that records every request it gets (method, path, headers) and answers
each with the next of its scripted answers (the last one repeats): the "other host" of the
redirect and image-URL tests. It listens on 127.0.0.2 by default, another host than the fakes'
127.0.0.1 (both are loopback on Linux)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Self

from aiohttp import web


@dataclass
class Answer:
    """One scripted answer: status, headers, body bytes, and seconds to wait before it."""

    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b"{}"
    delay: float = 0.0


class Recorder:
    """The recording server in a daemon thread; ``url`` is its origin, ``received`` every
    request as ``{"method", "path", "headers"}``."""

    def __init__(self, *answers: Answer, host: str = "127.0.0.2") -> None:
        self.host = host
        self.port = 0
        self.answers = list(answers) or [Answer()]
        self.received: list[dict[str, Any]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The server's origin, ``http://host:port``."""
        return f"http://{self.host}:{self.port}"

    async def _handle(self, request: web.Request) -> web.Response:
        await request.read()
        self.received.append(
            {"method": request.method, "path": request.path, "headers": dict(request.headers)}
        )
        answer = self.answers[min(len(self.received), len(self.answers)) - 1]
        if answer.delay:
            await asyncio.sleep(answer.delay)
        return web.Response(status=answer.status, headers=dict(answer.headers), body=answer.body)

    def __enter__(self) -> Self:
        ready = threading.Event()
        loop = asyncio.new_event_loop()
        self._loop = loop

        async def serve() -> None:
            app = web.Application()
            app.router.add_route("*", "/{tail:.*}", self._handle)
            runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
            await runner.setup()
            site = web.TCPSite(runner, self.host, 0)
            await site.start()
            self.port = runner.addresses[0][1]
            self._runner = runner
            ready.set()

        def run() -> None:
            asyncio.set_event_loop(loop)
            loop.run_until_complete(serve())
            loop.run_forever()

        self._thread = threading.Thread(target=run, name="recorder", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("the recording server did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        loop, runner = self._loop, self._runner
        if loop is None or runner is None:
            return
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(10)
