"""A loopback server speaking Anthropic's Messages API, for tests, benches and notebooks (no key,
no internet).

``POST /v1/messages`` answers ``"echo: <prompt>"`` (or a scripted reply, see
:class:`~flownb.testing.fake_openai.FakeConfig`, or a judge's verdict as the OpenAI fake gives
one; an image block reads as :func:`~flownb.testing.fake_openai.seen_image` of its bytes) as a
Messages response, with ``usage``
counting words as tokens (``input_tokens``: the prompt's and the system prompt's words;
``output_tokens``: the answer's; ``configure(cached_tokens=N, cache_write_tokens=M)`` moves N
of them to ``cache_read_input_tokens`` and M to ``cache_creation_input_tokens``). Like the real
API it refuses what Anthropic refuses (400 ``invalid_request_error`` with Anthropic's message:
the SDK's request types checked strictly, and the model rules such as "temperature or top_p"
on current Claude models, see :mod:`flownb.testing.fake_checks`); errors have Anthropic's shape
(``{"type": "error", "error": {"type", "message"}}``) and 429s carry ``retry-after``. It
misbehaves on purpose as the OpenAI fake does (``faults``, ``fail_markers``, latency,
``max_in_flight``, ``rate_limit``, the latter with Anthropic's ``anthropic-ratelimit-requests-*``
headers) and records every request body, path and header set. It also speaks the Message
Batches API (``/v1/messages/batches``, see :mod:`flownb.testing.fake_message_batches`), each
batch answered as the live route would answer its requests. A request with ``stream: true``
is answered as Anthropic streams (``message_start``, a text block's ``content_block_delta``
events one word each, ``message_delta`` with the stop reason and usage, ``message_stop``),
``stream_delay`` seconds between words.

In a test::

    with FakeAnthropic() as fake:
        flow = flownb.load_flow(path, provider="anthropic")  # ANTHROPIC_BASE_URL=fake.url

From a shell: ``python -m flownb.testing.fake_anthropic --port 8124``.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from aiohttp import web

from ..providers.openai.answers import parse_duration
from ._vendor_fake import control_routes, handler, serve_until_interrupted, words
from .fake_checks import anthropic_refusal
from .fake_config import FakeConfig
from .fake_openai import FakeOpenAI, sse_event
from .fake_replies import cache_split, echo, judge_reply, scripted_reply, seen_image, split_words
from .fake_state import _State

__all__ = ["FakeAnthropic", "main", "make_app"]

_KINDS = {
    "invalid_request": "invalid_request_error",
    "rate_limit": "rate_limit_error",
    "server_error": "api_error",
}


def _block_text(block: Mapping[str, Any]) -> str:
    """Return a content block as the fake reads it: its text, or an image block (base64 or
    URL source) as :func:`~flownb.testing.fake_openai.seen_image` says."""
    if block.get("type") == "text":
        return str(block.get("text", ""))
    if block.get("type") == "image":
        source = block.get("source") or {}
        if source.get("type") == "base64":
            return seen_image(base64.b64decode(str(source.get("data", ""))))
        return seen_image(None, str(source.get("url", "")))
    return ""


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(_block_text(b) for b in content if isinstance(b, dict))
    return ""


class _Anthropic:
    def check(self, request: web.Request | None, body: Mapping[str, Any]) -> str | None:
        # Refused as Anthropic refuses it: the SDK's request types, strictly, and the model rules.
        why = anthropic_refusal(body)
        if why is None and not body["messages"]:
            return "messages: at least one message is required"
        return why

    def prompt_of(self, request: web.Request, body: Mapping[str, Any]) -> str:
        last = body["messages"][-1]
        return _text_of(last.get("content") if isinstance(last, dict) else "")

    def answer(
        self, request: web.Request, body: Mapping[str, Any], prompt: str, config: FakeConfig
    ) -> dict[str, Any]:
        scripted = scripted_reply(prompt, config.replies)
        if scripted is None:
            scripted = judge_reply(prompt)  # flownb's judge prompts get a verdict
        text = scripted if scripted is not None else echo(prompt)
        system = body.get("system")
        system_text = _text_of(system) if system is not None else ""
        tokens = words(prompt) + words(system_text)
        read, written = cache_split(tokens, config)  # Anthropic counts them apart from input
        return {
            "id": "msg_fake",
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {
                "input_tokens": tokens - read - written,
                "output_tokens": words(text),
                "cache_creation_input_tokens": written,
                "cache_read_input_tokens": read,
            },
        }

    def stream(
        self, request: web.Request, body: Mapping[str, Any], answer: Mapping[str, Any]
    ) -> list[tuple[str, bytes]] | None:
        if not body.get("stream"):
            return None
        usage = answer["usage"]
        start = {
            **answer,
            "content": [],
            "stop_reason": None,
            "usage": {**usage, "output_tokens": 1},
        }
        text = "".join(b["text"] for b in answer["content"])
        events = [
            ("", sse_event({"type": "message_start", "message": start}, "message_start")),
            (
                "",
                sse_event(
                    {
                        "type": "content_block_start",
                        "index": 0,
                        "content_block": {"type": "text", "text": ""},
                    },
                    "content_block_start",
                ),
            ),
            ("", sse_event({"type": "ping"}, "ping")),
        ]
        for word in split_words(text):
            delta = {"type": "text_delta", "text": word}
            data = {"type": "content_block_delta", "index": 0, "delta": delta}
            events.append((word, sse_event(data, "content_block_delta")))
        stop = {"stop_reason": answer["stop_reason"], "stop_sequence": None}
        tail = [
            ({"type": "content_block_stop", "index": 0}, "content_block_stop"),
            (
                {
                    "type": "message_delta",
                    "delta": stop,
                    "usage": {"output_tokens": usage["output_tokens"]},
                },
                "message_delta",
            ),
            ({"type": "message_stop"}, "message_stop"),
        ]
        events += [("", sse_event(data, name)) for data, name in tail]
        return events

    def limit_headers(self, limits: Mapping[str, str]) -> dict[str, str]:
        if "x-ratelimit-limit-requests" not in limits:
            return {}
        reset = parse_duration(limits.get("x-ratelimit-reset-requests")) or 0.0
        when = datetime.now(UTC) + timedelta(seconds=reset)
        return {
            "anthropic-ratelimit-requests-limit": limits["x-ratelimit-limit-requests"],
            "anthropic-ratelimit-requests-remaining": limits["x-ratelimit-remaining-requests"],
            "anthropic-ratelimit-requests-reset": when.isoformat().replace("+00:00", "Z"),
        }

    def error(
        self, status: int, message: str, kind: str, headers: Mapping[str, str] | None = None
    ) -> web.Response:
        body = {"type": "error", "error": {"type": _KINDS.get(kind, kind), "message": message}}
        head = {"request-id": f"req_fake_{status}", **(headers or {})}
        return web.json_response(body, status=status, headers=head)


def make_app(state: _State) -> web.Application:
    """Return the aiohttp application serving the fake Messages API over ``state``."""
    vendor = _Anthropic()
    # A batch of 100,000 requests is one create body of up to 256 MB.
    app = web.Application(client_max_size=256 * 1024 * 1024)
    app.router.add_post("/v1/messages", handler(state, vendor))
    batches = state.message_batches

    def answer(params: Mapping[str, Any]) -> dict[str, Any]:
        prompt = _text_of(params["messages"][-1].get("content"))
        return vendor.answer(None, params, prompt, state.config)  # type: ignore[arg-type]

    batches.answer = answer
    batches.check = lambda params: vendor.check(None, params)
    batches.add_routes(app)
    control_routes(app, state, vendor)
    return app


class FakeAnthropic(FakeOpenAI):
    """The fake Messages API on 127.0.0.1 in a daemon thread (a context manager). ``url`` is
    the base URL for the SDK or ``ANTHROPIC_BASE_URL`` (``http://127.0.0.1:<port>``)."""

    vendor = "anthropic"

    @property
    def url(self) -> str:
        """The base URL (the SDK adds ``/v1/messages``)."""
        return f"http://127.0.0.1:{self.port}"

    def _make_app(self) -> web.Application:
        return make_app(self.state)


def main(argv: list[str] | None = None) -> None:
    """Serve the fake from the command line until interrupted."""
    serve_until_interrupted(
        argv,
        prog="python -m flownb.testing.fake_anthropic",
        port=8124,
        name="Anthropic",
        make_app=make_app,
    )


if __name__ == "__main__":
    main()
