"""The Anthropic provider: Claude models through the official ``anthropic`` SDK
(``pip install 'flownb[anthropic]'``), at api.anthropic.com or ``ANTHROPIC_BASE_URL`` / an
endpoint's ``base_url``, with ``ANTHROPIC_API_KEY`` or the endpoint's key.

What a text node's modelParams become (decided once per node, at flow load):

- ``model``: sent as written; an OpenAI model name (``gpt-4o``, ``o3``, ... as exported flows
  carry) is replaced by :data:`DEFAULT_MODEL`, with a warning;
- ``max_tokens`` (or ``max_completion_tokens``) is sent; Anthropic requires it, so a node
  without one gets :data:`DEFAULT_MAX_TOKENS` (1024);
- the model's rule (:mod:`flownb.providers.model_rules`) decides which sampling knobs go:
  current Claude models take temperature or top_p (both set is refused at load), Opus 4.7+
  none of them (left out, with a warning);
- ``temperature`` (Anthropic takes 0 to 1: a larger value is refused at load), ``top_p``,
  ``top_k``, ``stop`` (as ``stop_sequences``), ``system`` (the system prompt), ``metadata``,
  ``service_tier`` and ``thinking`` are sent;
- the call's system message (``flow.with_system``) is sent as ``system``, for plain, streamed
  and Message Batches calls alike (it wins over a ``system`` param);
- what Claude lacks (``frequency_penalty``, ``presence_penalty``, ``seed``, ``n`` > 1,
  ``best_of``, ...) is dropped, with one warning per flow for each.

Image nodes are refused when the flow is loaded: Claude draws no images.

``flow.run_dataframe(df, batch_api=True)`` sends the calls through Anthropic's Message Batches
instead (half price; see :mod:`flownb.providers.anthropic.batch`).

Anthropic's ``anthropic-ratelimit-*`` headers are read into the generation's rate limits, so
the run's limiter paces before Anthropic refuses, as with OpenAI's headers.

Errors are translated at one boundary (:func:`_translate`): a 429 becomes
:class:`~flownb.errors.RateLimited` with its ``Retry-After``, 529 "overloaded" and 5xx a
retryable :class:`~flownb.errors.ProviderError`, timeouts :class:`~flownb.errors.ProviderTimeout`;
the SDK's own retries are off, so retries, back-off and limits are the engine's, as for OpenAI.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any, ClassVar

from ...config.settings import RunConfig
from ...errors import ConfigError, ProviderError, ProviderTimeout
from ...infra.media import MediaStore
from ..base import Call, Generation, Kind, RateLimits
from ..images import ImagePart, has_images, prompt_parts
from ..model_rules import screen
from ..redirects import httpx_hooks, refused_in
from ..vendor import (
    OPENAI_MODEL,
    HostedProvider,
    Notes,
    Reach,
    clients_per_loop,
    import_quietly,
    need_extra,
    no_sdk_spans,
    raw_uninstrumented,
    redact,
    split_version,
    status_error,
    tls_context,
)
from .batch import AnthropicBatches

__all__ = [
    "ANTHROPIC_BASE_URL",
    "DEFAULT_MAX_TOKENS",
    "DEFAULT_MODEL",
    "AnthropicProvider",
    "rate_limits",
]

ANTHROPIC_BASE_URL = "https://api.anthropic.com"
DEFAULT_MODEL = "claude-sonnet-4-6"
# Anthropic refuses a request without max_tokens; a node that sets none gets this many.
DEFAULT_MAX_TOKENS = 1024
_PASS = frozenset({"top_p", "top_k", "metadata", "service_tier", "thinking", "stop_sequences"})
_LACKS = {
    "frequency_penalty": "Claude has no frequency penalty",
    "presence_penalty": "Claude has no presence penalty",
    "seed": "Claude takes no seed",
    "best_of": "Claude has no best_of",
    "logit_bias": "Claude has no logit_bias",
    "logprobs": "Claude returns no logprobs",
}


def _block(part: str | ImagePart) -> dict[str, Any]:
    """Return one part of a prompt as a Messages content block: text, or an image (its bytes in
    base64, or its http(s) URL)."""
    if isinstance(part, str):
        return {"type": "text", "text": part}
    if part.data is None:
        return {"type": "image", "source": {"type": "url", "url": part.url}}
    source = {"type": "base64", "media_type": part.mime, "data": part.b64()}
    return {"type": "image", "source": source}


def _with_system(body: Mapping[str, Any], call: Call) -> dict[str, Any]:
    """Return ``body`` with the call's system message (``flow.with_system``) as the Messages
    API's ``system``: it wins over a ``system`` in the node's params, as OpenAI's system role
    does, so every vendor of a comparison gets the same instructions."""
    if not call.system:
        return dict(body)
    return {**body, "system": call.system}


def _translate(exc: Exception, key: str | None, base_url: str) -> ProviderError:
    """Return the flownb error for an exception of the SDK (the one place they are mapped)."""
    import anthropic

    refused = refused_in(exc)
    if refused is not None:
        return refused
    if isinstance(exc, anthropic.APIStatusError):
        body = exc.body if isinstance(exc.body, Mapping) else {}
        found = body.get("error")
        err: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
        message = str(err.get("message") or exc.message)
        quota = "credit balance" in message.lower()
        return status_error(
            "Anthropic",
            exc.status_code,
            message,
            exc.response.headers,
            key,
            request_id_header="request-id",
            quota_exhausted=quota,
            limits=rate_limits(exc.response.headers),
        )
    if isinstance(exc, anthropic.APITimeoutError):
        return ProviderTimeout("Anthropic API timed out", provider="anthropic")
    if isinstance(exc, anthropic.APIConnectionError):
        return ProviderError(
            f"could not reach the Anthropic API at {base_url}: {redact(str(exc), key)}",
            provider="anthropic",
        )
    return ProviderError(
        f"Anthropic SDK error: {type(exc).__name__}: {redact(str(exc), key)}",
        provider="anthropic",
    )


class AnthropicProvider(HostedProvider):
    """Text from Claude models (see the module docstring for the parameter mapping).

    Raises:
        ConfigError: the ``anthropic`` package is missing, or no key for api.anthropic.com.
    """

    name: ClassVar[str] = "anthropic"
    supports_images: ClassVar[bool] = False
    supports_vision: ClassVar[bool] = True

    def __init__(
        self,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        headers: Mapping[str, str] | None = None,
        media: MediaStore | None = None,
    ) -> None:
        try:
            import anthropic  # noqa: F401 - imported here: an optional extra
        except ImportError as exc:
            raise need_extra("anthropic", "anthropic", "anthropic") from exc
        # The SDK adds /v1/messages: a base URL given with its /v1 works too.
        self.base_url = split_version(base_url or ANTHROPIC_BASE_URL, ("v1",))[0]
        if not api_key and self.base_url == ANTHROPIC_BASE_URL:
            raise ConfigError(
                "the anthropic provider needs ANTHROPIC_API_KEY (or an endpoint with a key)"
            )
        self._key = api_key
        self.media = media  # where the images a judge shows the model are read from
        self._headers = dict(headers or {})
        # id(params) -> (params, the request fields, what they drop or replace)
        self._prepared: dict[int, tuple[Mapping[str, Any], dict[str, Any], Notes]] = {}
        self._client = clients_per_loop(self._new_client)

    @classmethod
    def create(cls, config: RunConfig, media: MediaStore) -> AnthropicProvider:
        """Return the provider for ``config``'s endpoint, else ``ANTHROPIC_API_KEY`` and
        ``ANTHROPIC_BASE_URL``.

        Raises:
            ConfigError: the SDK is missing, or there is no key for api.anthropic.com.
        """
        v = config.vendors
        reach = Reach.of(config, "anthropic", v.anthropic_api_key, v.anthropic_base_url)
        return cls(api_key=reach.key, base_url=reach.base_url, headers=reach.headers, media=media)

    def warm(self) -> None:
        """Make this event loop's SDK client and load what its first request would load (the
        async backend, the tracing headers); see :meth:`Provider.warm`."""
        self._client()
        import_quietly("anyio._backends._asyncio", "opentelemetry.propagate")

    def _new_client(self) -> Any:
        from anthropic import AsyncAnthropic

        # Keys and URL passed explicitly, so the SDK reads nothing from the environment; a
        # placeholder key for local servers that need none (the SDK insists on one).
        headers = dict(self._headers)
        if self._key:
            # The Messages API's own key header, whichever header this SDK release sends.
            headers.setdefault("x-api-key", self._key)
        from anthropic import DefaultAsyncHttpxClient

        return AsyncAnthropic(
            api_key=self._key or "unused",
            base_url=self.base_url,
            max_retries=0,
            timeout=None,
            default_headers=headers or None,
            **no_sdk_spans(AsyncAnthropic),
            # When each request left and its answer came, for its time at the provider; a
            # redirect to another origin refused (the key and headers stay with theirs).
            http_client=DefaultAsyncHttpxClient(
                event_hooks=httpx_hooks(), timeout=None, verify=tls_context()
            ),
        )

    def prepare(self, params: Mapping[str, Any], node: str = "") -> dict[str, Any]:
        """Return the request fields (all but the prompt) for a node's params.

        Raises:
            ConfigError: a temperature over Anthropic's maximum of 1, or knobs the model
                refuses together (see :mod:`flownb.providers.model_rules`).
        """
        return self._prepare(params, node)[0]

    def _prepare(self, params: Mapping[str, Any], node: str) -> tuple[dict[str, Any], Notes]:
        """Return the request fields for a node's params, and the notes on what they drop or
        replace (worked out once per params object).

        Raises:
            ConfigError: a temperature over Anthropic's maximum of 1.
        """
        entry = self._prepared.get(id(params))
        if entry is not None and entry[0] is params:
            return entry[1], entry[2]
        notes: Notes = []
        p = dict(params)
        model = p.pop("model", None) or DEFAULT_MODEL
        if OPENAI_MODEL.match(model):
            notes.append(
                (
                    f"model:{model}",
                    f"node {node!r}: {model!r} is an OpenAI model; sending {DEFAULT_MODEL!r} "
                    "instead (choose one with flow.with_model)",
                )
            )
            model = DEFAULT_MODEL
        # What this model takes of the sampling knobs (model_rules: one table for every vendor).
        p, left_out = screen(model, p, node)
        if left_out is not None:
            notes.append((f"{node}:knobs", f"node {node!r}: {left_out}"))
        max_tokens = p.pop("max_tokens", None)
        max_tokens = p.pop("max_completion_tokens", max_tokens)
        body: dict[str, Any] = {"model": model, "max_tokens": max_tokens or DEFAULT_MAX_TOKENS}
        temperature = p.pop("temperature", None)
        if temperature is not None:
            if not 0 <= temperature <= 1:
                raise ConfigError(
                    f"node {node!r}: temperature {temperature} is outside Anthropic's 0 to 1"
                )
            body["temperature"] = temperature
        stop = p.pop("stop", None)
        if stop is not None:
            body["stop_sequences"] = [stop] if isinstance(stop, str) else list(stop)
        system = p.pop("system", None)
        if system:
            body["system"] = str(system)
        n = p.pop("n", None)
        if n not in (None, 1):
            notes.append(("n", f"n={n} dropped: Claude gives one answer per request"))
        if p.get("best_of") == 1:
            del p["best_of"]  # the default everywhere: nothing to say
        for name, value in p.items():
            if name in _PASS:
                body[name] = value
            else:
                why = _LACKS.get(name, "not an Anthropic Messages parameter")
                notes.append((name, f"{name} dropped: {why}"))
        self._prepared[id(params)] = (params, body, notes)
        return body, notes

    def sent_params(self, kind: Kind, params: Mapping[str, Any]) -> dict[str, Any]:
        """Return the Messages API fields a node's params become (dropped ones left out,
        ``max_tokens`` as sent)."""
        return dict(self.prepare(params)) if kind == "text" else dict(params)

    def notes(self, kind: Kind, params: Mapping[str, Any], node: str) -> Notes:
        """Return what this node's request drops or replaces (see :meth:`prepare`)."""
        return self._prepare(params, node)[1] if kind == "text" else []

    def priced_model(self, kind: Kind, params: Mapping[str, Any]) -> str | None:
        """Return the model the node's calls are sent to (defaults and replacements applied)."""
        return str(self.prepare(params)["model"])

    def check_params(self, kind: Kind, params: Mapping[str, Any], node: str) -> None:
        """Refuse, at load, params Anthropic would reject (see :meth:`prepare`).

        Raises:
            ConfigError: naming the node and the parameter.
        """
        if kind == "text":
            self.prepare(params, node)

    async def generate(self, call: Call) -> Generation:
        """Return one generation: a single attempt (retries are the engine's).

        Raises:
            ProviderError, ProviderTimeout, RateLimited: translated from the SDK.
        """
        import anthropic

        body = self.prepare(call.params, call.node_id)
        try:
            raw = await self._create(call, body)
            msg = await raw.parse()
        except anthropic.AnthropicError as exc:
            raise _translate(exc, self._key, self.base_url) from exc
        text = "".join(getattr(block, "text", "") for block in msg.content if block.type == "text")
        return Generation(
            text,
            model=msg.model or body["model"],
            usage=_usage(msg.usage),
            limits=rate_limits(raw.headers),
            finish_reason=finish_reason(getattr(msg, "stop_reason", None)),
            response_id=getattr(msg, "id", None),
        )

    async def _create(self, call: Call, body: Mapping[str, Any], **extra: Any) -> Any:
        """Post ``call`` (its params prepared as ``body``) to the Messages API; return the SDK's
        raw response (``extra``: ``stream=True`` for a streamed answer)."""
        rest = {
            k: v for k, v in _with_system(body, call).items() if k not in ("model", "max_tokens")
        }
        # Sampling fields go as extra_body: SDK releases differ in which they take as keywords
        # (newer ones dropped temperature/top_p/top_k), the API takes them all.
        # with_raw_response: the same call, with the answer's rate-limit headers kept; the
        # SDK's own method, without an instrumentation's span (flownb's counts the call).
        return await raw_uninstrumented(self._client().messages)(
            model=body["model"],
            max_tokens=body["max_tokens"],
            messages=self._messages(call),
            extra_body=rest or None,
            **extra,
        )

    def params_for(self, call: Call) -> dict[str, Any]:
        """Return the Messages API request for ``call``, as :meth:`generate` posts it: what a
        Message Batches request's ``params`` hold, so a batch answer fills the same cache entry.

        Raises:
            ConfigError: the node's params are refused (see :meth:`prepare`).
        """
        body = self.prepare(call.params, call.node_id)
        return {**_with_system(body, call), "messages": self._messages(call)}

    def _messages(self, call: Call) -> list[dict[str, Any]]:
        """Return the Messages API ``messages`` for ``call``: its prompt, with the images a
        judge shows the model as image blocks (live and batched requests alike)."""
        content: Any = call.prompt
        if has_images(call.prompt):
            content = [_block(part) for part in prompt_parts(call.prompt, self.media)]
        return [{"role": "user", "content": content}]

    def generation_of(self, msg: Any) -> Generation:
        """Return the generation a Messages API answer (the SDK's ``Message``) holds, as
        :meth:`generate` reads it (a batch's answers come without rate-limit headers)."""
        text = "".join(getattr(block, "text", "") for block in msg.content if block.type == "text")
        return Generation(
            text,
            model=msg.model,
            usage=_usage(msg.usage),
            finish_reason=finish_reason(getattr(msg, "stop_reason", None)),
            response_id=getattr(msg, "id", None),
        )

    supports_batches: ClassVar[bool] = True

    def batch_api(self) -> AnthropicBatches:
        """Return this endpoint's Message Batches API (half price, results within 24 hours).

        Raises:
            ConfigError: the installed ``anthropic`` SDK predates Message Batches.
        """
        return AnthropicBatches(self, self._key, self._headers)

    def translate(self, exc: Exception) -> ProviderError:
        """Return the flownb error for an exception of the SDK (keys redacted)."""
        return _translate(exc, self._key, self.base_url)

    async def stream(self, call: Call) -> AsyncIterator[str | Generation]:
        """Yield the answer's text as Claude streams it (``stream: true``: text deltas), then
        the generation :meth:`generate` would return (model, usage from the ``message_start``
        and ``message_delta`` events, rate limits from the headers).

        Raises:
            ProviderError, ProviderTimeout, RateLimited: translated from the SDK.
        """
        import anthropic

        body = self.prepare(call.params, call.node_id)
        text: list[str] = []
        model = body["model"]
        usage: dict[str, Any] = {}
        stop: str | None = None
        answer_id: str | None = None
        try:
            raw = await self._create(call, body, stream=True)
            async for event in await raw.parse():
                kind = event.type
                if kind == "content_block_delta" and event.delta.type == "text_delta":
                    text.append(event.delta.text)
                    yield event.delta.text
                elif kind == "message_start":
                    model = event.message.model or model
                    answer_id = getattr(event.message, "id", None)
                    usage.update(_fields(event.message.usage))
                elif kind == "message_delta":
                    stop = getattr(event.delta, "stop_reason", None) or stop
                    if event.usage is not None:
                        # Cumulative counts: what it says replaces what message_start said.
                        usage.update(_fields(event.usage))
        except anthropic.AnthropicError as exc:
            raise _translate(exc, self._key, self.base_url) from exc
        yield Generation(
            "".join(text),
            model=model,
            usage=_usage(SimpleNamespace(**usage)) if usage else None,
            limits=rate_limits(raw.headers),
            finish_reason=finish_reason(stop),
            response_id=answer_id,
        )

    async def aclose(self) -> None:
        """Close the clients of this provider (one per event loop it ran on)."""
        import asyncio

        loop = asyncio.get_running_loop()
        client = self._client.clients.pop(loop, None)  # type: ignore[attr-defined]
        if client is not None:
            await client.close()


# Anthropic's stop_reason -> OpenAI's finish_reason words, which flownb speaks (a text cut at the
# token limit is "length": kept, flagged and warned about).
_STOPS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}


def finish_reason(stop: str | None) -> str | None:
    """Return flownb's finish_reason for Anthropic's ``stop_reason`` (None when none was said;
    an unknown one as it is)."""
    return _STOPS.get(stop, stop) if stop else None


def _seconds_until(stamp: str | None) -> float | None:
    """Return seconds from now until an RFC 3339 time (Anthropic's ``*-reset`` headers)."""
    if not stamp:
        return None
    try:
        when = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def rate_limits(headers: Mapping[str, str]) -> RateLimits | None:
    """Return what Anthropic's ``anthropic-ratelimit-*`` headers say, for the run's limiter
    (as OpenAI's ``x-ratelimit-*`` are read), or None when there are none."""
    get = headers.get
    requests = get("anthropic-ratelimit-requests-remaining")
    tokens = get("anthropic-ratelimit-tokens-remaining")
    if requests is None and tokens is None:
        return None
    return RateLimits(
        remaining_requests=_int(requests),
        reset_requests=_seconds_until(get("anthropic-ratelimit-requests-reset")),
        limit_requests=_int(get("anthropic-ratelimit-requests-limit")),
        remaining_tokens=_int(tokens),
        reset_tokens=_seconds_until(get("anthropic-ratelimit-tokens-reset")),
        limit_tokens=_int(get("anthropic-ratelimit-tokens-limit")),
    )


def _fields(usage: Any) -> dict[str, Any]:
    """Return the token counts an event's usage states (``None`` ones left out)."""
    names = (
        "input_tokens",
        "output_tokens",
        "cache_read_input_tokens",
        "cache_creation_input_tokens",
    )
    found = {name: getattr(usage, name, None) for name in names}
    return {name: value for name, value in found.items() if value is not None}


def _usage(usage: Any) -> dict[str, int] | None:
    """Return flownb's usage form of Anthropic's: ``prompt_tokens`` counts every input token
    (fresh, cache reads, cache writes: Anthropic reports them apart), as OpenAI's does."""
    if usage is None:
        return None
    fresh = int(getattr(usage, "input_tokens", 0) or 0)
    read = int(getattr(usage, "cache_read_input_tokens", 0) or 0)
    written = int(getattr(usage, "cache_creation_input_tokens", 0) or 0)
    out = int(getattr(usage, "output_tokens", 0) or 0)
    found = {
        "prompt_tokens": fresh + read + written,
        "completion_tokens": out,
        "total_tokens": fresh + read + written + out,
    }
    if read:
        found["cached_tokens"] = read
    if written:
        found["cache_write_tokens"] = written
    return found
