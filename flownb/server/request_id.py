"""Request ids: every request gets one (a caller's own ``x-request-id`` when it is short and
plain), echoed in the answer and in its log lines; the same middleware answers ``HEAD`` like
``GET`` and turns an exception that got this far into one logged ``500 internal_error``.
"""

from __future__ import annotations

import itertools
import secrets

from fastapi import Request
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .errors import (
    error_response,
    from_exception,
    log,
)

__all__ = ["REQUEST_ID", "RequestIdMiddleware", "new_request_id"]

REQUEST_ID = "flownb.request_id"
# Request ids: a random prefix per process and a counter, 16 hex digits as before. They name a
# request in the log; they need to be unique, not secret, so not 8 bytes of urandom each.
_PREFIX = secrets.token_hex(4)
_COUNTER = itertools.count(1)


def new_request_id() -> str:
    """Return a new request id: unique over a process's first four billion requests, and
    across its worker processes and restarts by its random prefix."""
    return f"{_PREFIX}{next(_COUNTER) & 0xFFFFFFFF:08x}"


_SAFE_REQUEST_ID = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")


class RequestIdMiddleware:
    """Gives every request an id (echoed as ``x-request-id``) and turns any exception that got
    this far into a ``500 internal_error`` body, logged on one line: no traceback leaks out.

    It also answers ``HEAD`` like ``GET`` without the body (status, headers and length alike),
    so every GET route answers HEAD (Starlette's routes would say 405); here rather than in a
    middleware of its own, to keep one layer per request.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = _incoming_request_id(scope) or new_request_id()
        head = scope["method"] == "HEAD"
        if head:
            scope = {**scope, "method": "GET", "flownb.head": True}
        scope[REQUEST_ID] = rid
        header = (b"x-request-id", rid.encode("ascii"))
        started = False

        async def send_with_id(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                message = {**message, "headers": [*message.get("headers", ()), header]}
            elif head and message["type"] == "http.response.body":
                if message.get("more_body", False):
                    return  # more of the body follows: send nothing until the end
                message = {"type": "http.response.body", "body": b"", "more_body": False}
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        except ClientDisconnect:
            # Not an error of ours: the client closed its connection before sending its whole
            # request (or while waiting); there is no one to answer.
            log.info("request %s: the client left before its request was read", rid)
        except Exception as exc:
            problem = from_exception(exc, rid)  # logs unexpected ones on one line
            if not started:
                await error_response(problem, rid)(scope, receive, send_with_id)


def _incoming_request_id(scope: Scope) -> str | None:
    """A caller's own ``x-request-id``, kept when it is short and plain (safe to log)."""
    for name, value in scope["headers"]:
        if name == b"x-request-id":
            text = value.decode("latin-1")
            if 0 < len(text) <= 64 and set(text) <= _SAFE_REQUEST_ID:
                return text
            return None
    return None


def _rid(request: Request) -> str:
    return request.scope.get(REQUEST_ID, "")
