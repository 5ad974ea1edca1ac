"""When a call's request left and its answer came back, as the HTTP client saw them.

A call's time at the provider is measured around one attempt (see
:meth:`flownb.providers.calls.CallRunner`), but on one event loop that time also holds the
moments the loop spent on other calls: building their requests before ours was written, reading
their answers before ours. Where the HTTP client can say when it wrote the request and when the
answer's head arrived (aiohttp's trace hooks, httpx's event hooks), those two moments bound the
time instead. The hooks write into the :class:`Wire` of the attempt running in their task (a
context variable), so one client shared by every call serves them all.
"""

from __future__ import annotations

import time
from contextvars import ContextVar
from typing import Any

__all__ = ["WIRE", "Wire", "aiohttp_trace", "httpx_hooks"]


class Wire:
    """One attempt's moments on the wire (``time.perf_counter()``): ``sent`` when its request
    was written (the first time), ``answered`` when its answer's head arrived (the last time);
    None when the client did not say."""

    __slots__ = ("answered", "sent")

    def __init__(self) -> None:
        self.sent: float | None = None
        self.answered: float | None = None

    def elapsed(self, began: float, ended: float, *, streamed: bool) -> float:
        """Return the seconds the provider took: from the request's writing (else ``began``) to
        the answer's head (else, or when the answer was streamed and its head came first,
        ``ended``)."""
        start = self.sent if self.sent is not None else began
        end = self.answered if self.answered is not None and not streamed else ended
        return max(end - start, 0.0)


WIRE: ContextVar[Wire | None] = ContextVar("flownb_wire", default=None)


def _sent() -> None:
    wire = WIRE.get()
    if wire is not None and wire.sent is None:
        wire.sent = time.perf_counter()


def _answered() -> None:
    wire = WIRE.get()
    if wire is not None:
        wire.answered = time.perf_counter()


async def _on_sent(*_: Any) -> None:
    _sent()


async def _on_answered(*_: Any) -> None:
    _answered()


def aiohttp_trace() -> Any:
    """Return an ``aiohttp.TraceConfig`` marking the request's headers sent and the answer's
    head received, for a ``ClientSession(trace_configs=[...])``."""
    import aiohttp

    trace = aiohttp.TraceConfig()
    trace.on_request_headers_sent.append(_on_sent)
    trace.on_request_end.append(_on_answered)
    return trace


def httpx_hooks() -> dict[str, list[Any]]:
    """Return httpx ``event_hooks`` for an async client: the ``request`` hook runs as the
    request is handed to the transport, the ``response`` hook once the answer's head is in."""
    return {"request": [_on_sent], "response": [_on_answered]}
