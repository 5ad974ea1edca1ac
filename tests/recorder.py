"""A loopback HTTP server that records every request it gets (method, path, headers) and answers
each with the next of its scripted answers (the last one repeats): the "other host" of the
redirect and image-URL tests. It listens on 127.0.0.2 by default, another host than the fakes'
127.0.0.1 (both are loopback on Linux)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Self

from aiohttp import web

from flownb.testing.loopback import LoopbackServer


@dataclass
class Answer:
    """One scripted answer: status, headers, body bytes, and seconds to wait before it."""

    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b"{}"
    delay: float = 0.0


class Recorder:
    """The recording server (a :class:`~flownb.testing.loopback.LoopbackServer`); ``url`` is its
    origin, ``received`` every request as ``{"method", "path", "headers"}``."""

    def __init__(self, *answers: Answer, host: str = "127.0.0.2") -> None:
        self.answers = list(answers) or [Answer()]
        self.received: list[dict[str, Any]] = []
        self._server = LoopbackServer(self._make_app, host=host, name="recorder")

    @property
    def host(self) -> str:
        """The address the server listens on."""
        return self._server.host

    @property
    def port(self) -> int:
        """The port it listens on (once started)."""
        return self._server.port

    @property
    def url(self) -> str:
        """The server's origin, ``http://host:port``."""
        return self._server.url

    def _make_app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        return app

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
        self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.stop()
