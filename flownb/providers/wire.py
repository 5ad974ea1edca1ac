"""When a call's request left and its answer came back, as the HTTP client saw them.

A call's time at the provider is measured around one attempt (see
:meth:`flownb.providers.calls.CallRunner`), but on one event loop that time also holds the
moments the loop spent on other calls: building their requests before ours was written, reading
their answers before ours. Where the HTTP client can say when it wrote the request and when the
answer's head arrived, those two moments bound the time instead. They are marked with
:func:`mark_sent` and :func:`mark_answered`: httpx's event hooks and aiohttp's trace hooks
call them, and the OpenAI aiohttp transport calls them itself, as its connection is handed over
and as the answer's head is read (where the trace hooks fire, without the trace machinery's cost
on every request). The marks
go into the :class:`Wire` of the attempt running in their task (a context variable), so one
client shared by every call serves them all.
"""

from __future__ import annotations

import time
from contextvars import ContextVar
from typing import Any

__all__ = ["WIRE", "Wire", "aiohttp_trace", "httpx_hooks", "mark_answered", "mark_sent"]


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


def mark_sent() -> None:
    """Mark the running attempt's request written (kept only the first time: a retried
    connection or a follow-up download does not move it)."""
    wire = WIRE.get()
    if wire is not None and wire.sent is None:
        wire.sent = time.perf_counter()


def mark_answered() -> None:
    """Mark the running attempt's answer head received (the last time counts: an image's
    download after its generation is part of the call)."""
    wire = WIRE.get()
    if wire is not None:
        wire.answered = time.perf_counter()


async def _on_sent(*_: Any) -> None:
    mark_sent()


async def _on_answered(*_: Any) -> None:
    mark_answered()


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
