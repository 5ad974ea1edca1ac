"""The OpenAI provider: OpenAI itself or any OpenAI-compatible server (Ollama, vLLM, LM Studio,
llama.cpp) through ``OPENAI_BASE_URL``.

What a node's modelParams become (decided once per node, at flow load, in :meth:`prepare`):

- text nodes go to ``/chat/completions`` (prompt = one user message), or to ``/completions``
  for completion models (``*-instruct``, ``davinci-002``, ``babbage-002``) or when the node sets
  ``endpoint: "completions"``;
- ``max_tokens`` is sent as ``max_completion_tokens`` to reasoning models (o1/o3/o4/gpt-5
  families), which also refuse sampling knobs: temperature, top_p and the penalties are left
  out for them, with a warning;
- ``n`` > 1 is sent and the **first** choice (index 0) becomes the output;
- ``best_of`` exists only on ``/completions``: 1 is a no-op and dropped; more on a chat model is
  refused at load time (:class:`ConfigError`), never sent to fail;
- a handful of known extra parameters pass through (``seed``, ``stop``, ...); anything else is
  dropped with a warning naming it;
- image nodes go to ``/images/generations``; the image is kept in the media store and returned
  as ``Generation(media=name)``: a ``b64_json`` answer is decoded, a URL answer is downloaded once
  (provider URLs expire within hours; flownb's own media URL does not). The download never
  carries the API key and is capped at :data:`MAX_IMAGE_BYTES`.

Transport: requests go out over a lean aiohttp path by default (about a tenth of the SDK's CPU
per call, which is what bounds throughput against fast local servers at high concurrency), or
through the official ``openai`` SDK's ``AsyncOpenAI`` (``transport="sdk"`` /
``FLOWNB_OPENAI_TRANSPORT=sdk``). Either way one call is one attempt: retries, backoff and the
concurrency limit belong to the engine, so they work the same for every provider.

Both transports read OpenAI's rate-limit headers (``x-ratelimit-remaining-requests`` /
``-tokens``, ``x-ratelimit-reset-*`` in its duration format such as ``"6m0s"``) into
:class:`RateLimits` on the generation (and on a 429's :class:`RateLimited` as ``rate_limits``),
so the run's limiter can pace before the provider refuses rather than after.

Errors of both transports are translated into flownb errors at one boundary
(:func:`_translate_status`, and each transport's ``post``), keeping the provider's message, HTTP
status and request id, with any API key masked.
"""

from __future__ import annotations

import asyncio
import atexit
import base64
import binascii
import contextlib
import errno
import html
import ipaddress
import json
import os
import re
import socket
import ssl
import urllib.parse
import urllib.request
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from types import MappingProxyType
from typing import Any, ClassVar

from ...config.settings import DEFAULT_OPENAI_TRANSPORT, RunConfig
from ...error_map import parse_retry_after
from ...errors import ConfigError, ProviderError, ProviderTimeout, RateLimited
from ...infra.media import MediaStore
from ...show.notices import warn
from ..base import PROMPT_LIMITS, Call, Generation, Kind, Provider, RateLimits
from ..images import has_images, prompt_parts
from ..wire import aiohttp_trace
from .batch import OpenAIBatches
from .stream import ChatChunks, sse_data

__all__ = [
    "DEFAULT_AZURE_API_VERSION",
    "OPENAI_BASE_URL",
    "Azure",
    "AzureOpenAIProvider",
    "OpenAIProvider",
    "Prepared",
    "parse_duration",
    "rate_limits",
    "usage_of",
]

OPENAI_BASE_URL = "https://api.openai.com/v1"
DEFAULT_AZURE_API_VERSION = "2024-10-21"  # Azure OpenAI's current GA data-plane version
ENTRA_SCOPE = "https://cognitiveservices.azure.com/.default"
DEFAULT_TEXT_MODEL = "gpt-4o-mini"
DEFAULT_IMAGE_MODEL = "dall-e-3"
TRANSPORTS = ("aiohttp", "sdk")

_REASONING = re.compile(r"^(o1|o3|o4|gpt-5)(\b|[-.])")
_COMPLETION_MODELS = re.compile(r"(-instruct\b|^davinci-002$|^babbage-002$|^text-)")
_SAMPLING = ("temperature", "top_p", "frequency_penalty", "presence_penalty")
# Extra parameters passed through as written; anything else is dropped with a warning.
_CHAT_EXTRAS = frozenset(
    {
        "seed",
        "stop",
        "user",
        "logit_bias",
        "response_format",
        "reasoning_effort",
        "service_tier",
        "logprobs",
        "top_logprobs",
        "verbosity",
    }
)
_COMPLETION_EXTRAS = frozenset({"seed", "stop", "user", "logit_bias", "logprobs", "suffix", "echo"})
_IMAGE_EXTRAS = frozenset(
    {
        "size",
        "quality",
        "style",
        "response_format",
        "background",
        "output_format",
        "output_compression",
        "moderation",
        "user",
    }
)
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?)(ms|h|m|s)")
_KEY_LIKE = re.compile(r"sk-[A-Za-z0-9_*\-]{3,}")
_IMAGE_EXT = {"png": "png", "jpeg": "jpg", "jpg": "jpg", "webp": "webp", "gif": "gif"}
# The largest image downloaded from a provider's URL (a 4K PNG is about 25 MB).
MAX_IMAGE_BYTES = 64 * 1024 * 1024


class Prepared:
    """A node's request, fixed at load time: the endpoint path and every body field but the
    prompt."""

    __slots__ = ("body", "endpoint", "image_ext", "notes")

    def __init__(
        self, endpoint: str, body: dict[str, Any], notes: list[str], image_ext: str = "png"
    ):
        self.endpoint = endpoint
        self.body = body
        self.notes = notes
        self.image_ext = image_ext


def _prepare_text(params: Mapping[str, Any], node: str) -> Prepared:
    p = dict(params)
    notes: list[str] = []
    model = p.pop("model", None) or DEFAULT_TEXT_MODEL
    endpoint_choice = p.pop("endpoint", None)
    if endpoint_choice not in (None, "chat", "completions"):
        raise ConfigError(
            f"node {node!r}: endpoint must be 'chat' or 'completions', got {endpoint_choice!r}"
        )
    completions = endpoint_choice == "completions" or (
        endpoint_choice is None and bool(_COMPLETION_MODELS.search(model))
    )
    reasoning = bool(_REASONING.match(model)) and not completions
    body: dict[str, Any] = {"model": model}

    best_of = p.pop("best_of", None)
    if best_of is not None and best_of != 1:
        if not completions:
            raise ConfigError(
                f"node {node!r}: best_of={best_of} only works on the completions endpoint, and "
                f"{model!r} is a chat model; remove best_of, or set endpoint: 'completions' with a "
                "completion model (e.g. gpt-3.5-turbo-instruct)"
            )
        body["best_of"] = best_of
    n = p.pop("n", None)
    if n is not None and n != 1:
        if best_of is not None and best_of != 1 and best_of < n:
            raise ConfigError(f"node {node!r}: best_of ({best_of}) must be at least n ({n})")
        body["n"] = n  # the first choice becomes the output
    max_tokens = p.pop("max_tokens", None)
    max_completion = p.pop("max_completion_tokens", None)
    if max_completion is not None:
        # Written in the node: sent as written (the current name; /completions has only the old).
        body["max_tokens" if completions else "max_completion_tokens"] = max_completion
        if max_tokens is not None:
            notes.append("max_tokens dropped: max_completion_tokens is set")
    elif max_tokens is not None:
        body["max_completion_tokens" if reasoning else "max_tokens"] = max_tokens
    for name in _SAMPLING:
        value = p.pop(name, None)
        if value is None:
            continue
        if reasoning:
            notes.append(f"{name} dropped: reasoning model {model!r} only takes its default")
        else:
            body[name] = value
    allowed = _COMPLETION_EXTRAS if completions else _CHAT_EXTRAS
    for name, value in p.items():
        if name in allowed:
            body[name] = value
        else:
            where = "completions" if completions else "chat completions"
            notes.append(f"{name} dropped: not a {where} parameter flownb passes through")
    return Prepared("/completions" if completions else "/chat/completions", body, notes)


def _prepare_image(params: Mapping[str, Any], node: str) -> Prepared:
    p = dict(params)
    notes: list[str] = []
    model = p.pop("model", None) or DEFAULT_IMAGE_MODEL
    body: dict[str, Any] = {"model": model}
    n = p.pop("n", None)
    if n is not None and n != 1:
        if model == "dall-e-3":
            raise ConfigError(f"node {node!r}: dall-e-3 makes one image per request; n must be 1")
        body["n"] = n  # the first image becomes the output
    for name, value in p.items():
        if name in _IMAGE_EXTRAS:
            body[name] = value
        else:
            notes.append(f"{name} dropped: not an images parameter")
    fmt = str(body.get("output_format", "png")).lower()
    return Prepared("/images/generations", body, notes, _IMAGE_EXT.get(fmt, "png"))


def _redact(text: str, key: str | None) -> str:
    if key:
        text = text.replace(key, "***")
    return _KEY_LIKE.sub("sk-***", text)


def parse_duration(text: str | None) -> float | None:
    """Return seconds for OpenAI's rate-limit durations ("1s", "6m0s", "20ms", "1h2m3.5s", or a
    bare number of seconds); ``None`` for anything else."""
    if not text:
        return None
    text = text.strip()
    try:
        return max(0.0, float(text))
    except ValueError:
        pass
    seconds = 0.0
    end = 0
    for match in _DURATION_PART.finditer(text):
        if match.start() != end:
            return None
        end = match.end()
        value, unit = float(match.group(1)), match.group(2)
        seconds += value * {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}[unit]
    return seconds if end == len(text) and end else None


def _int(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(float(text))
    except ValueError:
        return None


def rate_limits(headers: Mapping[str, str]) -> RateLimits | None:
    """Return what OpenAI's ``x-ratelimit-*`` headers say, or ``None`` when there are none
    (the usual case for local servers, checked first and cheaply)."""
    get = headers.get
    remaining_requests = get("x-ratelimit-remaining-requests")
    remaining_tokens = get("x-ratelimit-remaining-tokens")
    if remaining_requests is None and remaining_tokens is None:
        return None
    return RateLimits(
        remaining_requests=_int(remaining_requests),
        reset_requests=parse_duration(get("x-ratelimit-reset-requests")),
        limit_requests=_int(get("x-ratelimit-limit-requests")),
        remaining_tokens=_int(remaining_tokens),
        reset_tokens=parse_duration(get("x-ratelimit-reset-tokens")),
        limit_tokens=_int(get("x-ratelimit-limit-tokens")),
    )


_TITLE = re.compile(r"<title[^>]*>(.*?)</title>", re.IGNORECASE | re.DOTALL)
_TAG = re.compile(r"<(script|style)\b.*?</\1\s*>|<[^>]*>", re.IGNORECASE | re.DOTALL)


def _first_line(text: str, limit: int = 300) -> str:
    """Return the first line of text in ``text``: an HTML page's title (else its first line of
    text once tags are dropped), or a plain body's first non-blank line; at most ``limit``
    characters."""
    if "<" in text and ">" in text:
        title = _TITLE.search(text)
        text = title.group(1) if title and title.group(1).strip() else _TAG.sub("\n", text)
        text = html.unescape(text)
    for line in text.splitlines():
        line = " ".join(line.split())
        if line:
            return line if len(line) <= limit else line[: limit - 3] + "..."
    return ""


def _detail(value: Any) -> str:
    """Return a FastAPI-style ``detail`` (a string, or a list of ``{"msg": ...}``) as text."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        parts = [str(v.get("msg", v)) if isinstance(v, Mapping) else str(v) for v in value]
        return "; ".join(parts)
    return "" if value is None else json.dumps(value)[:300]


def _wait_asked(headers: Mapping[str, str]) -> float | None:
    """Return the wait an answer asks for, in seconds: ``retry-after-ms`` (OpenAI's, more
    precise) first, else ``Retry-After`` (seconds or an HTTP date); ``None`` when neither."""
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            value = float(millis) / 1000.0
        except ValueError:
            value = -1.0
        if 0.0 <= value < float("inf"):
            return value
    return parse_retry_after(headers.get("retry-after") or headers.get("Retry-After"))


# Usage details promoted under their own names (the rest keep their section as a prefix).
_DETAILS = frozenset({"cached_tokens", "reasoning_tokens", "image_tokens"})


def usage_of(usage: Any) -> dict[str, int] | None:
    """Return the answer's usage as flat token counts, for the run log and pricing.

    Top-level counts keep their names; ``*_tokens_details`` sections are flattened:
    ``cached_tokens``, ``reasoning_tokens`` and ``image_tokens`` under those names, anything
    else as ``<section>_<name>`` (``prompt_audio_tokens``). The images API's
    ``input_tokens`` / ``output_tokens`` also count as ``prompt_tokens`` /
    ``completion_tokens``. ``None`` when the answer reported no usage.
    """
    if not isinstance(usage, Mapping):
        return None
    flat: dict[str, int] = {}
    for name, value in usage.items():
        if isinstance(value, int) and not isinstance(value, bool):
            flat[name] = value
    for name, value in usage.items():
        if not (isinstance(value, Mapping) and name.endswith("_tokens_details")):
            continue
        section = name.removesuffix("_tokens_details")
        for detail, count in value.items():
            if not isinstance(count, int) or isinstance(count, bool):
                continue
            key = detail if detail in _DETAILS and detail not in flat else f"{section}_{detail}"
            flat[key] = flat.get(key, 0) + count
    if "input_tokens" in flat and "prompt_tokens" not in flat:
        flat["prompt_tokens"] = flat["input_tokens"]
    if "output_tokens" in flat and "completion_tokens" not in flat:
        flat["completion_tokens"] = flat["output_tokens"]
    return flat or None


def _translate_status(
    status: int, body: Any, headers: Mapping[str, str], key: str | None, url: str | None = None
) -> ProviderError:
    """Return the flownb error for an HTTP error answer (the one place statuses are mapped).
    ``url`` is the address asked for, named in a 404's message (a wrong base URL or path)."""
    message = ""
    code = None
    if isinstance(body, Mapping):
        err = body.get("error", body)
        if isinstance(err, Mapping):
            message = str(err.get("message") or "")
            code = err.get("code") or err.get("type")
        elif isinstance(err, str):
            message = err
        if not message and "detail" in body:  # FastAPI-style servers
            message = _detail(body["detail"])
    elif isinstance(body, str):
        message = _first_line(body)
    message = _redact(message or "no message", key)
    request_id = headers.get("x-request-id")
    text = f"OpenAI API error {status}: {message}"
    if status == 404 and url:
        text += f" (asked for {_redact(url, key)}; is the base URL right?)"
    if request_id:
        text += f" (request id {request_id})"
    retry_after_s = _wait_asked(headers)
    if status == 429 and code != "insufficient_quota":  # out of credit: retrying cannot help
        return RateLimited(
            text,
            retry_after=retry_after_s,
            status=status,
            request_id=request_id,
            provider="openai",
            rate_limits=rate_limits(headers),
        )
    if status in (408, 504):
        return ProviderTimeout(text, status=status, request_id=request_id, provider="openai")
    return ProviderError(
        text, status=status, request_id=request_id, provider="openai", retry_after=retry_after_s
    )


# A ProviderError with this code is a setup problem (bad host name, nothing listening on a
# local address, no TLS there): reported at once, never retried (see limits.retryable).
UNREACHABLE = "provider_unreachable"
_NO_ROUTE = frozenset({errno.ENETUNREACH, errno.EHOSTUNREACH})


def _causes(exc: BaseException) -> list[BaseException]:
    """Return ``exc`` and what it was raised from or during (aiohttp's ``os_error`` too)."""
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and all(current is not e for e in seen):
        seen.append(current)
        nxt = current.__cause__ or current.__context__
        os_error = getattr(current, "os_error", None)
        current = nxt if nxt is not None else os_error if isinstance(os_error, OSError) else None
    return seen


def _local(host: str) -> bool:
    """Return whether ``host`` is a loopback, private, link-local or reserved address (or
    ``localhost``): nothing listening there is not a passing state of a public service."""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        ip = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return ip.is_loopback or ip.is_private or ip.is_link_local or ip.is_reserved


def _unreachable(exc: BaseException, url: str) -> str | None:
    """Return why ``url`` cannot be reached in a way no retry fixes (the host name does not
    resolve, nothing listens on a local address, no route, TLS fails), or ``None`` when the
    failure may pass (a refused connection to a public host, a reset, a timeout)."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    where = parts.netloc or host
    for cause in _causes(exc):
        if isinstance(cause, socket.gaierror):
            return f"the host name {host!r} does not resolve (DNS: {cause.strerror or cause})"
        if isinstance(cause, ssl.SSLError) and type(cause).__module__ == "ssl":
            reason = getattr(cause, "reason", None) or cause.strerror or str(cause)
            hint = ": is it http://, not https://?" if "VERSION" in str(reason) else ""
            return f"the TLS handshake with {where} failed ({reason}{hint})"
        if isinstance(cause, ssl.CertificateError):
            return f"the TLS certificate of {where} was not accepted ({cause})"
        if isinstance(cause, ConnectionRefusedError) and _local(host):
            return f"nothing is listening at {where} (connection refused)"
        if isinstance(cause, OSError) and cause.errno in _NO_ROUTE:
            return f"there is no route to {where} ({cause.strerror})"
    return None


def _connection_failed(exc: BaseException, base_url: str, key: str | None) -> ProviderError:
    """Return the error for a request that got no answer: one line saying why, and whether a
    retry can help (:data:`UNREACHABLE` when it cannot)."""
    why = _unreachable(exc, base_url)
    if why is not None:
        return ProviderError(
            f"could not reach the OpenAI API at {base_url}: {_redact(why, key)} (check "
            "OPENAI_BASE_URL)",
            provider="openai",
            code=UNREACHABLE,
        )
    detail = next(
        (str(c) for c in reversed(_causes(exc)) if str(c)), type(exc).__name__
    )  # the innermost cause says most ("Connection error." says nothing)
    return ProviderError(
        f"could not reach the OpenAI API at {base_url}: {type(exc).__name__}: "
        f"{_redact(_first_line(detail), key)}",
        provider="openai",
    )


def _bad_answer(what: str, request_id: str | None) -> ProviderError:
    """Return the error for a 200 answer that holds no usable output (not worth a retry)."""
    text = f"OpenAI API answered 200 with {what}"
    if request_id:
        text += f" (request id {request_id})"
    return ProviderError(text, status=200, request_id=request_id, provider="openai")


def _joined(content: Any) -> str:
    """Return a message's ``content`` as text: a string as is, a list of parts joined (the
    ``text`` of each text part, in order)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, Mapping) and isinstance(part.get("text"), str):
                parts.append(part["text"])
        return "".join(parts)
    return str(content)


def _refusal_in(content: Any) -> str | None:
    """Return the text of a refusal part of a list ``content``, if there is one."""
    if isinstance(content, list):
        for part in content:
            if isinstance(part, Mapping) and part.get("type") == "refusal":
                return str(part.get("refusal") or "no reason given")
    return None


def _content_parts(prompt: str, media: MediaStore) -> list[dict[str, Any]]:
    """Return a prompt with images as chat content parts: ``text`` parts and ``image_url``
    parts (the bytes as a ``data:`` URL, or the image's http(s) URL)."""
    return [
        {"type": "text", "text": part}
        if isinstance(part, str)
        else {"type": "image_url", "image_url": {"url": part.data_url()}}
        for part in prompt_parts(prompt, media)
    ]


def _answer_text(data: Mapping[str, Any], chat: bool, request_id: str | None) -> tuple[str, Any]:
    """Return the first choice's text and its ``finish_reason``.

    Raises:
        ProviderError: no choices; a refusal (the ``refusal`` field, a refusal part, or
            ``finish_reason: content_filter``); a tool call and no text; no message at all.
    """
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        raise _bad_answer("no answer (its 'choices' list is empty or missing)", request_id)
    choice = choices[0]
    if not isinstance(choice, Mapping):
        raise _bad_answer("a choice that is not an object", request_id)
    finish = choice.get("finish_reason")
    if chat:
        message = choice.get("message")
        if not isinstance(message, Mapping):
            raise _bad_answer("a choice without a message", request_id)
        content = message.get("content")
        refusal = message.get("refusal") or _refusal_in(content)
        if refusal:
            raise _bad_answer(f"a refusal instead of text: {_first_line(str(refusal))}", request_id)
        text = _joined(content)
        calls = message.get("tool_calls") or message.get("function_call")
        if not text and calls:
            names = [
                str((c.get("function") or c).get("name", "?"))
                for c in (calls if isinstance(calls, list) else [calls])
                if isinstance(c, Mapping)
            ]
            raise _bad_answer(
                f"a tool call ({', '.join(names) or '?'}) and no text; a node needs a text answer",
                request_id,
            )
    else:
        text = _joined(choice.get("text"))
    if finish == "content_filter":
        raise _bad_answer(
            "its answer withheld by the provider's content filter (finish_reason "
            "'content_filter', a refusal)",
            request_id,
        )
    return text, finish


# Statuses with which a server may refuse a streamed request it would answer plainly (an
# OpenAI-compatible server without streaming, or without stream_options).
_NO_STREAM = frozenset({400, 404, 415, 422, 501})


def _chunk_of(text: str, status: int, headers: Mapping[str, str], key: str | None) -> Any:
    """Return one streamed chunk decoded.

    Raises:
        ProviderError: it is not JSON, or it is an error event (OpenAI sends ``{"error"}``).
    """
    try:
        chunk = json.loads(text)
    except ValueError:
        raise _not_json(status, text, headers.get("x-request-id")) from None
    if not isinstance(chunk, dict):
        raise _not_json(status, chunk, headers.get("x-request-id"))
    if "error" in chunk and not chunk.get("choices"):
        raise _translate_status(500, chunk, headers, key)
    return chunk


def _as_chunk(data: Mapping[str, Any]) -> dict[str, Any]:
    """Return a whole chat answer (a server that did not stream) as the one chunk it amounts
    to, so it is read as a streamed answer is."""
    choices = []
    for choice in data.get("choices") or ():
        if isinstance(choice, Mapping):
            message = choice.get("message") or {}
            choices.append(
                {
                    "index": choice.get("index", 0),
                    "delta": dict(message) if isinstance(message, Mapping) else {},
                    "finish_reason": choice.get("finish_reason"),
                }
            )
    return {"model": data.get("model"), "choices": choices, "usage": data.get("usage")}


def _not_json(status: int, body: Any, request_id: str | None) -> ProviderError:
    """Return the error for a success answer whose body is not a JSON object (both transports
    word it alike: its first line, never a parser's traceback)."""
    shown = _first_line(body) if isinstance(body, str) else type(body).__name__
    return ProviderError(
        f"OpenAI API answered {status} with a body that is not a JSON object"
        + (f": {shown}" if shown else " (empty)"),
        status=status,
        request_id=request_id,
        provider="openai",
    )


async def _read_capped(chunks: AsyncIterator[bytes], url: str) -> bytes:
    """Return the downloaded image's bytes, read as they come (both transports' bodies).

    Raises:
        ProviderError: it grew over MAX_IMAGE_BYTES (stopped there, not read to the end).
    """
    parts: list[bytes] = []
    size = 0
    async for chunk in chunks:
        size += len(chunk)
        if size > MAX_IMAGE_BYTES:
            raise _download_failed(url, f"over {MAX_IMAGE_BYTES} bytes")
        parts.append(chunk)
    return b"".join(parts)


def _download_failed(url: str, why: str) -> ProviderError:
    where = urllib.parse.urlsplit(url)
    return ProviderError(
        f"could not download the generated image from {where.scheme}://{where.netloc}: {why}",
        provider="openai",
    )


# aiohttp sessions, shared by every provider with the same endpoint and key on the same event
# loop (a session is bound to its loop): flows loaded one after another reuse connections. A
# session is closed with its loop (see _close_with_loop), or at exit for a loop still running.
_SESSIONS: dict[tuple[asyncio.AbstractEventLoop, str, str | None], Any] = {}
# (registry, key) -> the suspended async generator that closes a registry's entry when the
# entry's loop shuts down; kept here so it lives as long as the entry.
_WATCHES: dict[tuple[int, Any], AsyncGenerator[None, None]] = {}


def _loop_of(ident: Any) -> asyncio.AbstractEventLoop:
    return ident[0] if isinstance(ident, tuple) else ident


async def _close_with_loop(
    registry: dict[Any, Any], ident: Any, close: Callable[[], Awaitable[Any]]
) -> None:
    """Have ``close`` run on the running loop as it shuts down, and ``ident`` leave
    ``registry`` then: ``asyncio.run`` (and any loop that shuts down its async generators
    before closing) finishes the generator started here while it can still run coroutines.
    Also forgets the entries of loops that closed without doing so (nothing can close those
    any more; at least they are not kept until exit)."""
    for key in [k for k in _WATCHES if _loop_of(k[1]).is_closed()]:
        _WATCHES.pop(key, None)
    for reg in (_SESSIONS, registry):
        for k in [k for k in reg if _loop_of(k).is_closed()]:
            reg.pop(k, None)
    entry = registry[ident]

    async def watch() -> AsyncGenerator[None, None]:
        try:
            yield
        finally:
            if registry.get(ident) is entry:
                del registry[ident]
            with contextlib.suppress(Exception):
                await close()

    gen = watch()
    await gen.__anext__()  # started on this loop: the loop now finalizes it at shutdown
    _WATCHES[(id(registry), ident)] = gen


@atexit.register
def _close_sessions() -> None:
    for (loop, _, _), session in list(_SESSIONS.items()):
        if session.closed or loop.is_closed():
            continue
        if loop.is_running():
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(session.close(), loop).result(2)
    _SESSIONS.clear()


class Azure:
    """What makes a request Azure's: the api-version, the model -> deployment map, and an Entra
    ID token provider (``None`` when an ``api-key`` is sent instead)."""

    __slots__ = ("api_version", "deployments", "token_provider")

    def __init__(
        self,
        api_version: str,
        deployments: Mapping[str, str] | None = None,
        token_provider: Callable[[], str] | None = None,
    ) -> None:
        self.api_version = api_version
        self.deployments = dict(deployments or {})
        self.token_provider = token_provider

    def deployment(self, model: str) -> str:
        """Return the deployment serving ``model``: the mapped name, else the model's."""
        return self.deployments.get(model, model)

    def url(self, base_url: str, endpoint: str, model: str) -> str:
        """Return ``{base}/openai/deployments/{deployment}{endpoint}?api-version=V``."""
        deployment = urllib.parse.quote(self.deployment(model), safe="")
        version = urllib.parse.quote(self.api_version, safe="")
        return f"{base_url}/openai/deployments/{deployment}{endpoint}?api-version={version}"


class _AiohttpTransport:
    """POSTs JSON with one aiohttp session per event loop, endpoint and key."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None,
        *,
        headers: Mapping[str, str] | None = None,
        azure: Azure | None = None,
        pool: str = "",
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.key = api_key
        self.azure = azure
        self.pool = pool
        self.headers = {
            "Content-Type": "application/json",
            "Accept": "application/json",
            **(headers or {}),
        }
        # Per request, not on the session: image downloads go to other hosts, without the key.
        if api_key and azure is not None:
            self.auth: dict[str, str] | None = {"api-key": api_key}
        else:
            self.auth = {"Authorization": f"Bearer {api_key}"} if api_key else None
        # The proxy from HTTP(S)_PROXY / NO_PROXY, worked out once: aiohttp's trust_env would
        # look it up again in a worker thread for every request (a third of our CPU per call).
        parts = urllib.parse.urlsplit(self.base_url)
        host = parts.hostname or ""
        bypass = urllib.request.proxy_bypass(host) or host in ("127.0.0.1", "localhost", "::1")
        self.proxy = None if bypass else urllib.request.getproxies().get(parts.scheme)

    def _url(self, endpoint: str, body: Mapping[str, Any]) -> str:
        if self.azure is None:
            return self.base_url + endpoint
        return self.azure.url(self.base_url, endpoint, str(body.get("model", "")))

    def _headers(self) -> dict[str, str]:
        azure = self.azure
        # Entra ID: azure-identity caches the token and refreshes it (a blocking call, about
        # once an hour) shortly before it expires.
        if azure is not None and azure.token_provider is not None:
            return {**self.headers, "Authorization": f"Bearer {azure.token_provider()}"}
        return {**self.headers, **self.auth} if self.auth else self.headers

    def _ident(self) -> tuple[Any, str, str | None]:
        # One session per loop, endpoint (its pool: endpoints on one host stay apart) and key.
        return (asyncio.get_running_loop(), self.pool + self.base_url, self.key)

    async def _session(self) -> Any:
        session = _SESSIONS.get(self._ident())
        if session is None or session.closed:
            session = await self._new_session()
        return session

    async def _new_session(self) -> Any:
        import aiohttp

        ident = self._ident()
        connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300, keepalive_timeout=30)
        session = aiohttp.ClientSession(
            connector=connector,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=30),
            trace_configs=[aiohttp_trace()],  # when each request left, for its time
        )
        _SESSIONS[ident] = session
        await _close_with_loop(_SESSIONS, ident, session.close)
        return session

    async def post(
        self, endpoint: str, body: Mapping[str, Any]
    ) -> tuple[Any, str | None, RateLimits | None]:
        import aiohttp

        try:
            session = _SESSIONS.get(self._ident())
            if session is None or session.closed:
                session = await self._new_session()
            async with session.post(
                self._url(endpoint, body),
                data=json.dumps(body),
                headers=self._headers(),
                proxy=self.proxy,
            ) as resp:
                raw = await resp.read()
                status = resp.status
                headers = resp.headers
        except aiohttp.ServerTimeoutError as exc:
            raise ProviderTimeout(f"OpenAI API timed out: {exc}", provider="openai") from exc
        except aiohttp.ClientError as exc:
            raise _connection_failed(exc, self.base_url, self.key) from exc
        try:
            data = json.loads(raw)
        except ValueError:
            data = raw.decode("utf-8", "replace")
        if status >= 400:
            raise _translate_status(status, data, headers, self.key, self.base_url + endpoint)
        if not isinstance(data, dict):
            raise _not_json(status, data, headers.get("x-request-id"))
        return data, headers.get("x-request-id"), rate_limits(headers)

    async def stream(
        self, endpoint: str, body: Mapping[str, Any], info: dict[str, Any]
    ) -> AsyncIterator[Any]:
        """Yield the chunks (decoded JSON) of a streamed answer as they arrive, after putting
        its ``request_id`` and ``limits`` in ``info``. A server that answers in one JSON body
        instead yields it as one chunk.

        Raises:
            ProviderError, ProviderTimeout, RateLimited: as :meth:`post`, also mid-stream.
        """
        import aiohttp

        url = self._url(endpoint, body)
        headers = {**self._headers(), "Accept": "text/event-stream"}
        try:
            session = await self._session()
            async with session.post(
                url, data=json.dumps(body), headers=headers, proxy=self.proxy
            ) as resp:
                request_id = resp.headers.get("x-request-id")
                # Read as events unless it says JSON: some servers stream as text/plain.
                whole = "json" in resp.content_type and "event-stream" not in resp.content_type
                if resp.status >= 400 or whole:
                    raw = await resp.read()
                    try:
                        data = json.loads(raw)
                    except ValueError:
                        data = raw.decode("utf-8", "replace")
                    if resp.status >= 400:
                        raise _translate_status(
                            resp.status, data, resp.headers, self.key, self.base_url + endpoint
                        )
                    if not isinstance(data, dict):
                        raise _not_json(resp.status, data, request_id)
                    info.update(request_id=request_id, limits=rate_limits(resp.headers))
                    yield _as_chunk(data)
                    return
                info.update(request_id=request_id, limits=rate_limits(resp.headers))
                async for text in sse_data(resp.content):
                    if text.strip() == "[DONE]":
                        return
                    yield _chunk_of(text, resp.status, resp.headers, self.key)
        except aiohttp.ServerTimeoutError as exc:
            raise ProviderTimeout(f"OpenAI API timed out: {exc}", provider="openai") from exc
        except aiohttp.ClientError as exc:
            raise _connection_failed(exc, self.base_url, self.key) from exc

    async def fetch(self, url: str) -> tuple[bytes, str]:
        """Return the bytes and content type at ``url`` (an image a response pointed to),
        through this loop's session, without the API key.

        Raises:
            ProviderError: the download failed, answered an error, or is over MAX_IMAGE_BYTES.
        """
        import aiohttp

        parts = urllib.parse.urlsplit(url)
        proxy = None
        if not urllib.request.proxy_bypass(parts.hostname or ""):
            proxy = urllib.request.getproxies().get(parts.scheme)
        try:
            session = await self._session()
            async with session.get(url, proxy=proxy) as resp:
                if resp.status >= 400:
                    raise _download_failed(url, f"HTTP {resp.status}")
                if (resp.content_length or 0) > MAX_IMAGE_BYTES:
                    raise _download_failed(url, f"over {MAX_IMAGE_BYTES} bytes")
                data = await _read_capped(resp.content.iter_chunked(256 * 1024), url)
                return data, resp.headers.get("Content-Type", "")
        except aiohttp.ClientError as exc:
            raise _download_failed(url, type(exc).__name__) from exc

    async def aclose(self) -> None:
        ident = self._ident()
        session = _SESSIONS.pop(ident, None)
        _WATCHES.pop((id(_SESSIONS), ident), None)
        if session is not None:
            await session.close()


class _SdkTransport:
    """The same calls through the official SDK's ``AsyncOpenAI`` (its own retries off)."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None,
        *,
        headers: Mapping[str, str] | None = None,
        azure: Azure | None = None,
        pool: str = "",
    ) -> None:
        self.base_url = base_url
        self.key = api_key
        self.headers = dict(headers or {}) or None
        self.azure = azure
        self._clients: dict[asyncio.AbstractEventLoop, Any] = {}

    async def _client(self) -> Any:
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            azure = self.azure
            if azure is not None:
                from openai import AsyncAzureOpenAI

                # The SDK puts the deployment (the body's model) and api-version in the URL.
                client = AsyncAzureOpenAI(
                    azure_endpoint=self.base_url,
                    api_version=azure.api_version,
                    api_key=self.key if azure.token_provider is None else None,
                    azure_ad_token_provider=azure.token_provider,
                    default_headers=self.headers,
                    max_retries=0,
                    timeout=None,
                )
            else:
                from openai import AsyncOpenAI

                # A placeholder key for local servers that need none (the SDK insists on one).
                client = AsyncOpenAI(
                    api_key=self.key or "unused",
                    base_url=self.base_url,
                    default_headers=self.headers,
                    max_retries=0,
                    timeout=None,
                )
            self._clients[loop] = client
            await _close_with_loop(self._clients, loop, client.close)  # not kept past its loop
        return client

    async def post(
        self, endpoint: str, body: Mapping[str, Any]
    ) -> tuple[Any, str | None, RateLimits | None]:
        import openai

        client = await self._client()
        rest = dict(body)
        model = rest.pop("model")
        if self.azure is not None:
            model = self.azure.deployment(model)  # the SDK routes by deployment name
        try:
            # with_raw_response: the same call, with the answer's headers (rate limits) kept.
            if endpoint == "/chat/completions":
                messages = rest.pop("messages")
                raw = await client.chat.completions.with_raw_response.create(
                    model=model, messages=messages, extra_body=rest
                )
            elif endpoint == "/completions":
                prompt = rest.pop("prompt")
                raw = await client.completions.with_raw_response.create(
                    model=model, prompt=prompt, extra_body=rest
                )
            else:
                prompt = rest.pop("prompt")
                raw = await client.images.with_raw_response.generate(
                    model=model, prompt=prompt, extra_body=rest
                )
        except openai.OpenAIError as exc:
            raise self._translate(exc) from exc
        request_id = raw.headers.get("x-request-id")
        try:
            data = json.loads(raw.content)  # the answer as sent, not the SDK's typed reading
        except ValueError as exc:
            raise _not_json(raw.status_code, raw.text, request_id) from exc
        if not isinstance(data, dict):
            raise _not_json(raw.status_code, data, request_id)
        return data, request_id, rate_limits(raw.headers)

    def _translate(self, exc: Exception) -> ProviderError:
        """Return the flownb error for an exception of the SDK."""
        import openai

        if isinstance(exc, openai.APIStatusError):
            return _translate_status(
                exc.status_code,
                exc.body if exc.body is not None else exc.response.text,
                exc.response.headers,
                self.key,
                str(exc.response.request.url),
            )
        if isinstance(exc, openai.APITimeoutError):
            return ProviderTimeout(f"OpenAI API timed out: {exc}", provider="openai")
        if isinstance(exc, openai.APIConnectionError):
            return _connection_failed(exc, self.base_url, self.key)
        return ProviderError(f"OpenAI SDK error: {_redact(str(exc), self.key)}", provider="openai")

    async def stream(
        self, endpoint: str, body: Mapping[str, Any], info: dict[str, Any]
    ) -> AsyncIterator[Any]:
        """Yield the chunks of a streamed chat answer as the SDK reads them (as plain JSON
        data), after putting its ``request_id`` and ``limits`` in ``info``.

        Raises:
            ProviderError, ProviderTimeout, RateLimited: as :meth:`post`, also mid-stream.
        """
        import openai

        client = await self._client()
        rest = dict(body)
        model = rest.pop("model")
        if self.azure is not None:
            model = self.azure.deployment(model)
        messages = rest.pop("messages")
        rest.pop("stream", None)
        options = rest.pop("stream_options", None)
        try:
            raw = await client.chat.completions.with_raw_response.create(
                model=model,
                messages=messages,
                stream=True,
                stream_options=options,
                extra_body=rest,
            )
            info.update(request_id=raw.headers.get("x-request-id"), limits=rate_limits(raw.headers))
            kind = raw.headers.get("content-type", "")
            if "json" in kind and "event-stream" not in kind:  # answered whole, not streamed
                content = await raw.http_response.aread()
                try:
                    data = json.loads(content)
                except ValueError as exc:
                    text = content.decode("utf-8", "replace")
                    raise _not_json(raw.status_code, text, None) from exc
                if not isinstance(data, dict):
                    raise _not_json(raw.status_code, data, None)
                yield _as_chunk(data)
                return
            async for chunk in raw.parse():
                yield chunk.model_dump(mode="json", exclude_unset=True)
        except openai.OpenAIError as exc:
            raise self._translate(exc) from exc

    async def fetch(self, url: str) -> tuple[bytes, str]:
        """Return the bytes and content type at ``url``, with the SDK's HTTP library (httpx),
        without the API key.

        Raises:
            ProviderError: the download failed, answered an error, or is over MAX_IMAGE_BYTES.
        """
        import httpx

        try:
            async with (
                httpx.AsyncClient(timeout=60) as client,
                client.stream("GET", url) as resp,
            ):
                if resp.status_code >= 400:
                    raise _download_failed(url, f"HTTP {resp.status_code}")
                data = await _read_capped(resp.aiter_bytes(), url)
                return data, resp.headers.get("Content-Type", "")
        except httpx.HTTPError as exc:
            raise _download_failed(url, type(exc).__name__) from exc

    async def aclose(self) -> None:
        loop = asyncio.get_running_loop()
        client = self._clients.pop(loop, None)
        _WATCHES.pop((id(self._clients), loop), None)
        if client is not None:
            await client.close()


class OpenAIProvider(Provider):
    """Text and images from OpenAI or an OpenAI-compatible server.

    :meth:`create` takes the key, endpoint and transport from the run configuration
    (``OPENAI_API_KEY``, ``OPENAI_BASE_URL``, ``FLOWNB_OPENAI_TRANSPORT``: ``aiohttp`` or ``sdk``);
    built directly, it talks to api.openai.com over aiohttp unless told otherwise.

    Raises:
        ConfigError: no API key for api.openai.com, or an unknown transport.
    """

    name: ClassVar[str] = "openai"
    inline: ClassVar[bool] = False
    cacheable: ClassVar[bool] = True
    supports_images: ClassVar[bool] = True
    supports_vision: ClassVar[bool] = True
    # gpt-image-1 takes image prompts of up to 32,000 characters (dall-e-3 4,000, and the API
    # says so itself for a shorter-limited model); text as every provider.
    prompt_limits: ClassVar[Mapping[Kind, int]] = MappingProxyType(
        {**PROMPT_LIMITS, "image": 32_000}
    )

    def __init__(
        self,
        *,
        media: MediaStore,
        api_key: str | None = None,
        base_url: str | None = None,
        transport: str | None = None,
        headers: Mapping[str, str] | None = None,
        pool: str = "",
    ) -> None:
        self.media = media
        self.base_url = (base_url or OPENAI_BASE_URL).rstrip("/")
        key = api_key
        if not key and self.base_url == OPENAI_BASE_URL:
            raise ConfigError(
                "the openai provider needs OPENAI_API_KEY (or OPENAI_BASE_URL pointing at an "
                "OpenAI-compatible server that needs no key)"
            )
        self._setup(key, transport, headers, None, pool)

    def _setup(
        self,
        key: str | None,
        transport: str | None,
        headers: Mapping[str, str] | None,
        azure: Azure | None,
        pool: str,
    ) -> None:
        chosen = (transport or DEFAULT_OPENAI_TRANSPORT).strip().lower()
        if chosen not in TRANSPORTS:
            raise ConfigError(
                f"unknown OpenAI transport {chosen!r}; choose one of {', '.join(TRANSPORTS)}"
            )
        self.transport_name = chosen
        self._api_key = key  # for the Batch API's client; never shown
        self._transport = (_SdkTransport if chosen == "sdk" else _AiohttpTransport)(
            self.base_url, key, headers=headers, azure=azure, pool=pool
        )
        self._prepared: dict[int, tuple[Mapping[str, Any], Kind, Prepared]] = {}

    @classmethod
    def create(cls, config: RunConfig, media: MediaStore) -> OpenAIProvider:
        """Return the provider for ``config``'s endpoint (else ``OPENAI_API_KEY`` /
        ``OPENAI_BASE_URL``) and transport.

        Raises:
            ConfigError: no API key for api.openai.com, the endpoint's named key is missing,
                or an unknown transport.
        """
        endpoint = config.endpoint
        if endpoint is None:
            return cls(
                media=media,
                api_key=config.openai_api_key,
                base_url=config.openai_base_url,
                transport=config.openai_transport,
            )
        return cls(
            media=media,
            api_key=endpoint.key(),
            base_url=endpoint.base_url,
            transport=config.openai_transport,
            headers=endpoint.headers,
            pool=endpoint.name,
        )

    def __repr__(self) -> str:  # never the key
        return (
            f"<{type(self).__name__} base_url={self.base_url!r} transport={self.transport_name!r}>"
        )

    def identity(self) -> Mapping[str, Any]:
        """Return the provider and endpoint: the key is not part of what decides an output."""
        return {"provider": self.name, "base_url": self.base_url}

    def banner(self) -> str:
        """Return the line naming the endpoint calls go to."""
        return f"provider: {self.name} at {self.base_url} (transport {self.transport_name})"

    def prepare(self, kind: Kind, params: Mapping[str, Any], node: str = "") -> Prepared:
        """Return the request a node's params map to, warning once about each dropped param.

        Raises:
            ConfigError: params the API would refuse (best_of on a chat model, n>1 on dall-e-3).
        """
        entry = self._prepared.get(id(params))
        if entry is not None and entry[0] is params and entry[1] == kind:
            return entry[2]
        prepared = (_prepare_text if kind == "text" else _prepare_image)(params, node)
        if prepared.notes:
            notes = "; ".join(prepared.notes)
            warn(f"openai provider, node {node!r}: {notes}")
        # Keyed by identity: a node's params object lives as long as its plan.
        self._prepared[id(params)] = (params, kind, prepared)
        return prepared

    def check_params(self, kind: Kind, params: Mapping[str, Any], node: str) -> None:
        """Refuse params the API would reject, at flow load (see :meth:`prepare`).

        Raises:
            ConfigError: naming the node and the parameter.
        """
        self.prepare(kind, params, node)

    async def generate(self, call: Call) -> Generation:
        """Return one generation: a single attempt (retries are the engine's).

        Raises:
            ProviderError, ProviderTimeout, RateLimited: translated from the transport.
        """
        prepared, body = self.request(call)
        data, request_id, limits = await self._transport.post(prepared.endpoint, body)
        if call.kind == "image":
            gen = await self._image(data, prepared, request_id)
            gen.limits = limits
            gen.usage = usage_of(data.get("usage"))
            return gen
        return self.text_answer(data, prepared, body, request_id, limits)

    async def stream(self, call: Call) -> AsyncIterator[str | Generation]:
        """Yield a chat answer's text as OpenAI streams it (``stream: true``, usage asked for
        with ``stream_options``), then the generation :meth:`generate` would return for it.
        Images and the completions endpoint come in one piece (:meth:`Provider.stream`).

        Raises:
            ProviderError, ProviderTimeout, RateLimited: as :meth:`generate`.
        """
        prepared, body = self.request(call)
        if call.kind != "text" or prepared.endpoint != "/chat/completions":
            async for piece in super().stream(call):
                yield piece
            return
        streamed = {**body, "stream": True, "stream_options": {"include_usage": True}}
        info: dict[str, Any] = {}
        chunks = ChatChunks()
        try:
            async for chunk in self._transport.stream(prepared.endpoint, streamed, info):
                text = chunks.add(chunk)
                if text:
                    yield text
        except ProviderError as exc:
            # A compatible server that refuses to stream (or stream_options) before any text:
            # the plain call instead, which answers, or fails as a plain run would.
            if chunks.seen or exc.status not in _NO_STREAM:
                raise
            async for piece in super().stream(call):
                yield piece
            return
        yield self.text_answer(
            chunks.answer(), prepared, body, info.get("request_id"), info.get("limits")
        )

    def request(self, call: Call) -> tuple[Prepared, dict[str, Any]]:
        """Return the node's prepared request and the body that asks for ``call`` (what
        :meth:`generate` posts, and what a batch line holds)."""
        prepared = self.prepare(call.kind, call.params, call.node_id)
        body = dict(prepared.body)
        system = call.system
        if call.kind == "text" and has_images(call.prompt):
            if prepared.endpoint != "/chat/completions":
                raise ConfigError(
                    f"model {body.get('model')!r} is called through /completions, which takes no "
                    "images: judge images with a chat model that reads them (e.g. gpt-4o-mini)"
                )
            user = {"role": "user", "content": _content_parts(call.prompt, self.media)}
            body["messages"] = [{"role": "system", "content": system}, user] if system else [user]
        elif prepared.endpoint == "/chat/completions":
            user = {"role": "user", "content": call.prompt}
            body["messages"] = [{"role": "system", "content": system}, user] if system else [user]
        elif system and call.kind == "text":
            # /completions has no system role: the instruction goes first, a blank line apart.
            body["prompt"] = f"{system}\n\n{call.prompt}"
        else:
            body["prompt"] = call.prompt
        return prepared, body

    def text_answer(
        self,
        data: Mapping[str, Any],
        prepared: Prepared,
        body: Mapping[str, Any],
        request_id: str | None = None,
        limits: RateLimits | None = None,
    ) -> Generation:
        """Return the generation a text answer's JSON body holds (live or from a batch). An
        answer cut at the token limit is kept; the engine warns and flags it.

        Raises:
            ProviderError: the body is not an answer (a refusal, no text, no choices).
        """
        model = data.get("model") or body["model"]
        text, finish = _answer_text(data, prepared.endpoint == "/chat/completions", request_id)
        return Generation(
            text,
            model=model,
            usage=usage_of(data.get("usage")),
            limits=limits,
            finish_reason=finish,
        )

    supports_batches: ClassVar[bool] = True

    def batch_api(self) -> OpenAIBatches:
        """Return this endpoint's Batch API (half price, results within 24 hours)."""
        return OpenAIBatches(self, self._api_key)

    def batch_answer(self, endpoint: str, model: str, data: Mapping[str, Any]) -> Generation:
        """Return the generation a batch line's answer body holds (see :meth:`text_answer`).

        Raises:
            ProviderError: the body is not an answer.
        """
        return self.text_answer(data, Prepared(endpoint, {"model": model}, []), {"model": model})

    async def _image(
        self, data: Mapping[str, Any], prepared: Prepared, request_id: str | None = None
    ) -> Generation:
        items = data.get("data")
        if not isinstance(items, list) or not items or not isinstance(items[0], Mapping):
            raise _bad_answer("no image (its 'data' list is empty or missing)", request_id)
        item = items[0]
        model = prepared.body["model"]
        if item.get("b64_json"):
            try:
                raw = base64.b64decode(item["b64_json"], validate=True)
            except (binascii.Error, ValueError) as exc:
                raise ProviderError(
                    "OpenAI API answered an image that is not base64", provider="openai"
                ) from exc
            name = self.media.name_for(raw, prepared.image_ext)
            if not self.media.exists(name):
                self.media.save(name, raw)
            return Generation("", media=name, model=model)
        if item.get("url"):
            raw, content_type = await self._transport.fetch(str(item["url"]))
            ext = _IMAGE_EXT.get(content_type.split(";")[0].strip().removeprefix("image/"))
            name = self.media.name_for(raw, ext or prepared.image_ext)
            if not self.media.exists(name):
                self.media.save(name, raw)
            return Generation("", media=name, model=model)
        raise _bad_answer("an image with neither 'url' nor 'b64_json'", request_id)

    async def aclose(self) -> None:
        """Close this loop's HTTP session."""
        await self._transport.aclose()


class AzureOpenAIProvider(OpenAIProvider):
    """Azure OpenAI: ``{base}/openai/deployments/{deployment}/chat/completions?api-version=V``
    (and ``/images/generations``), the key in an ``api-key`` header, on both transports.

    The deployment is the endpoint's ``deployments[model]``, else the model's name. Without a
    key, an Entra ID token from ``azure-identity``'s default credential is sent as a bearer token
    (``pip install flownb[azure]``).

    Raises:
        ConfigError: no base URL, the named key is missing, or no key and no azure-identity.
    """

    name: ClassVar[str] = "azure"

    def __init__(
        self,
        *,
        media: MediaStore,
        base_url: str,
        api_key: str | None = None,
        api_version: str | None = None,
        deployments: Mapping[str, str] | None = None,
        transport: str | None = None,
        headers: Mapping[str, str] | None = None,
        pool: str = "",
        endpoint_name: str = "azure",
    ) -> None:
        self.media = media
        # The resource's address; a trailing /openai (as some portals show it) is the API root.
        self.base_url = base_url.rstrip("/").removesuffix("/openai")
        self.api_version = api_version or DEFAULT_AZURE_API_VERSION
        self.deployments = dict(deployments or {})
        token = None if api_key else _entra_token_provider(endpoint_name)
        azure = Azure(self.api_version, self.deployments, token)
        self._setup(api_key, transport, headers, azure, pool)

    @classmethod
    def create(cls, config: RunConfig, media: MediaStore) -> AzureOpenAIProvider:
        """Return the provider for ``config``'s azure endpoint.

        Raises:
            ConfigError: no base URL, the named key is missing, or no key and no azure-identity.
        """
        endpoint = config.endpoint
        if endpoint is None or not endpoint.base_url:
            name = endpoint.name if endpoint is not None else "azure"
            raise ConfigError(
                f"azure endpoint {name!r} needs base_url (https://<resource>.openai.azure.com), "
                "or AZURE_OPENAI_ENDPOINT"
            )
        return cls(
            media=media,
            base_url=endpoint.base_url,
            api_key=endpoint.key(),
            api_version=endpoint.api_version,
            deployments=endpoint.deployments,
            transport=config.openai_transport,
            headers=endpoint.headers,
            pool=endpoint.name,
            endpoint_name=endpoint.name,
        )

    supports_batches: ClassVar[bool] = False

    def batch_api(self) -> None:  # type: ignore[override]
        """Azure's Batch API (its own routes and deployments) is not supported yet: ``None``."""
        return None

    def identity(self) -> Mapping[str, Any]:
        """Return the provider kind, resource, api-version and deployments (never the key)."""
        return {
            "provider": self.name,
            "base_url": self.base_url,
            "api_version": self.api_version,
            "deployments": dict(sorted(self.deployments.items())),
        }


def _entra_token_provider(endpoint: str) -> Callable[[], str]:
    """Return a callable giving Entra ID bearer tokens for Azure OpenAI (cached and refreshed
    by azure-identity).

    Raises:
        ConfigError: azure-identity is not installed.
    """
    try:
        from azure.identity import (  # type: ignore[import-not-found,unused-ignore]
            DefaultAzureCredential,
            get_bearer_token_provider,
        )
    except ImportError:
        raise ConfigError(
            f"azure endpoint {endpoint!r} has no key: set AZURE_OPENAI_API_KEY (or the "
            "endpoint's api_key_env), or pip install 'flownb[azure]' to sign in with Entra ID"
        ) from None
    provider: Callable[[], str] = get_bearer_token_provider(DefaultAzureCredential(), ENTRA_SCOPE)
    return provider


def _forget_sessions_in_child() -> None:
    # A forked child must neither use nor close its parent's sessions (their loop and sockets
    # stay the parent's): they are kept aside unused, and the child's loop opens its own.
    _INHERITED_SESSIONS.append((dict(_SESSIONS), dict(_WATCHES)))
    _SESSIONS.clear()
    _WATCHES.clear()  # the watchers of the parent's loops: never run in the child


_INHERITED_SESSIONS: list[object] = []
os.register_at_fork(after_in_child=_forget_sessions_in_child)
