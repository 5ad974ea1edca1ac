"""The request loop the Anthropic and Gemini fakes share with the OpenAI one's behaviour:
latency, faults (429, 500, hang, drop) by share or marker, ``max_in_flight`` and
``rate_limit`` refusals, and the counters (requests, paths, headers, answered prompts, peak in
flight). Each vendor supplies how a prompt is read from a request, how an answer and an error
body look, and its routes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from aiohttp import web

from .fake_config import FakeConfig
from .fake_openai import add_control_routes, hang, send_counted, send_stream
from .fake_replies import scripted_answer
from .fake_state import _State

__all__ = ["Vendor", "control_routes", "handler", "serve_until_interrupted", "words"]


def words(text: str) -> int:
    """Return the fake's token count of ``text``: its whitespace-separated words."""
    return len(text.split())


class Vendor(Protocol):
    """What one vendor's fake answers with."""

    def prompt_of(self, request: web.Request, body: Mapping[str, Any]) -> str:
        """Return the prompt of a request body."""
        ...

    def answer(
        self, request: web.Request, body: Mapping[str, Any], prompt: str, config: FakeConfig
    ) -> dict[str, Any]:
        """Return the JSON body of a successful answer."""
        ...

    def error(
        self, status: int, message: str, kind: str, headers: Mapping[str, str] | None = None
    ) -> web.Response:
        """Return an error answer in the vendor's shape. ``kind`` is one of
        ``invalid_request``, ``rate_limit``, ``server_error``."""
        ...

    def check(self, request: web.Request | None, body: Mapping[str, Any]) -> str | None:
        """Return why a well-formed JSON body is an invalid request (the vendor's message),
        or None (``request``: None for a request inside a batch)."""
        ...

    def stream(
        self, request: web.Request, body: Mapping[str, Any], answer: Mapping[str, Any]
    ) -> list[tuple[str, bytes]] | None:
        """Return the server-sent events (``(word, bytes)``, see
        :func:`~flownb.testing.fake_openai.send_stream`) a streaming request gets for
        ``answer``, or None when the request did not ask for a stream."""
        ...

    def limit_headers(self, limits: Mapping[str, str]) -> dict[str, str]:
        """Return the vendor's rate-limit headers for the OpenAI-shaped ``limits`` of the
        fake's ``rate_limit`` window (empty: the vendor sends none)."""
        ...


def handler(
    state: _State, vendor: Vendor
) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """Return the aiohttp handler of the vendor's generation routes."""

    async def generate(request: web.Request) -> web.StreamResponse:
        token = state.enter()
        try:
            try:
                body = await request.json()
            except (json.JSONDecodeError, UnicodeDecodeError):
                return vendor.error(400, "the body is not JSON", "invalid_request")
            state.requests.append(body)
            state.paths.append(request.path)
            # Every record the OpenAI fake keeps, so ``received`` (which zips them) is whole.
            state.queries.append(dict(request.query))
            state.headers.append(dict(request.headers))
            why = (
                vendor.check(request, body)
                if isinstance(body, dict)
                else "the body is not an object"
            )
            if why is not None:
                return vendor.error(400, why, "invalid_request")
            prompt = vendor.prompt_of(request, body)
            config = state.config
            refused, limit_headers = _limited(state, vendor)
            if refused is not None:
                return refused
            fault = state.pick_fault(prompt)
            if config.latency:
                await asyncio.sleep(config.latency)
            faulted = await _fault(request, state, vendor, fault)
            if faulted is not None:
                return faulted
            answer = vendor.answer(request, body, prompt, config)
            headers = {"request-id": "req_fake_ok", "x-request-id": "req_fake_ok", **limit_headers}
            scripted = scripted_answer(prompt, config.answers)
            if scripted is not None and ("text" in scripted or "json" in scripted):
                # A scripted HTTP answer (a redirect, an error page), as the OpenAI fake sends.
                return _scripted(scripted, headers)
            events = vendor.stream(request, body, answer)
            if events is not None:
                streamed = await send_stream(request, state, events, headers, prompt)
                state.sent(prompt)
                return streamed
            response = web.json_response(answer, headers=headers)
            await send_counted(request, response, state, prompt)
            return response
        finally:
            state.leave(token)

    return generate


def _limited(state: _State, vendor: Vendor) -> tuple[web.Response | None, dict[str, str]]:
    """Return the 429 the fake's limits answer a request with (``None`` within them), and the
    rate-limit headers its answer carries."""
    config = state.config
    if config.max_in_flight is not None and state.in_flight > config.max_in_flight:
        state.limited += 1
        return vendor.error(429, "Too many requests in flight", "rate_limit"), {}
    if config.rate_limit is None:
        return None, {}
    within, limit_headers = state.take_quota()
    limit_headers = {**limit_headers, **vendor.limit_headers(limit_headers)}
    if within:
        return None, limit_headers
    state.limited += 1
    return vendor.error(429, "Rate limit reached", "rate_limit", limit_headers), limit_headers


async def _fault(
    request: web.Request, state: _State, vendor: Vendor, fault: str | None
) -> web.Response | None:
    """Return the answer an injected ``fault`` sends (a 429 or a 500), ``None`` to answer as
    usual (after a hang, which waits for the client to go).

    Raises:
        asyncio.CancelledError: a dropped connection (aborted here).
    """
    if fault is None:
        return None
    state.faults_sent[fault] += 1
    if fault == "429":
        retry_after = state.config.retry_after
        headers = {} if retry_after is None else {"Retry-After": retry_after}
        return vendor.error(429, "Rate limit reached", "rate_limit", headers)
    if fault == "500":
        return vendor.error(500, "Internal server error", "server_error")
    if fault == "hang":
        await hang(request)
    if fault == "drop":
        if request.transport is not None:
            request.transport.abort()
        raise asyncio.CancelledError
    return None


def _scripted(answer: Mapping[str, Any], headers: Mapping[str, str]) -> web.Response:
    """Return the HTTP answer a scripted ``answer`` with a ``text`` or ``json`` body describes
    (``status``, ``headers``, ``content_type``; see ``FakeConfig.answers``)."""
    status = int(answer.get("status", 200))
    headers = {**headers, **answer.get("headers", {})}
    if "json" in answer:
        return web.json_response(answer["json"], status=status, headers=headers)
    kind = answer.get("content_type") or "text/plain"
    return web.Response(text=str(answer["text"]), status=status, content_type=kind, headers=headers)


def control_routes(app: web.Application, state: _State, vendor: Vendor) -> None:
    """Add the control routes (``/_fake/stats``, ``/_fake/reset``, ``/_fake/config``), as the
    OpenAI fake has them, with the vendor's error body for a refused setting."""
    add_control_routes(app, state, lambda message: vendor.error(400, message, "invalid_request"))


def serve_until_interrupted(
    argv: list[str] | None,
    *,
    prog: str,
    port: int,
    name: str,
    make_app: Callable[[_State], web.Application],
) -> None:
    """Serve a vendor's fake from the command line (``--port``, ``--latency``) until
    interrupted; ``name`` is how its start line names it."""
    parser = argparse.ArgumentParser(prog=prog)
    parser.add_argument("--port", type=int, default=port)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds before each answer")
    args = parser.parse_args(argv)
    web.run_app(
        make_app(_State(FakeConfig(latency=args.latency))),
        host="127.0.0.1",
        port=args.port,
        access_log=None,
        print=lambda *_: print(f"fake {name} on http://127.0.0.1:{args.port}", flush=True),
    )
