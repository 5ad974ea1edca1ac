"""A credential goes only to the origin it was given for.

Every HTTP client that carries a vendor's key or an endpoint's headers (the aiohttp fast path,
the OpenAI, Anthropic and Gemini SDKs' clients, their batch clients) follows a redirect only
within the origin (scheme, host and port) the request went to. A redirect to any other origin
is refused with :class:`~flownb.errors.RedirectRefused`, naming both origins, before anything is
sent there: httpx and aiohttp strip only ``Authorization`` on such a hop, and would forward
Azure's ``api-key``, Anthropic's ``x-api-key``, Gemini's ``x-goog-api-key`` and custom headers.
Refusing (rather than following without them) keeps a moved API from silently answering
without the key: the user sets the endpoint's base URL to the new place, and gives it a key.

:func:`httpx_hooks`, :func:`aiohttp_trace` and :func:`aiohttp_middleware` are the clients' hooks
(the first two with request timing from :mod:`.wire`); :func:`refused_in` finds the refusal an
SDK wrapped in its own error.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable
from typing import Any

from ..config.origins import origin, shown
from ..errors import RedirectRefused
from .wire import aiohttp_trace as _timing_trace
from .wire import httpx_hooks as _timing_hooks

__all__ = [
    "REDIRECTS",
    "aiohttp_middleware",
    "aiohttp_trace",
    "check_redirect",
    "httpx_hooks",
    "origin",
    "refused_in",
    "shown",
    "sync_httpx_hooks",
]

# The statuses that carry a redirect (``Location``).
REDIRECTS = frozenset({301, 302, 303, 307, 308})


def check_redirect(from_url: str, to_url: str, status: int | None = None) -> None:
    """Return when a redirect from ``from_url`` to ``to_url`` (made absolute) stays in its
    origin.

    Raises:
        RedirectRefused: ``to_url`` is on another origin (the message names both).
    """
    if origin(from_url) == origin(to_url):
        return
    old, new = shown(from_url), shown(to_url)
    raise RedirectRefused(
        f"{old} redirected the request to {new}; flownb sends a key or an endpoint's headers "
        f"only to the origin they were given for, so it did not follow (if the API has moved, "
        f"set the endpoint's base_url to {new} and give it a key there)",
        status=status,
    )


def _httpx_check(response: Any) -> None:
    if response.status_code in REDIRECTS and "location" in response.headers:
        request_url = str(response.request.url)
        target = urllib.parse.urljoin(request_url, response.headers["location"])
        check_redirect(request_url, target, response.status_code)


async def _on_response(response: Any) -> None:
    _httpx_check(response)


def httpx_hooks() -> dict[str, list[Any]]:
    """Return ``event_hooks`` for an httpx ``AsyncClient``: the request's timing (see
    :func:`flownb.providers.wire.httpx_hooks`), and a response hook refusing a redirect to
    another origin (httpx calls it before following)."""
    hooks = _timing_hooks()
    return {"request": hooks["request"], "response": [*hooks["response"], _on_response]}


def sync_httpx_hooks() -> dict[str, list[Callable[[Any], None]]]:
    """Return ``event_hooks`` for a synchronous httpx ``Client`` (the batch APIs' clients)
    refusing a redirect to another origin."""
    return {"response": [_httpx_check]}


async def _on_redirect(_session: Any, _context: Any, params: Any) -> None:
    response = params.response
    location = response.headers.get("Location") or response.headers.get("URI")
    if location:
        request_url = str(params.url)
        check_redirect(request_url, urllib.parse.urljoin(request_url, location), response.status)


def aiohttp_trace(*, timing: bool = True) -> Any:
    """Return an ``aiohttp.TraceConfig`` refusing a redirect to another origin (aiohttp calls
    it before following), with the request's timing (:func:`flownb.providers.wire.aiohttp_trace`)
    unless ``timing=False``."""
    import aiohttp

    trace = _timing_trace() if timing else aiohttp.TraceConfig()
    trace.on_request_redirect.append(_on_redirect)
    return trace


async def aiohttp_middleware(req: Any, handler: Any) -> Any:
    """An aiohttp client middleware (``ClientSession(middlewares=[...])``) refusing a redirect
    to another origin, as :func:`aiohttp_trace` does: aiohttp runs it around every hop, before
    following one. Cheaper per request than a trace config, which sends every trace signal.

    Raises:
        RedirectRefused: the answer redirects to another origin (the answer is closed).
    """
    response = await handler(req)
    if response.status in REDIRECTS:
        location = response.headers.get("Location") or response.headers.get("URI")
        if location:
            request_url = str(req.url)
            try:
                check_redirect(
                    request_url, urllib.parse.urljoin(request_url, location), response.status
                )
            except RedirectRefused:
                response.close()
                raise
    return response


def refused_in(exc: BaseException) -> RedirectRefused | None:
    """Return the :class:`RedirectRefused` that ``exc`` was raised from (an SDK wraps what its
    HTTP client raised in a connection error of its own), or None."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, RedirectRefused):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None
