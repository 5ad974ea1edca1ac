"""A loopback OpenAI-compatible server for tests, benches and notebooks (no key, no internet).

It answers ``POST /v1/chat/completions``, ``/v1/completions`` and ``/v1/images/generations``
(and Azure OpenAI's ``/openai/deployments/{deployment}/...`` forms of each) deterministically
from the request (text ``"echo: <prompt>"`` with every field OpenAI sends, images as a URL it
serves itself under ``/_fake/images/`` or a small PNG in ``b64_json``, which GPT image models
always answer), after a configurable latency,
and answers flownb's judge prompts as a judge would (see "Judging" below),
and can misbehave on purpose: 429 with a ``Retry-After``, 500, hangs and dropped connections,
each for a share of requests (seeded, so a run is reproducible) or for every prompt containing a
given marker, after the latency or at once (``faults_first``); and it answers whatever a test
scripts for a marker (``answers``: refusals, content parts, HTML error pages, ...). It records
every request (:attr:`FakeOpenAI.received`: path, query, headers, body), the prompt of every
request it answered with a 200 (once the answer is written), per connection the 200 answer the
client may not have read yet (:attr:`FakeOpenAI.last_answer_on`), and the peak number of requests
in flight. ``usage_details`` adds usage sections to every text answer (e.g.
``{"prompt_tokens_details": {"cached_tokens": 3}}``) and images answers report usage too;
``cached_tokens=N`` reports N of every text answer's prompt tokens as cache reads, as each
vendor's fake does in its own usage fields (``cache_write_tokens`` too, for Anthropic's).

It can also enforce a real rate limit, as a provider does: ``max_in_flight=N`` answers 429 at once
to any request beyond N being served; ``rate_limit=N`` (with ``rate_window`` seconds, 60 by
default: requests per minute) answers 429 once N requests arrived in the current window, and
sends OpenAI's rate-limit headers (``x-ratelimit-limit-requests``,
``x-ratelimit-remaining-requests``, ``x-ratelimit-reset-requests`` in OpenAI's duration format
such as ``"1s"`` or ``"6m0s"``, and on a 429 ``Retry-After`` in seconds) on every answer.

In a test::

    with FakeOpenAI(latency=0.01, faults={"429": 0.1}) as fake:
        ...  # point OPENAI_BASE_URL at fake.url
        assert fake.peak_in_flight <= 8

From a shell (another process, so the server does not share the client's GIL)::

    python -m flownb.testing.fake_openai --port 8123 --latency 0.05

Judging: a prompt built by ``flownb.scorers.judge`` gets a valid verdict,
``{"score": S, "reason": "..."}``, where ``S`` is :func:`judge_score` of the graded text (the
first two bytes of its SHA-256 over 65535, to two decimals): the same text always gets the same
score, different texts spread over 0..1. An image a chat request shows (an ``image_url`` part,
as a judge of an image output sends) reads as :func:`seen_image` of its bytes, so an image
gets the score of that text. A ``pick_best`` prompt gets ``{"best": K, ...}``, the
candidate with the highest such score (the first on ties). The grades mean nothing about quality;
they make evaluations against the fake show real, reproducible numbers. Scripted ``replies``
(below) take precedence.

Streaming: a chat request with ``stream: true`` is answered as OpenAI streams, server-sent
``chat.completion.chunk`` events (one per word of the answer, ``stream_delay`` seconds apart),
the finish reason, the usage chunk when ``stream_options.include_usage`` asks for it, then
``data: [DONE]``. The send time of every word is recorded (:attr:`FakeOpenAI.streams`, on
``time.perf_counter``'s clock), so a test can compare when its client saw text with when the
fake sent it; ``stream_cut`` drops the connection part-way through a stream (once per prompt),
as a broken link does. The Anthropic and Gemini fakes stream the same way in their own formats.

Refusals: every request is checked as OpenAI checks it (the ``openai`` SDK's request types,
strictly, and the model rules; see :mod:`flownb.testing.fake_checks`), and a wrong one is
answered 400 with OpenAI's error body (``message``, ``type``, ``param``, ``code``). A 429 says
``Retry-After`` in whole seconds (``retry_after``, ``"1"`` by default; ``"0"`` for a test that
needs speed).

Control routes (for a server in another process): ``GET /_fake/stats`` returns the counters,
``POST /_fake/reset`` clears them, ``POST /_fake/config`` changes latency/faults/markers.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Callable, Mapping
from typing import Any, NoReturn, Self

from aiohttp import web

from .fake_batches import BatchBackend
from .fake_checks import openai_refusal, warm
from .fake_config import FakeConfig
from .fake_message_batches import MessageBatches
from .fake_replies import (
    _answer,
    _prompt_of,
    cache_split,
    data_url_bytes,
    echo,
    image_bytes,
    judge_reply,
    judge_score,
    scripted_answer,
    scripted_reply,
    seen_image,
    split_words,
)
from .fake_state import _State
from .loopback import LoopbackServer

__all__ = [
    "FakeConfig",
    "FakeOpenAI",
    "add_control_routes",
    "cache_split",
    "data_url_bytes",
    "echo",
    "hang",
    "image_bytes",
    "judge_reply",
    "judge_score",
    "main",
    "scripted_answer",
    "scripted_reply",
    "seen_image",
    "send_counted",
    "send_stream",
    "split_words",
    "sse_event",
]


def _error(
    status: int,
    message: str,
    kind: str,
    headers: Mapping[str, str] | None = None,
    *,
    param: str | None = None,
    code: str | None = "",
) -> web.Response:
    # OpenAI's shape; ``code`` is the kind unless said (a refused request's code may be null).
    said = kind if code == "" else code
    body = {"error": {"message": message, "type": kind, "param": param, "code": said}}
    return web.json_response(body, status=status, headers=dict(headers or {}))


def _scripted_response(
    answer: Mapping[str, Any], usual: dict[str, Any], headers: Mapping[str, str]
) -> web.Response:
    """Return the HTTP answer a scripted ``answer`` describes (``usual``: the normal body)."""
    status = int(answer.get("status", 200))
    headers = {**headers, **answer.get("headers", {})}
    if "text" in answer:
        text = str(answer["text"])
        kind = answer.get("content_type") or ("text/html" if text.startswith("<") else "text/plain")
        return web.Response(text=text, status=status, content_type=kind, headers=headers)
    if "json" in answer:
        return web.json_response(answer["json"], status=status, headers=headers)
    body = dict(usual)
    for key in ("choices", "data"):
        if key in answer:
            body[key] = answer[key]
    if "choices" in body and ("message" in answer or "finish_reason" in answer):
        first = dict(body["choices"][0])
        if "message" in answer:
            first["message"] = answer["message"]
        if "finish_reason" in answer:
            first["finish_reason"] = answer["finish_reason"]
        body["choices"] = [first, *body["choices"][1:]]
    return web.json_response(body, status=status, headers=headers)


def sse_event(data: Any, event: str | None = None) -> bytes:
    """Return one server-sent event: ``data`` as JSON (a ``str`` as it is), and its name."""
    text = data if isinstance(data, str) else json.dumps(data)
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {text}\n\n".encode()


async def send_stream(
    request: web.Request,
    state: _State,
    events: list[tuple[str, bytes]],
    headers: Mapping[str, str],
    prompt: str = "",
) -> web.StreamResponse:
    """Send ``events`` (``(word, bytes)``: the word an event carries, ``""`` for none) as an
    event stream, ``stream_delay`` seconds between two words, recording each word's send time;
    cut off after as many words as ``stream_cut`` says for ``prompt`` (once per prompt).

    Raises:
        asyncio.CancelledError: the client went away part-way, or the stream was cut.
    """
    cut = None
    for marker, words in state.config.stream_cut.items():
        if marker and marker in prompt and prompt not in state.cut_prompts:
            state.cut_prompts.add(prompt)
            cut = words
            break
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache", **headers}
    )
    sent: list[tuple[float, str]] = []
    state.streams.append(sent)
    delay = state.config.stream_delay
    try:
        await response.prepare(request)
        for word, payload in events:
            if word and sent and delay:
                await asyncio.sleep(delay)
            if word and cut is not None and len(sent) >= cut:
                if request.transport is not None:
                    request.transport.abort()  # dropped mid-answer, as a broken link does
                raise asyncio.CancelledError
            at = time.perf_counter()  # taken before the write: the client may read it first
            await response.write(payload)
            if word:
                sent.append((at, word))
        await response.write_eof()
    except ConnectionError:  # the client is gone: the rest was never sent
        raise asyncio.CancelledError from None
    return response


def _chat_stream(usual: Mapping[str, Any], usage: bool) -> list[tuple[str, bytes]]:
    """Return the events OpenAI streams for the chat answer ``usual`` (choice 0)."""
    base = {
        "id": usual["id"],
        "object": "chat.completion.chunk",
        "created": usual["created"],
        "model": usual["model"],
        "service_tier": usual.get("service_tier"),
        "system_fingerprint": usual.get("system_fingerprint"),
    }
    if usage:
        base["usage"] = None  # as OpenAI sends it on every chunk but the last

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return sse_event({**base, "choices": [choice]})

    first = usual["choices"][0]
    content = first["message"].get("content") or ""
    events = [("", chunk({"role": "assistant", "content": "", "refusal": None}))]
    events += [(word, chunk({"content": word})) for word in split_words(str(content))]
    events.append(("", chunk({}, first["finish_reason"])))
    if usage:
        events.append(("", sse_event({**base, "choices": [], "usage": usual["usage"]})))
    events.append(("", b"data: [DONE]\n\n"))
    return events


def _retry_after(headers: dict[str, str], config: FakeConfig) -> dict[str, str]:
    """Return ``headers`` with the configured ``Retry-After`` (none when it is ``None``)."""
    if config.retry_after is not None:
        headers["Retry-After"] = config.retry_after
    return headers


def _refusal(state: _State, config: FakeConfig) -> tuple[web.Response | None, dict[str, str]]:
    """Return the 429 a request is refused with at once (beyond ``max_in_flight``, over the
    ``rate_limit`` window, or an ``instant_429``), else ``None``; and the rate-limit headers
    every answer carries under ``rate_limit``."""
    limit_headers: dict[str, str] = {}
    if config.max_in_flight is not None and state.in_flight > config.max_in_flight:
        state.limited += 1  # refused at once, as a provider's concurrency limit does
        return _error(
            429,
            "Too many requests in flight",
            "rate_limit_exceeded",
            _retry_after({"x-request-id": "req_fake_limit"}, config),
        ), limit_headers
    if config.rate_limit is not None:
        within, limit_headers = state.take_quota()
        if not within:
            state.limited += 1
            return _error(
                429,
                "Rate limit reached for requests",
                "rate_limit_exceeded",
                {"x-request-id": "req_fake_limit", **limit_headers},
            ), limit_headers
    if config.instant_429 and state.rng.random() < config.instant_429:
        state.faults_sent["429"] += 1
        return _error(
            429,
            "Rate limit reached for requests",
            "rate_limit_exceeded",
            _retry_after({"x-request-id": "req_fake_429"}, config),
        ), limit_headers
    return None, limit_headers


async def hang(request: web.Request) -> NoReturn:
    """Answer nothing until the client gives up (an hour at most); then this request is no
    longer in flight.

    Raises:
        asyncio.CancelledError: always, once the client has left.
    """
    for _ in range(36000):
        if request.transport is None or request.transport.is_closing():
            break
        await asyncio.sleep(0.1)
    raise asyncio.CancelledError


async def _misbehave(fault: str, request: web.Request, config: FakeConfig) -> web.Response:
    """Return the answer of an injected ``fault`` ("429", "500"), or hang / drop the connection.

    Raises:
        asyncio.CancelledError: a hang the client gave up on, or a dropped connection.
    """
    if fault == "429":
        headers = {"x-request-id": "req_fake_429"}
        if config.retry_after is not None:
            headers["Retry-After"] = config.retry_after
        return _error(429, "Rate limit reached for requests", "rate_limit_exceeded", headers)
    if fault == "500":
        return _error(
            500,
            "The server had an error while processing your request.",
            "server_error",
            {"x-request-id": "req_fake_500"},
        )
    if fault == "hang":
        await hang(request)
    if request.transport is not None:  # "drop"
        request.transport.abort()
    raise asyncio.CancelledError


def _client_port(request: web.Request) -> int:
    """Return the client's port of ``request``'s connection (0 when it cannot be told)."""
    peer = request.transport.get_extra_info("peername") if request.transport else None
    return peer[1] if peer else 0


async def send_counted(
    request: web.Request,
    response: web.StreamResponse,
    state: _State,
    prompt: str,
    port: int | None = None,
) -> None:
    """Send ``response`` whole, then count it as answered (a 200: a scripted error answer is
    not an answer; see ``_State.sent``, which ``port`` is handed to).

    Raises:
        asyncio.CancelledError: the client is gone (killed): this answer was never sent.
    """
    # Counted once handed to the connection, not before: "answered" means sent.
    try:
        await response.prepare(request)
        await response.write_eof()
    except ConnectionError:
        raise asyncio.CancelledError from None
    if response.status < 400:
        state.sent(prompt, port)


def make_app(state: _State) -> web.Application:
    """Return the aiohttp application serving the fake API over ``state``."""

    async def generate(request: web.Request) -> web.StreamResponse:
        token = state.enter()
        # The client sends a request on a connection once it has read the answer before it
        # (HTTP/1.1, no pipelining): that answer is no longer unread (see last_answer_on).
        port = _client_port(request)
        state.last_answer[port] = None
        try:
            try:
                body = await request.json()
            except (json.JSONDecodeError, UnicodeDecodeError):
                return _error(
                    400,
                    "We could not parse the JSON body of your request.",
                    "invalid_request_error",
                )
            state.requests.append(body)
            state.paths.append(request.path)
            state.queries.append(dict(request.query))
            state.headers.append(dict(request.headers))
            if not isinstance(body, dict):
                return _error(400, "the body must be a JSON object", "invalid_request_error")
            # Refused as OpenAI refuses it: the SDK's request types, strictly, and the model rules.
            refusal = openai_refusal(request.path, body)
            if refusal is not None:
                return _error(
                    400,
                    refusal.message,
                    "invalid_request_error",
                    {"x-request-id": "req_fake_400"},
                    param=refusal.param,
                    code=refusal.code,
                )
            prompt = _prompt_of(request.path, body)
            config = state.config
            if config.refuse_stream and body.get("stream"):
                return _error(
                    400,
                    "Unrecognized request arguments supplied: stream, stream_options",
                    "invalid_request_error",
                )
            refused, limit_headers = _refusal(state, config)
            if refused is not None:
                return refused
            while config.held and config.held in prompt:
                await asyncio.sleep(0.005)
            fault = state.pick_fault(prompt)
            if config.latency and not (fault is not None and config.faults_first):
                await asyncio.sleep(config.latency)
            if fault is not None:
                state.faults_sent[fault] += 1
                return await _misbehave(fault, request, config)
            base = str(request.url.origin())
            usual = _answer(request.path, body, prompt, config, base, state.images)
            headers = {"x-request-id": "req_fake_ok", **limit_headers, **config.headers}
            scripted = scripted_answer(prompt, config.answers)
            if (
                scripted is None
                and body.get("stream")
                and request.path.endswith("/chat/completions")
            ):
                options = body.get("stream_options") or {}
                events = _chat_stream(usual, bool(options.get("include_usage")))
                response = await send_stream(request, state, events, headers, prompt)
                state.sent(prompt, port)
                return response
            if scripted is not None:
                response = _scripted_response(scripted, usual, headers)
            else:
                response = web.json_response(usual, headers=headers)
            await send_counted(request, response, state, prompt, port)
            return response
        finally:
            state.leave(token)

    async def image(request: web.Request) -> web.Response:
        state.image_headers.append(dict(request.headers))
        prompt = state.images.get(request.match_info["name"])
        if prompt is None:
            return _error(404, "no such image (or it expired)", "not_found")
        return web.Response(body=image_bytes(prompt), content_type="image/png")

    app = web.Application(client_max_size=64 * 1024 * 1024)
    for path in ("/v1/chat/completions", "/v1/completions", "/v1/images/generations"):
        app.router.add_post(path, generate)
        # Azure OpenAI: the deployment in the path, ?api-version=... in the query.
        app.router.add_post(path.replace("/v1", "/openai/deployments/{deployment}"), generate)
    state.batches.add_routes(app)
    app.router.add_get("/_fake/images/{name}.png", image)
    add_control_routes(app, state, lambda message: _error(400, message, "invalid_request_error"))
    return app


def add_control_routes(
    app: web.Application, state: _State, bad_request: Callable[[str], web.Response]
) -> None:
    """Add the routes that drive a fake from another process: ``GET /_fake/stats`` (the
    counters), ``POST /_fake/reset`` and ``POST /_fake/config`` (answered with
    ``bad_request(message)``, in the vendor's error shape, when a setting is refused)."""

    async def stats(_: web.Request) -> web.Response:
        return web.json_response(state.stats())

    async def reset(_: web.Request) -> web.Response:
        state.reset()
        return web.json_response(state.stats())

    async def configure(request: web.Request) -> web.Response:
        try:
            state.config.update(await request.json())
        except (ValueError, TypeError) as exc:
            return bad_request(str(exc))
        return web.json_response({"ok": True})

    app.router.add_get("/_fake/stats", stats)
    app.router.add_post("/_fake/reset", reset)
    app.router.add_post("/_fake/config", configure)


class FakeOpenAI:
    """The fake server on 127.0.0.1 in a daemon thread with its own event loop.

    Use as a context manager, or call :meth:`start` / :meth:`stop`. ``url`` is the base URL to
    give an OpenAI client (``http://127.0.0.1:<port>/v1``).
    """

    def __init__(self, port: int = 0, **config: Any) -> None:
        self.config = FakeConfig()
        self.config.update(config)
        self.state = _State(self.config)
        self.port = port
        self._server: LoopbackServer | None = None

    @property
    def url(self) -> str:
        """The base URL, ending in ``/v1``."""
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Every request body received, in arrival order."""
        return self.state.requests

    @property
    def batches(self) -> BatchBackend:
        """The Files and Batches the fake holds (``.uploads``: every batch file's bytes;
        ``.created``: how many batches were created)."""
        return self.state.batches

    @property
    def message_batches(self) -> MessageBatches:
        """Anthropic's Message Batches the fake holds, served by the Anthropic fake
        (``.submitted``: every batch's requests; ``.created``: how many were created)."""
        return self.state.message_batches

    @property
    def received(self) -> list[dict[str, Any]]:
        """Every request received, in arrival order: ``path``, ``query`` (dict), ``headers``
        (dict) and ``body``."""
        state = self.state
        return [
            {"path": p, "query": q, "headers": h, "body": b}
            for p, q, h, b in zip(
                state.paths, state.queries, state.headers, state.requests, strict=False
            )
        ]

    @property
    def origin(self) -> str:
        """The server's address without ``/v1`` (an Azure-shaped base URL)."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def answered_prompts(self) -> list[str]:
        """The prompt of every request answered with a 200, in order."""
        return self.state.answered_prompts

    @property
    def last_answer_on(self) -> dict[int, str | None]:
        """Per client port (a connection), the prompt of the 200 answer last sent on it, while
        the client has sent no request on it since (so it may still be unread, in the
        client's socket buffer); ``None`` when that connection's last answer was not a 200 (or
        is still being made)."""
        return self.state.last_answer

    @property
    def streams(self) -> list[list[tuple[float, str]]]:
        """Per streamed answer, in order: ``(time.perf_counter() when sent, word)`` for every
        word it sent."""
        return self.state.streams

    @property
    def peak_in_flight(self) -> int:
        """The most requests that were being served at once."""
        return self.state.peak_in_flight

    def stats(self) -> dict[str, Any]:
        """Return the counters: requests, answered, peak_in_flight, in_flight, faults."""
        return self.state.stats()

    def settled_stats(self, timeout: float = 60.0) -> dict[str, Any]:
        """Return the counters once no request is being served. An answer is counted once it
        is written, when its client may already have read it and moved on: a test that has
        every answer in hand reads the counters here, not with :meth:`stats`.

        Raises:
            TimeoutError: some request was still being served after ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        while self.state.in_flight:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the fake still serves {self.state.in_flight} request(s)")
            time.sleep(0.005)
        return self.state.stats()

    def reset(self) -> None:
        """Forget the recorded requests and counters."""
        self.state.reset()

    def configure(self, **config: Any) -> None:
        """Change the latency, faults, markers, ... while running."""
        self.config.update(config)

    def _make_app(self) -> web.Application:
        """Return the application to serve (the other vendors' fakes serve their own)."""
        return make_app(self.state)

    # Whose request validators the fake builds before it serves (see fake_checks.warm).
    vendor = "openai"

    def start(self) -> Self:
        """Start serving; returns self once the port is bound.

        Raises:
            RuntimeError: the server did not start (its port is taken, say).
        """
        warm(self.vendor)
        server = LoopbackServer(self._make_app, port=self.port, name=f"fake-{self.vendor}")
        self._server = server.start()
        self.port = server.port
        return self

    def stop(self) -> None:
        """Stop serving (hanging requests are dropped)."""
        if self._server is not None:
            self._server.stop()
            self._server = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> None:
    """Serve the fake from the command line until interrupted."""
    parser = argparse.ArgumentParser(
        prog="python -m flownb.testing.fake_openai", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--port", type=int, default=8123)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds before each answer")
    parser.add_argument("--faults", default="", help='e.g. "429=0.1,500=0.05"')
    parser.add_argument(
        "--retry-after", default="1", help="Retry-After header of 429s, whole seconds ('' for none)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--faults-first", action="store_true", help="answer faults at once, before the latency"
    )
    parser.add_argument("--max-in-flight", type=int, help="429 beyond this many in flight")
    parser.add_argument("--rate-limit", type=int, help="requests per --rate-window; 429 beyond")
    parser.add_argument("--rate-window", type=float, default=60.0, help="seconds (default 60)")
    args = parser.parse_args(argv)
    faults = {}
    for part in filter(None, args.faults.split(",")):
        name, _, share = part.partition("=")
        faults[name.strip()] = float(share)
    config = FakeConfig()
    config.update(
        {
            "latency": args.latency,
            "faults": faults,
            "retry_after": args.retry_after or None,
            "seed": args.seed,
            "faults_first": args.faults_first,
            "max_in_flight": args.max_in_flight,
            "rate_limit": args.rate_limit,
            "rate_window": args.rate_window,
        }
    )
    web.run_app(
        make_app(_State(config)),
        host="127.0.0.1",
        port=args.port,
        access_log=None,
        print=lambda *_: print(f"fake OpenAI on http://127.0.0.1:{args.port}/v1", flush=True),
    )


if __name__ == "__main__":
    main()
