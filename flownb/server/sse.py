"""The run route's streaming extension: ``POST /api/flows/run/{id}`` with
``Accept: text/event-stream`` answers a one-element run as server-sent events while it runs.

Beyond the contract (which is unchanged without that header). The events, each ``data`` one
line of JSON:

- ``text``: ``{"node", "outputs", "delta"}``: new text of a generation node, as its provider
  streams it (``outputs``: the outputs the node feeds);
- ``image``: ``{"node", "outputs", "url"}``: an image, once it is ready;
- ``restart``: ``{"node", "outputs"}``: the node's text so far is void (a retried attempt);
- ``result``: the contract's run response, exactly the JSON body the same request without the
  header gets (the items of an object body; ``[items]`` for an array of one);
- ``error``: the contract's error body, plus its HTTP ``status``, when the run failed (partial
  outputs kept as in the JSON answer).

Exactly one of ``result`` and ``error`` ends the stream. What is refused before the run starts
(authentication, an unknown flow, invalid variables, a prompt over the limit, an API key whose
spend cap is used up) is answered as without the header: a JSON error with its status. A capped
key's stream runs within its cap as its JSON runs do (each provider attempt inside the cap's
gate): a call that could pass the cap is not sent, and the stream ends with an ``error`` event of
status 402, ``spend_cap_reached``, saying what is left. A batch of several elements cannot stream:
it is answered as JSON when the ``Accept`` header also takes ``application/json`` (or
``*/*``), else ``406 not_acceptable``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Coroutine, Mapping, Sequence
from typing import Any

import orjson
from starlette.responses import StreamingResponse

from ..infra.aio import stream_async
from ..providers.calls import Gate
from ..runtime.events import StreamEvent
from ..runtime.pipeline import Runner
from ..runtime.result import RunResult
from .errors import ApiProblem, batch_problem, error_body

__all__ = ["EVENT_STREAM", "accepts", "event_stream", "streamed_run"]

EVENT_STREAM = "text/event-stream"


def accepts(accept: str | None, media_type: str, *, exact: bool = False) -> bool:
    """Return whether an ``Accept`` header names ``media_type`` (or, unless ``exact``, its
    ``type/*`` or ``*/*``) with a non-zero quality."""
    if not accept:
        return False
    kind = media_type.split("/", 1)[0]
    names = (media_type,) if exact else (media_type, f"{kind}/*", "*/*")
    for part in accept.split(","):
        name, *params = (p.strip().lower() for p in part.split(";"))
        if name not in names:
            continue
        q = next((p[2:] for p in params if p.startswith("q=")), "1")
        try:
            if float(q) > 0:
                return True
        except ValueError:
            return True
    return False


def streamed_run(
    accept: str | None,
    runner: Runner,
    batch: Sequence[Mapping[str, str]],
    *,
    single: bool,
    request_id: str,
    partial_items: Callable[[BaseException], Any],
    gate: Gate | None = None,
) -> StreamingResponse | None:
    """Return the streaming answer when ``accept`` names ``text/event-stream`` and ``batch``
    (validated) has one element; None when the usual JSON answer is wanted (no such header, or
    a batch whose ``Accept`` also takes JSON). ``gate`` is entered around each provider attempt
    (an API key's spend cap).

    Raises:
        ApiProblem: 406 ``not_acceptable``: a batch of several asked only for a stream.
    """
    # Asked for by name, never by */*: the check is cheap for every other request. Media
    # types are case-insensitive (RFC 9110), so TEXT/EVENT-STREAM streams too.
    if (
        not accept
        or EVENT_STREAM not in accept.lower()
        or not accepts(accept, EVENT_STREAM, exact=True)
    ):
        return None
    if len(batch) == 1:
        return event_stream(
            runner,
            batch[0],
            request_id=request_id,
            single=single,
            partial_items=partial_items,
            gate=gate,
        )
    if accepts(accept, "application/json"):
        return None
    raise ApiProblem(
        406,
        "not_acceptable",
        "only a run of one element streams (Accept: text/event-stream); send a batch with "
        "Accept: application/json",
    )


def _event(name: str, data: Any) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


def _encoded(event: StreamEvent) -> bytes:
    data: dict[str, Any] = {"node": event.node, "outputs": list(event.outputs)}
    if event.kind == "text":
        data["delta"] = event.delta
    elif event.kind == "image":
        data["url"] = event.url
    return _event(event.kind, data)


def event_stream(
    runner: Runner,
    values: Mapping[str, str],
    *,
    request_id: str,
    single: bool,
    partial_items: Callable[[BaseException], Any],
    gate: Gate | None = None,
) -> StreamingResponse:
    """Return the streaming answer for one validated run (``single``: the body was an object,
    else an array of one), each provider attempt inside ``gate`` (an API key's spend cap).
    ``partial_items`` gives the items a failed run kept. A client that
    goes away stops the run: its call in flight ends without the client (it is paid for), into
    the cache and the run log."""

    def start(emit: Callable[[StreamEvent], None]) -> Coroutine[Any, Any, RunResult]:
        return runner.stream_one(values, emit, gate=gate)

    async def events() -> AsyncIterator[bytes]:
        try:
            async for item in stream_async(start):
                if isinstance(item, StreamEvent):
                    yield _encoded(item)
                else:
                    items = item.to_items()
                    yield _event("result", items if single else [items])
        except Exception as exc:  # the run failed: its error body ends the stream
            problem = batch_problem({0: exc}, [partial_items(exc)], request_id, indexed=not single)
            yield _event("error", {"status": problem.status, **error_body(problem, request_id)})

    return StreamingResponse(
        events(),
        media_type=EVENT_STREAM,
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
