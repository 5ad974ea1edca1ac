"""A loopback OpenAI-compatible server for tests, benches and notebooks (no key, no internet).

It answers ``POST /v1/chat/completions``, ``/v1/completions`` and ``/v1/images/generations``
(and Azure OpenAI's ``/openai/deployments/{deployment}/...`` forms of each) deterministically
from the request (text ``"echo: <prompt>"``, images as a URL it serves
itself under ``/_fake/images/`` or a small PNG in ``b64_json``), after a configurable latency,
and answers flownb's judge prompts as a judge would (see "Judging" below),
and can misbehave on purpose: 429 with a ``Retry-After``, 500, hangs and dropped connections,
each for a share of requests (seeded, so a run is reproducible) or for every prompt containing a
given marker, after the latency or at once (``faults_first``); and it answers whatever a test
scripts for a marker (``answers``: refusals, content parts, HTML error pages, ...). It records
every request (:attr:`FakeOpenAI.received`: path, query, headers, body), the prompt of every
request it answered with a 200 (once the answer is written), and the peak number of requests in
flight. ``usage_details`` adds usage sections to every text answer (e.g.
``{"prompt_tokens_details": {"cached_tokens": 3}}``) and images answers report usage too.

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

Control routes (for a server in another process): ``GET /_fake/stats`` returns the counters,
``POST /_fake/reset`` clears them, ``POST /_fake/config`` changes latency/faults/markers.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import io
import json
import random
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Self

from aiohttp import web

from .fake_batches import BatchBackend
from .fake_message_batches import MessageBatches

__all__ = [
    "FakeConfig",
    "FakeOpenAI",
    "add_control_routes",
    "data_url_bytes",
    "echo",
    "image_bytes",
    "judge_reply",
    "judge_score",
    "main",
    "scripted_answer",
    "scripted_reply",
    "seen_image",
    "send_stream",
    "split_words",
    "sse_event",
]

FAULTS = ("429", "500", "hang", "drop")


def echo(prompt: str, choice: int = 0) -> str:
    """Return the text the fake answers for ``prompt`` (choice 0 is the plain echo)."""
    return f"echo: {prompt}" if choice == 0 else f"echo[{choice}]: {prompt}"


def image_bytes(prompt: str) -> bytes:
    """Return the small PNG the fake answers for ``prompt`` (same prompt, same bytes)."""
    from PIL import Image

    digest = hashlib.sha256(prompt.encode("utf-8")).digest()
    img = Image.new("RGB", (8, 8), tuple(digest[:3]))
    out = io.BytesIO()
    img.save(out, format="PNG")
    return out.getvalue()


def image_url(prompt: str, base: str = "https://images.invalid") -> str:
    """Return the URL the fake answers for ``prompt`` when asked for ``response_format=url``:
    under ``base`` (the fake's own address, which serves it as :func:`image_bytes` until the
    fake stops, as a provider's expiring URL would)."""
    return f"{base}/_fake/images/{image_id(prompt)}.png"


def image_id(prompt: str) -> str:
    """Return the name part of the image URL for ``prompt``."""
    return hashlib.sha256(prompt.encode()).hexdigest()[:32]


@dataclass
class FakeConfig:
    """How the fake behaves. ``faults`` maps a fault (``"429"``, ``"500"``, ``"hang"``,
    ``"drop"``) to the share of requests that get it; ``fail_markers`` maps a fault to a substring:
    every request whose prompt contains it gets that fault."""

    latency: float = 0.0
    faults: dict[str, float] = field(default_factory=dict)
    fail_markers: dict[str, str] = field(default_factory=dict)
    retry_after: str | None = "0"
    seed: int = 0
    image_format: str = "url"  # what images answer when the request does not say
    max_in_flight: int | None = None  # 429 at once beyond this many requests being served
    rate_limit: int | None = None  # requests per rate_window; 429 (with headers) beyond it
    rate_window: float = 60.0
    # Faults answered at once, before the latency (as a provider's front door refuses), instead
    # of after it (as a busy replica does).
    faults_first: bool = False
    # Scripted text answers: marker -> reply, for every prompt containing the marker (the
    # first marker that matches wins). ``{score}`` in a reply becomes a number in [0, 1] drawn
    # from the prompt's digest, so a fake judge gives different, reproducible grades.
    replies: dict[str, str] = field(default_factory=dict)
    # The Batches API (see fake_batches.py): seconds from creation to completion, the marker of
    # lines that fail, and whether batches expire with half their lines answered.
    batch_seconds: float = 1.0
    batch_fail_marker: str = ""
    batch_expire: bool = False
    batch_create_delay: float = 0.0  # seconds a create is answered after the batch exists
    # Anthropic's batches: replies without their request counts (a reply seen in the wild).
    batch_no_counts: bool = False
    # Scripted HTTP answers: marker -> answer, for every prompt containing the marker (the first
    # marker that matches wins), sent after the latency instead of the usual one. An answer is
    # a dict of: ``status`` (200), ``headers``, and one of ``json`` (the whole body, sent as
    # JSON), ``text`` (a raw body; ``content_type`` defaults to text/html when it starts with
    # "<"), or ``message`` / ``finish_reason`` / ``choices`` / ``data`` (the usual answer with
    # the first choice's message or finish reason replaced, or its choices / image data list).
    answers: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Share of requests answered 429 at once, before any latency (a provider shedding load).
    instant_429: float = 0.0
    # Extra usage sections merged into every text answer's usage (prompt_tokens_details, ...).
    usage_details: dict[str, Any] = field(default_factory=dict)
    # Seconds between two words of a streamed answer (``stream: true``).
    stream_delay: float = 0.0
    # marker -> N: the first streamed answer to a prompt containing the marker is cut off (the
    # connection dropped) after N words; the prompt's next request streams whole.
    stream_cut: dict[str, int] = field(default_factory=dict)
    # Answer every ``stream: true`` request 400, as a compatible server without streaming does.
    refuse_stream: bool = False

    def update(self, data: Mapping[str, Any]) -> None:
        """Change the fields named in ``data``; raises ValueError on unknown names or faults."""
        for key, value in data.items():
            if key not in self.__dataclass_fields__:
                raise ValueError(f"unknown fake setting {key!r}")
            setattr(self, key, value)
        unknown = (set(self.faults) | set(self.fail_markers)) - set(FAULTS)
        if unknown:
            raise ValueError(f"unknown faults {sorted(unknown)}; choose from {FAULTS}")


class _State:
    def __init__(self, config: FakeConfig) -> None:
        self.config = config
        self.rng = random.Random(config.seed)
        self.requests: list[dict[str, Any]] = []  # every body received, in arrival order
        self.paths: list[str] = []
        self.queries: list[dict[str, str]] = []
        self.headers: list[dict[str, str]] = []
        self.images: dict[str, str] = {}  # image id -> prompt, for the URLs answered
        self.image_headers: list[dict[str, str]] = []  # headers of every image download
        self.in_flight = 0  # every request being served (what max_in_flight counts)
        # The peak counts only requests that arrived since the last reset: one a previous test
        # left hanging (the client gave up; the fake notices within 0.1 s) is not this test's.
        self.peak_in_flight = 0
        self._epoch = 0
        self._epoch_in_flight = 0
        self.answered = 0  # 200s sent
        self.answered_prompts: list[str] = []  # the prompt of every 200 sent, in order
        self.faults_sent: dict[str, int] = dict.fromkeys(FAULTS, 0)
        self.limited = 0  # 429s sent by the rate limit (max_in_flight / rate_limit)
        self.window_start = 0.0
        self.window_used = 0
        self.batches = BatchBackend(config, self.answer_live)
        # Anthropic's Message Batches (the Anthropic fake mounts them and says how to answer).
        self.message_batches = MessageBatches(config)
        # Per streamed answer: (perf_counter time, word) for every word, as it was sent.
        self.streams: list[list[tuple[float, str]]] = []
        self.cut_prompts: set[str] = set()  # prompts whose stream was cut once (stream_cut)

    def answer_live(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """Return the body the fake answers ``body`` with on ``path`` (for batch lines)."""
        return _answer(path, body, _prompt_of(path, body), self.config, images=self.images)

    def reset(self) -> None:
        self.rng = random.Random(self.config.seed)
        self.batches.reset()
        self.message_batches.reset()
        self.requests.clear()
        self.paths.clear()
        self.queries.clear()
        self.headers.clear()
        self.image_headers.clear()
        self._epoch += 1
        self._epoch_in_flight = 0
        self.peak_in_flight = 0
        self.answered = 0
        self.answered_prompts.clear()
        self.streams.clear()
        self.cut_prompts.clear()
        self.faults_sent = dict.fromkeys(FAULTS, 0)
        self.limited = 0
        self.window_start = 0.0
        self.window_used = 0

    def enter(self) -> int:
        """Count a request in flight; return the token :meth:`leave` takes back."""
        self.in_flight += 1
        self._epoch_in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self._epoch_in_flight)
        return self._epoch

    def leave(self, token: int) -> None:
        """Count a request out of flight (``token``: what :meth:`enter` returned)."""
        self.in_flight -= 1
        if token == self._epoch:
            self._epoch_in_flight -= 1

    def stats(self) -> dict[str, Any]:
        return {
            "requests": len(self.requests),
            "answered": self.answered,
            "peak_in_flight": self.peak_in_flight,
            "in_flight": self.in_flight,
            "faults": dict(self.faults_sent),
            "limited": self.limited,
        }

    def take_quota(self) -> tuple[bool, dict[str, str]]:
        """Count a request against ``rate_limit``: return whether it is within the limit, and
        the rate-limit headers to answer with (none when no rate limit is set)."""
        limit = self.config.rate_limit
        if limit is None:
            return True, {}
        window = self.config.rate_window
        now = time.monotonic()
        if now - self.window_start >= window:
            self.window_start, self.window_used = now, 0
        allowed = self.window_used < limit
        if allowed:
            self.window_used += 1
        reset = max(0.0, self.window_start + window - now)
        headers = {
            "x-ratelimit-limit-requests": str(limit),
            "x-ratelimit-remaining-requests": str(limit - self.window_used),
            "x-ratelimit-reset-requests": duration(reset),
        }
        if not allowed:
            headers["Retry-After"] = f"{reset:.3f}"
        return allowed, headers

    def pick_fault(self, prompt: str) -> str | None:
        for fault, marker in self.config.fail_markers.items():
            if marker and marker in prompt:
                return fault
        roll = self.rng.random()
        for fault in FAULTS:
            share = self.config.faults.get(fault, 0.0)
            if roll < share:
                return fault
            roll -= share
        return None


def duration(seconds: float) -> str:
    """Return ``seconds`` in OpenAI's rate-limit duration format: "6m0s", "1.5s", "20ms"."""
    if seconds < 1:
        return f"{max(1, round(seconds * 1000))}ms"
    minutes, rest = divmod(seconds, 60)
    if minutes:
        return f"{int(minutes)}m{rest:.0f}s"
    return f"{rest:.3g}s"


def seen_image(data: bytes | None, url: str = "") -> str:
    """Return how the fakes read an image a request shows the model, in the prompt text they
    answer: ``[image sha256:<hex>]`` of its bytes (``[image url:<url>]`` when it came as an
    http(s) URL), so a judge's verdict on it follows the image."""
    if data is None:
        return f"[image url:{url}]"
    return f"[image sha256:{hashlib.sha256(data).hexdigest()}]"


def data_url_bytes(url: str) -> bytes | None:
    """Return the bytes of a base64 ``data:`` URL, None for any other URL."""
    header, sep, payload = url.partition(",")
    if not (url.startswith("data:") and sep and header.endswith(";base64")):
        return None
    return base64.b64decode(payload)


def _chat_text(content: Any) -> str:
    """Return a chat message's content as the fake reads it: the text parts, and each
    ``image_url`` part as :func:`seen_image` says."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list) or not all(isinstance(p, dict) for p in content):
        return json.dumps(content)
    out = []
    for part in content:
        if part.get("type") == "text":
            out.append(str(part.get("text", "")))
        elif part.get("type") == "image_url":
            url = str((part.get("image_url") or {}).get("url", ""))
            out.append(seen_image(data_url_bytes(url), url))
        else:
            out.append(json.dumps(part))
    return "".join(out)


def _prompt_of(path: str, body: Mapping[str, Any]) -> str:
    if path.endswith("/chat/completions"):
        messages = body.get("messages") or [{}]
        return _chat_text(messages[-1].get("content", ""))
    prompt = body.get("prompt", "")
    return prompt if isinstance(prompt, str) else json.dumps(prompt)


def _error(
    status: int, message: str, kind: str, headers: Mapping[str, str] | None = None
) -> web.Response:
    body = {"error": {"message": message, "type": kind, "param": None, "code": kind}}
    return web.json_response(body, status=status, headers=dict(headers or {}))


def _usage(prompt: str, text: str) -> dict[str, int]:
    p, c = len(prompt.split()), len(text.split())
    return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}


def scripted_reply(prompt: str, replies: Mapping[str, str]) -> str | None:
    """Return the scripted reply for ``prompt`` (see ``FakeConfig.replies``), or None."""
    for marker, reply in replies.items():
        if marker and marker in prompt:
            score = hashlib.sha256(prompt.encode("utf-8")).digest()[0] / 255
            return reply.replace("{score}", f"{score:.2f}")
    return None


_GRADED = re.compile(r"\nOutput to grade:\n<<<\n(.*)\n>>>", re.DOTALL)
_CANDIDATE = re.compile(r"^Candidate (\d+):\n<<<\n(.*?)\n>>>$", re.DOTALL | re.MULTILINE)


def judge_score(text: str) -> float:
    """Return the fake judge's score for a graded ``text``: the first two bytes of its SHA-256
    read as a number over 65535, rounded to two decimals (in 0..1)."""
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return round(int.from_bytes(digest[:2], "big") / 65535, 2)


def judge_reply(prompt: str) -> str | None:
    """Return the fake's verdict for a flownb judge or pick_best prompt (JSON text), or None
    when ``prompt`` is neither."""
    from ..scorers import JUDGE_MARKER, PICK_MARKER

    if prompt.startswith(JUDGE_MARKER):
        graded = _GRADED.search(prompt)
        if graded is None:
            return None
        score = judge_score(graded.group(1))
        reason = f"fake verdict: {score:.2f} drawn from the graded text's digest"
        return json.dumps({"score": score, "reason": reason})
    if prompt.startswith(PICK_MARKER):
        candidates = [(int(k), judge_score(t)) for k, t in _CANDIDATE.findall(prompt)]
        if not candidates:
            return None
        best = max(candidates, key=lambda c: (c[1], -c[0]))[0]
        return json.dumps({"best": best, "reason": "fake verdict: the highest digest score"})
    return None


def scripted_answer(prompt: str, answers: Mapping[str, Mapping[str, Any]]) -> Any:
    """Return the scripted answer for ``prompt`` (see ``FakeConfig.answers``), or None."""
    for marker, answer in answers.items():
        if marker and marker in prompt:
            return answer
    return None


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


def _answer(
    path: str,
    body: Mapping[str, Any],
    prompt: str,
    config: FakeConfig,
    base: str = "https://images.invalid",
    images: dict[str, str] | None = None,
) -> dict[str, Any]:
    n = int(body.get("n") or 1)
    scripted = scripted_reply(prompt, config.replies)
    if scripted is None and not path.endswith("/images/generations"):
        scripted = judge_reply(prompt)
    model = body.get("model", "")
    created = int(time.time())
    if path.endswith("/chat/completions"):
        text = echo(prompt)
        return {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "created": created,
            "model": model,
            "choices": [
                {
                    "index": i,
                    "message": {
                        "role": "assistant",
                        "content": scripted if scripted is not None else echo(prompt, i),
                    },
                    "finish_reason": "stop",
                }
                for i in range(n)
            ],
            "usage": {**_usage(prompt, text), **config.usage_details},
        }
    if path.endswith("/completions"):
        text = echo(prompt)
        return {
            "id": "cmpl-fake",
            "object": "text_completion",
            "created": created,
            "model": model,
            "choices": [
                {
                    "index": i,
                    "text": scripted if scripted is not None else echo(prompt, i),
                    "finish_reason": "stop",
                    "logprobs": None,
                }
                for i in range(n)
            ],
            "usage": _usage(prompt, text),
        }
    fmt = body.get("response_format") or config.image_format
    items: list[dict[str, str]] = []
    for i in range(n):
        p = prompt if i == 0 else f"{prompt} #{i}"
        if fmt == "b64_json":
            items.append({"b64_json": base64.b64encode(image_bytes(p)).decode("ascii")})
        else:
            items.append({"url": image_url(p, base)})
            if images is not None:
                images[image_id(p)] = p
    tokens = len(prompt.split())
    usage = {
        "input_tokens": tokens,
        "output_tokens": 272 * n,
        "total_tokens": tokens + 272 * n,
        "input_tokens_details": {"text_tokens": tokens, "image_tokens": 0},
    }
    return {"created": created, "data": items, "usage": usage}


_WORDS = re.compile(r"\s+|\S+\s*")


def split_words(text: str) -> list[str]:
    """Return ``text`` as the pieces a fake streams: each word with the spaces after it."""
    return _WORDS.findall(text)


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


def make_app(state: _State) -> web.Application:
    """Return the aiohttp application serving the fake API over ``state``."""

    async def generate(request: web.Request) -> web.StreamResponse:
        token = state.enter()
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
            if not isinstance(body, dict) or "model" not in body:
                return _error(400, "you must provide a model parameter", "invalid_request_error")
            prompt = _prompt_of(request.path, body)
            config = state.config
            if config.refuse_stream and body.get("stream"):
                return _error(
                    400,
                    "Unrecognized request arguments supplied: stream, stream_options",
                    "invalid_request_error",
                )
            limit_headers: dict[str, str] = {}
            if config.max_in_flight is not None and state.in_flight > config.max_in_flight:
                state.limited += 1  # refused at once, as a provider's concurrency limit does
                return _error(
                    429,
                    "Too many requests in flight",
                    "rate_limit_exceeded",
                    {"x-request-id": "req_fake_limit", "Retry-After": "0"},
                )
            if config.rate_limit is not None:
                within, limit_headers = state.take_quota()
                if not within:
                    state.limited += 1
                    return _error(
                        429,
                        "Rate limit reached for requests",
                        "rate_limit_exceeded",
                        {"x-request-id": "req_fake_limit", **limit_headers},
                    )
            if config.instant_429 and state.rng.random() < config.instant_429:
                state.faults_sent["429"] += 1
                return _error(
                    429,
                    "Rate limit reached for requests",
                    "rate_limit_exceeded",
                    {"x-request-id": "req_fake_429", "Retry-After": "0"},
                )
            fault = state.pick_fault(prompt)
            if config.latency and not (fault is not None and config.faults_first):
                await asyncio.sleep(config.latency)
            if fault is not None:
                state.faults_sent[fault] += 1
            if fault == "429":
                headers = {"x-request-id": "req_fake_429"}
                if config.retry_after is not None:
                    headers["Retry-After"] = config.retry_after
                return _error(
                    429, "Rate limit reached for requests", "rate_limit_exceeded", headers
                )
            if fault == "500":
                return _error(
                    500,
                    "The server had an error while processing your request.",
                    "server_error",
                    {"x-request-id": "req_fake_500"},
                )
            if fault == "hang":
                # Hang until the client gives up (then this request is no longer in flight).
                for _ in range(36000):
                    if request.transport is None or request.transport.is_closing():
                        break
                    await asyncio.sleep(0.1)
                raise asyncio.CancelledError
            if fault == "drop":
                if request.transport is not None:
                    request.transport.abort()
                raise asyncio.CancelledError
            base = str(request.url.origin())
            usual = _answer(request.path, body, prompt, config, base, state.images)
            headers = {"x-request-id": "req_fake_ok", **limit_headers}
            scripted = scripted_answer(prompt, config.answers)
            if (
                scripted is None
                and body.get("stream")
                and request.path.endswith("/chat/completions")
            ):
                options = body.get("stream_options") or {}
                events = _chat_stream(usual, bool(options.get("include_usage")))
                response = await send_stream(request, state, events, headers, prompt)
                state.answered += 1
                state.answered_prompts.append(prompt)
                return response
            if scripted is not None:
                response = _scripted_response(scripted, usual, headers)
            else:
                response = web.json_response(usual, headers=headers)
            # Counted once handed to the connection, not before: "answered" means sent.
            try:
                await response.prepare(request)
                await response.write_eof()
            except ConnectionError:  # the client is gone (killed): this answer was never sent
                raise asyncio.CancelledError from None
            if response.status < 400:  # a scripted error answer is not an answer
                state.answered += 1
                state.answered_prompts.append(prompt)
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
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None

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

    def reset(self) -> None:
        """Forget the recorded requests and counters."""
        self.state.reset()

    def configure(self, **config: Any) -> None:
        """Change the latency, faults, markers, ... while running."""
        self.config.update(config)

    def _make_app(self) -> web.Application:
        """Return the application to serve (the other vendors' fakes serve their own)."""
        return make_app(self.state)

    def start(self) -> Self:
        """Start serving; returns self once the port is bound."""
        ready = threading.Event()
        loop = asyncio.new_event_loop()
        self._loop = loop

        async def serve() -> None:
            runner = web.AppRunner(self._make_app(), access_log=None, shutdown_timeout=0.1)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", self.port)
            await site.start()
            self.port = runner.addresses[0][1]
            self._runner = runner
            ready.set()

        def run() -> None:
            asyncio.set_event_loop(loop)
            loop.run_until_complete(serve())
            loop.run_forever()

        self._thread = threading.Thread(target=run, name="fake-openai", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("the fake OpenAI server did not start")
        return self

    def stop(self) -> None:
        """Stop serving (hanging requests are dropped)."""
        loop, runner = self._loop, self._runner
        if loop is None or runner is None:
            return
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(10)
        self._loop = self._runner = None

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
        "--retry-after", default="0", help="Retry-After header of 429s ('' for none)"
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
