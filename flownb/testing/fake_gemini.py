"""A loopback server speaking the Gemini API (``v1beta``), for tests, benches and notebooks (no key,
no internet).

- ``POST /v1beta/models/{model}:generateContent`` answers ``"echo: <prompt>"`` (or a scripted
  reply) as one candidate per ``candidateCount``; asked for ``responseModalities: ["IMAGE"]`` it
  answers the prompt's small PNG (:func:`~flownb.testing.fake_openai.image_bytes`) as
  ``inlineData``. ``usageMetadata`` counts words as tokens; ``configure(cached_tokens=N)``
  reports N of a text answer's prompt tokens as ``cachedContentTokenCount``.

- ``POST /v1beta/models/{model}:streamGenerateContent?alt=sse`` answers the same as server-sent
  events: one ``GenerateContentResponse`` per word of the first candidate's text
  (``stream_delay`` seconds apart), the last one with the ``finishReason`` (an image answer: one
  event).

A request Gemini would refuse (a field its types do not have, a wrong type, a non-zero penalty
on Gemini 2.5+; see :mod:`flownb.testing.fake_checks`) is answered 400 ``INVALID_ARGUMENT`` with
Google's message. Errors have Google's shape (``{"error": {"code", "message", "status"}}``); a
429 is
``RESOURCE_EXHAUSTED`` with a ``google.rpc.RetryInfo`` detail whose ``retryDelay`` is the
configured ``retry_after``, as Google sends it (no ``Retry-After`` header). Faults, latency and
limits as in the OpenAI fake; every request body, path and header set is recorded.

In a test::

    with FakeGemini() as fake:
        flow = flownb.load_flow(path, provider="gemini")  # GEMINI_BASE_URL=fake.url

From a shell: ``python -m flownb.testing.fake_gemini --port 8125``.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from ._vendor_fake import control_routes, handler, serve_until_interrupted, words
from .fake_checks import gemini_refusal
from .fake_config import FakeConfig
from .fake_openai import FakeOpenAI, sse_event
from .fake_replies import (
    cache_split,
    echo,
    image_bytes,
    judge_reply,
    scripted_reply,
    seen_image,
    split_words,
)
from .fake_state import _State

__all__ = ["FakeGemini", "main", "make_app"]

_STATUS = {400: "INVALID_ARGUMENT", 429: "RESOURCE_EXHAUSTED", 500: "INTERNAL"}


def _bytes_of(data: str) -> bytes:
    """Return the bytes of a JSON ``bytes`` field. Google's JSON takes both base64 alphabets,
    and google-genai sends the URL-safe one (``-`` and ``_`` for ``+`` and ``/``)."""
    return base64.urlsafe_b64decode(data.replace("+", "-").replace("/", "_"))


def _part_text(part: Mapping[str, Any]) -> str:
    """Return a part as the fake reads it: its text, or an image (``inlineData`` bytes or a
    ``fileData`` URI) as :func:`~flownb.testing.fake_openai.seen_image` says."""
    inline = part.get("inlineData") or part.get("inline_data")
    if isinstance(inline, dict):
        return seen_image(_bytes_of(str(inline.get("data", ""))))
    file = part.get("fileData") or part.get("file_data")
    if isinstance(file, dict):
        return seen_image(None, str(file.get("fileUri") or file.get("file_uri") or ""))
    return str(part.get("text", ""))


def _texts(content: Any) -> str:
    parts = content.get("parts") if isinstance(content, dict) else None
    return "".join(_part_text(p) for p in parts or [] if isinstance(p, dict))


class _Gemini:
    def check(self, request: web.Request | None, body: Mapping[str, Any]) -> str | None:
        # Refused as Gemini refuses it: google-genai's types under the REST request's fields,
        # strictly, and the model rules.
        model = request.match_info["target"].partition(":")[0] if request is not None else ""
        return gemini_refusal(model, body)

    def prompt_of(self, request: web.Request, body: Mapping[str, Any]) -> str:
        return _texts(body["contents"][-1])

    def answer(
        self, request: web.Request, body: Mapping[str, Any], prompt: str, config: FakeConfig
    ) -> dict[str, Any]:
        model = request.match_info["target"].partition(":")[0]
        gen = body.get("generationConfig") or {}
        n = int(gen.get("candidateCount") or 1)
        system = _texts(body.get("systemInstruction") or {})
        if "IMAGE" in (gen.get("responseModalities") or []):
            data = base64.b64encode(image_bytes(prompt)).decode("ascii")
            parts: list[dict[str, Any]] = [{"inlineData": {"mimeType": "image/png", "data": data}}]
            texts = [""]
        else:
            scripted = scripted_reply(prompt, config.replies)
            if scripted is None:
                scripted = judge_reply(prompt)  # flownb's judge prompts get a verdict
            texts = [scripted if scripted is not None else echo(prompt, i) for i in range(n)]
            parts = []
        candidates = [
            {
                "content": {"role": "model", "parts": parts or [{"text": text}]},
                "finishReason": "STOP",
                "index": i,
            }
            for i, text in enumerate(texts)
        ]
        p = words(prompt) + words(system)
        # An image counts 1290 output tokens, as Gemini bills a 1024x1024 one.
        c = sum(words(t) for t in texts) if not parts else 1290
        usage = {"promptTokenCount": p, "candidatesTokenCount": c, "totalTokenCount": p + c}
        cached = cache_split(p, config)[0] if not parts else 0
        if cached:  # a part of the prompt count, as Google reports it
            usage["cachedContentTokenCount"] = cached
        return {
            "candidates": candidates,
            "usageMetadata": usage,
            "modelVersion": model,
            # As Google answers: an id per response (here the prompt's digest, so a test can
            # expect it).
            "responseId": "fake-" + hashlib.sha256(prompt.encode()).hexdigest()[:16],
        }

    def stream(
        self, request: web.Request, body: Mapping[str, Any], answer: Mapping[str, Any]
    ) -> list[tuple[str, bytes]] | None:
        if not request.match_info["target"].endswith(":streamGenerateContent"):
            return None
        first = answer["candidates"][0]
        parts = first["content"]["parts"]
        if "text" not in parts[0]:  # an image: one event with the whole answer
            return [("", sse_event(answer))]
        words_sent = split_words(parts[0]["text"]) or [""]
        usage = answer["usageMetadata"]
        events = []
        for i, word in enumerate(words_sent):
            last = i == len(words_sent) - 1
            candidate: dict[str, Any] = {
                "content": {"role": "model", "parts": [{"text": word}]},
                "index": 0,
            }
            if last:
                candidate["finishReason"] = first["finishReason"]
            chunk = {
                "candidates": [candidate],
                # As Google streams it: the prompt's count on every chunk, the rest at the end.
                "usageMetadata": usage if last else {"promptTokenCount": usage["promptTokenCount"]},
                "modelVersion": answer["modelVersion"],
                "responseId": answer["responseId"],
            }
            events.append((word, sse_event(chunk)))
        return events

    def limit_headers(self, limits: Mapping[str, str]) -> dict[str, str]:
        return {}  # Google sends no rate-limit headers

    def error(
        self, status: int, message: str, kind: str, headers: Mapping[str, str] | None = None
    ) -> web.Response:
        err: dict[str, Any] = {
            "code": status,
            "message": message,
            "status": _STATUS.get(status, "UNKNOWN"),
        }
        head = dict(headers or {})
        delay = head.pop("Retry-After", None)
        if status == 429 and delay is not None:
            err["details"] = [
                {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": f"{delay}s"}
            ]
        return web.json_response({"error": err}, status=status, headers=head)


def make_app(state: _State) -> web.Application:
    """Return the aiohttp application serving the fake Gemini API over ``state``."""
    vendor = _Gemini()
    app = web.Application(client_max_size=64 * 1024 * 1024)
    # One route: the model and the method share the last path segment ("m:generateContent").
    app.router.add_post("/v1beta/models/{target}", handler(state, vendor))
    control_routes(app, state, vendor)
    return app


class FakeGemini(FakeOpenAI):
    """The fake Gemini API on 127.0.0.1 in a daemon thread (a context manager). ``url`` is the
    base URL for the SDK or ``GEMINI_BASE_URL`` (``http://127.0.0.1:<port>``)."""

    vendor = "gemini"

    @property
    def url(self) -> str:
        """The base URL (the SDK adds ``/v1beta/models/...``)."""
        return f"http://127.0.0.1:{self.port}"

    def _make_app(self) -> web.Application:
        return make_app(self.state)


def main(argv: list[str] | None = None) -> None:
    """Serve the fake from the command line until interrupted."""
    serve_until_interrupted(
        argv,
        prog="python -m flownb.testing.fake_gemini",
        port=8125,
        name="Gemini",
        make_app=make_app,
    )


if __name__ == "__main__":
    main()
