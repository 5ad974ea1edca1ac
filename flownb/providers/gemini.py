"""The Gemini provider: Google's Gemini API through the official ``google-genai`` SDK
(``pip install 'flownb[gemini]'``), at generativelanguage.googleapis.com or ``GEMINI_BASE_URL``
/ an endpoint's ``base_url``, with ``GEMINI_API_KEY`` (else ``GOOGLE_API_KEY``) or the
endpoint's key.

What a node's modelParams become (decided once per node, at flow load):

- text nodes call ``generateContent``; ``model`` is sent as written, and an OpenAI model name
  (as exported flows carry) is replaced by :data:`DEFAULT_MODEL` with a warning;
- ``temperature``, ``top_p``, ``top_k``, ``max_tokens`` (as ``maxOutputTokens``), ``stop``
  (``stopSequences``), ``seed``, ``presence_penalty``, ``frequency_penalty`` and ``system``
  (the system instruction) are sent, as the model's rule allows
  (:mod:`flownb.providers.model_rules`: Gemini 2.5+ refuses a non-zero penalty, at load);
  ``n`` > 1 asks for that many candidates and the first
  becomes the output; what Gemini lacks (``best_of``, ``logit_bias``, ...) is dropped with one
  warning per flow for each; the call's system message (``flow.with_system``) is sent as
  ``system_instruction``, plain and streamed (it wins over a ``system`` param);
- image nodes call a Gemini image model (:data:`DEFAULT_IMAGE_MODEL`; ``generateContent``
  answering an image, priced by its tokens); the image is kept in the media store. Imagen
  models (``imagen-*``) are refused at load: the Gemini API no longer serves them (Vertex AI
  does).

Errors are translated at one boundary (:func:`_translate`): 429 ``RESOURCE_EXHAUSTED`` becomes
:class:`~flownb.errors.RateLimited` with the wait Google gives (``Retry-After``, or the
``RetryInfo`` detail's ``retryDelay``), 5xx a retryable :class:`~flownb.errors.ProviderError`.
The SDK's own retries are off: retries, back-off and limits are the engine's, as for OpenAI.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Mapping
from typing import Any, ClassVar

from ..config.settings import RunConfig
from ..errors import ConfigError, ImageNotFetched, ProviderError, ProviderTimeout
from ..infra.media import MediaStore, NotAnImage, image_ext
from .base import Call, Generation, Kind
from .images import ImagePart, has_images, prompt_parts
from .model_rules import screen
from .openai.transport import _close_with_loop
from .redirects import aiohttp_trace
from .vendor import (
    OPENAI_MODEL,
    HostedProvider,
    Notes,
    Reach,
    clients_per_loop,
    import_quietly,
    need_extra,
    redact,
    split_version,
    status_error,
    tls_context,
)

__all__ = ["DEFAULT_IMAGE_MODEL", "DEFAULT_MODEL", "GEMINI_BASE_URL", "GeminiProvider"]

GEMINI_BASE_URL = "https://generativelanguage.googleapis.com"
DEFAULT_MODEL = "gemini-2.5-flash"
DEFAULT_IMAGE_MODEL = "gemini-2.5-flash-image"
# modelParams name -> GenerateContentConfig field.
_TEXT = {
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "max_tokens": "max_output_tokens",
    "max_completion_tokens": "max_output_tokens",
    "seed": "seed",
    "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
    "n": "candidate_count",
    "response_mime_type": "response_mime_type",
}
_DELAY = re.compile(r"^\s*(\d+(?:\.\d*)?)s\s*$")


def _retry_delay(details: Any) -> str | None:
    """Return the seconds of a google.rpc.RetryInfo in an error body, as text, or None."""
    err = details.get("error", details) if isinstance(details, Mapping) else None
    items = err.get("details") if isinstance(err, Mapping) else None
    for item in items if isinstance(items, list) else []:
        if isinstance(item, Mapping) and "retryDelay" in item:
            match = _DELAY.match(str(item["retryDelay"]))
            if match:
                return match.group(1)
    return None


def _translate(exc: BaseException, key: str | None, base_url: str) -> ProviderError:
    """Return the flownb error for an exception of the SDK or its HTTP library (the one place
    they are mapped)."""
    from google.genai import errors

    if isinstance(exc, errors.APIError):
        response = getattr(exc, "response", None)
        headers = dict(getattr(response, "headers", None) or {})
        headers = {k.lower(): v for k, v in headers.items()}
        if "retry-after" not in headers:
            delay = _retry_delay(exc.details)
            if delay is not None:
                headers["retry-after"] = delay
        return status_error(
            "Gemini",
            int(exc.code or 0),
            str(exc.message or exc.status or ""),
            headers,
            key,
            request_id_header="x-request-id",
        )
    if isinstance(exc, TimeoutError):
        return ProviderTimeout("Gemini API timed out", provider="gemini")
    return ProviderError(
        f"could not reach the Gemini API at {base_url}: {type(exc).__name__}: "
        f"{redact(str(exc), key)}",
        provider="gemini",
    )


def _transport_errors() -> tuple[type[BaseException], ...]:
    import aiohttp
    import httpx
    from google.genai import errors

    return (errors.APIError, aiohttp.ClientError, httpx.TransportError, TimeoutError)


class GeminiProvider(HostedProvider):
    """Text and images from Gemini (see the module docstring for the parameter mapping).

    Raises:
        ConfigError: ``google-genai`` is missing, or no key for Google's endpoint.
    """

    name: ClassVar[str] = "gemini"
    supports_images: ClassVar[bool] = True
    supports_vision: ClassVar[bool] = True

    def __init__(
        self,
        *,
        media: MediaStore,
        api_key: str | None = None,
        base_url: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        try:
            from google import genai  # noqa: F401 - imported here: an optional extra
        except ImportError as exc:
            raise need_extra("gemini", "google-genai", "gemini") from exc
        self.media = media
        # The SDK adds /{api_version}/models/...: a base URL given with its version keeps it.
        self.base_url, version = split_version(base_url or GEMINI_BASE_URL, ("v1beta", "v1"))
        self.api_version = version or "v1beta"
        if not api_key and self.base_url == GEMINI_BASE_URL:
            raise ConfigError(
                "the gemini provider needs GEMINI_API_KEY or GOOGLE_API_KEY (or an endpoint "
                "with a key)"
            )
        self._key = api_key
        self._headers = dict(headers or {})
        # id(params) -> (params, kind, the request, what it drops or replaces)
        self._prepared: dict[int, tuple[Mapping[str, Any], Kind, dict[str, Any], Notes]] = {}
        self._client = clients_per_loop(self._new_client)
        self._sessions: dict[Any, Any] = {}  # event loop -> the aiohttp session its client uses
        self._watching: set[Any] = set()  # the tasks tying each session's end to its loop's
        self._errors: tuple[type[BaseException], ...] | None = None

    @classmethod
    def create(cls, config: RunConfig, media: MediaStore) -> GeminiProvider:
        """Return the provider for ``config``'s endpoint, else ``GEMINI_API_KEY`` /
        ``GOOGLE_API_KEY`` and ``GEMINI_BASE_URL``.

        Raises:
            ConfigError: the SDK is missing, or there is no key for Google's endpoint.
        """
        v = config.vendors
        reach = Reach.of(config, "gemini", v.gemini_api_key, v.gemini_base_url)
        return cls(media=media, api_key=reach.key, base_url=reach.base_url, headers=reach.headers)

    def warm(self) -> None:
        """Make this event loop's SDK client and build the answer's models the SDK builds on
        first use (a fifth of a second); see :meth:`Provider.warm`."""
        from google.genai import types

        self._client()
        import_quietly("anyio._backends._asyncio")
        types.GenerateContentResponse.model_validate({})

    def _new_client(self) -> Any:
        import asyncio

        import aiohttp
        from google import genai
        from google.genai import types

        # Our own aiohttp session, made as the SDK makes its own (it uses aiohttp when it is
        # installed; lines of a streamed answer up to 4 MiB), refusing a redirect to another
        # origin: aiohttp would forward x-goog-api-key and the endpoint's headers there. The
        # SDK leaves a session it was given alone: closed by aclose, or as its loop shuts down.
        session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0),
            trust_env=True,
            read_bufsize=2**22,
            trace_configs=[aiohttp_trace()],
        )
        loop = asyncio.get_running_loop()
        self._sessions[loop] = session
        watch = loop.create_task(_close_with_loop(self._sessions, loop, session.close))
        self._watching.add(watch)
        watch.add_done_callback(self._watching.discard)

        # Everything explicit, so the SDK reads nothing from the environment; one attempt per
        # call (retry_options with one attempt also stops the SDK's own hidden retries of
        # dropped connections); a placeholder key for local servers that need none.
        tls = tls_context()
        options = types.HttpOptions(
            base_url=self.base_url + "/",
            api_version=self.api_version,
            headers=self._headers or None,
            retry_options=types.HttpRetryOptions(attempts=1),
            aiohttp_client=session,
            # The process's one TLS context (the SDK would load the certificates into three
            # new ones for every client): httpx's clients take it as verify, aiohttp's as ssl.
            client_args={"verify": tls},
            async_client_args={"verify": tls, "ssl": tls},
        )
        # vertexai=False: GOOGLE_GENAI_USE_VERTEXAI in the environment must not reroute calls.
        return genai.Client(api_key=self._key or "unused", vertexai=False, http_options=options)

    def prepare(self, kind: Kind, params: Mapping[str, Any], node: str = "") -> dict[str, Any]:
        """Return ``{"model": ..., "config": {...}}`` for a node's params (the SDK's config
        fields); :meth:`notes` says what they drop or replace.

        Raises:
            ConfigError: an Imagen model (the Gemini API does not serve them), or a knob the
                model refuses (see :mod:`flownb.providers.model_rules`).
        """
        return self._prepare(kind, params, node)[0]

    def _prepare(
        self, kind: Kind, params: Mapping[str, Any], node: str
    ) -> tuple[dict[str, Any], Notes]:
        """Return the request for a node's params and the notes on what it drops or replaces
        (worked out once per params object and kind).

        Raises:
            ConfigError: an Imagen model (the Gemini API does not serve them).
        """
        entry = self._prepared.get(id(params))
        if entry is not None and entry[0] is params and entry[1] == kind:
            return entry[2], entry[3]
        notes: Notes = []
        p = dict(params)
        default = DEFAULT_MODEL if kind == "text" else DEFAULT_IMAGE_MODEL
        model = p.pop("model", None) or default
        if OPENAI_MODEL.match(model):
            notes.append(
                (
                    f"model:{model}",
                    f"node {node!r}: {model!r} is an OpenAI model; sending {default!r} instead "
                    "(choose one with flow.with_model)",
                )
            )
            model = default
        if model.startswith("imagen"):
            raise ConfigError(
                f"node {node!r}: Imagen ({model!r}) is not served by the Gemini API; use a Gemini "
                f"image model such as {DEFAULT_IMAGE_MODEL!r}"
            )
        # What this model takes of the sampling knobs (model_rules: one table for every vendor).
        p, left_out = screen(model, p, node)
        if left_out is not None:
            notes.append((f"{node}:knobs", f"node {node!r}: {left_out}"))
        config: dict[str, Any] = {}
        system = p.pop("system", None)
        if system:
            config["system_instruction"] = str(system)
        if p.get("best_of") == 1:
            del p["best_of"]  # the default everywhere: nothing to say
        stop = p.pop("stop", None)
        if stop is not None:
            config["stop_sequences"] = [stop] if isinstance(stop, str) else list(stop)
        for name, value in p.items():
            field = _TEXT.get(name)
            if field is not None:
                config[field] = value
            else:
                notes.append((name, f"{name} dropped: not a Gemini parameter flownb sends"))
        if kind == "image":
            config["response_modalities"] = ["IMAGE"]
        prepared = {"model": model, "config": config}
        self._prepared[id(params)] = (params, kind, prepared, notes)
        return prepared, notes

    def sent_params(self, kind: Kind, params: Mapping[str, Any]) -> dict[str, Any]:
        """Return the model and the GenerateContentConfig fields a node's params become
        (dropped ones left out)."""
        prepared = self.prepare(kind, params)
        return {"model": prepared["model"], **prepared["config"]}

    def notes(self, kind: Kind, params: Mapping[str, Any], node: str) -> Notes:
        """Return what this node's request drops or replaces (see :meth:`prepare`)."""
        return self._prepare(kind, params, node)[1]

    def priced_model(self, kind: Kind, params: Mapping[str, Any]) -> str | None:
        """Return the model the node's calls are sent to (defaults and replacements applied)."""
        return str(self.prepare(kind, params)["model"])

    def check_params(self, kind: Kind, params: Mapping[str, Any], node: str) -> None:
        """Work out each node's request at load, so warnings come before anything runs.

        Raises:
            ConfigError: an Imagen model (see :meth:`prepare`).
        """
        self.prepare(kind, params, node)

    async def generate(self, call: Call) -> Generation:
        """Return one generation: a single attempt (retries are the engine's).

        Raises:
            ProviderError, ProviderTimeout, RateLimited: translated from the SDK.
        """
        if self._errors is None:
            self._errors = _transport_errors()
        prepared = self.prepare(call.kind, call.params, call.node_id)
        models = self._client().aio.models
        try:
            resp = await models.generate_content(
                model=prepared["model"],
                contents=self._contents(call),
                config=_with_system(prepared["config"], call),
            )
        except self._errors as exc:
            raise _translate(exc, self._key, self.base_url) from exc
        model = resp.model_version or prepared["model"]
        usage = _usage(resp.usage_metadata)
        if call.kind == "image":
            return self._image_part(resp, model, usage)
        try:
            text = resp.text or ""
        except ValueError as exc:  # several candidates mixed with non-text parts
            raise ProviderError(f"Gemini answered no text: {exc}", provider="gemini") from exc
        return Generation(
            text,
            model=model,
            usage=usage,
            finish_reason=finish_reason(resp),
            response_id=getattr(resp, "response_id", None),
        )

    def _contents(self, call: Call) -> Any:
        """Return the request's ``contents`` for ``call``: its prompt, with the images a judge
        shows the model as parts (plain and streamed requests alike)."""
        if call.kind == "text" and has_images(call.prompt):
            return [_part(part) for part in prompt_parts(call.prompt, self.media)]
        return call.prompt

    async def stream(self, call: Call) -> AsyncIterator[str | Generation]:
        """Yield a text answer as Gemini streams it (``streamGenerateContent``), then the
        generation :meth:`generate` would return (the usage and model of the last chunk that
        states them); an image comes in one piece.

        Raises:
            ProviderError, ProviderTimeout, RateLimited: translated from the SDK.
        """
        if call.kind != "text":
            async for piece in super().stream(call):
                yield piece
            return
        if self._errors is None:
            self._errors = _transport_errors()
        prepared = self.prepare(call.kind, call.params, call.node_id)
        models = self._client().aio.models
        text: list[str] = []
        model = prepared["model"]
        meta = None
        finish: str | None = None
        answer_id: str | None = None
        try:
            chunks = await models.generate_content_stream(
                model=prepared["model"],
                contents=self._contents(call),
                config=_with_system(prepared["config"], call),
            )
            async for chunk in chunks:
                model = chunk.model_version or model
                meta = chunk.usage_metadata or meta
                finish = finish_reason(chunk) or finish
                answer_id = getattr(chunk, "response_id", None) or answer_id
                try:
                    piece = chunk.text or ""
                except ValueError as exc:  # several candidates mixed with non-text parts
                    raise ProviderError(
                        f"Gemini answered no text: {exc}", provider="gemini"
                    ) from exc
                if piece:
                    text.append(piece)
                    yield piece
        except self._errors as exc:
            raise _translate(exc, self._key, self.base_url) from exc
        yield Generation(
            "".join(text),
            model=model,
            usage=_usage(meta),
            finish_reason=finish,
            response_id=answer_id,
        )

    def _image_part(self, resp: Any, model: str, usage: dict[str, int] | None) -> Generation:
        for cand in resp.candidates or []:
            for part in (cand.content.parts if cand.content else None) or []:
                blob = part.inline_data
                if blob is not None and blob.data:
                    try:
                        # The type the bytes are, whatever mime_type the answer says.
                        ext = image_ext(blob.data)
                    except NotAnImage as exc:
                        raise ImageNotFetched(
                            f"the image was generated and paid for, but is not kept: {exc}",
                            provider=self.name,
                            paid=Generation("", model=model, usage=usage),
                        ) from None
                    name = self.media.name_for(blob.data, ext)
                    if not self.media.exists(name):
                        self.media.save(name, blob.data)
                    return Generation("", media=name, model=model, usage=usage)
        raise ProviderError(
            f"Gemini model {model!r} answered without an image", status=200, provider="gemini"
        )

    async def aclose(self) -> None:
        """Close the client of the running event loop."""
        import asyncio

        loop = asyncio.get_running_loop()
        client = self._client.clients.pop(loop, None)  # type: ignore[attr-defined]
        if client is not None:
            await client.aio.aclose()
        session = self._sessions.pop(loop, None)
        if session is not None:
            await session.close()


# Gemini's FinishReason -> OpenAI's finish_reason words, which flownb speaks (a text cut at the
# token limit is "length": kept, flagged and warned about).
_FINISHES = {
    "STOP": "stop",
    "MAX_TOKENS": "length",
    "SAFETY": "content_filter",
    "RECITATION": "content_filter",
    "BLOCKLIST": "content_filter",
    "PROHIBITED_CONTENT": "content_filter",
    "SPII": "content_filter",
    "IMAGE_SAFETY": "content_filter",
}


def finish_reason(resp: Any) -> str | None:
    """Return flownb's finish_reason for a Gemini answer (or stream chunk): its first
    candidate's ``finish_reason``, None when it states none."""
    candidates = getattr(resp, "candidates", None) or []
    reason = getattr(candidates[0], "finish_reason", None) if candidates else None
    if reason is None:
        return None
    name = str(getattr(reason, "name", reason))
    if name == "FINISH_REASON_UNSPECIFIED":
        return None
    return _FINISHES.get(name, name.lower())


def _with_system(config: Mapping[str, Any], call: Call) -> dict[str, Any]:
    """Return the request's config with the call's system message (``flow.with_system``) as
    Gemini's ``system_instruction``: it wins over a ``system`` in the node's params, as OpenAI's
    system role does, so every vendor of a comparison gets the same instructions."""
    if not call.system:
        return dict(config)
    return {**config, "system_instruction": call.system}


def _part(part: str | ImagePart) -> Any:
    """Return one part of a prompt as a Gemini ``Part``: text, the image's bytes (sent inline,
    base64 on the wire), or its http(s) URL."""
    from google.genai import types

    if isinstance(part, str):
        return types.Part.from_text(text=part)
    if part.data is None:
        return types.Part.from_uri(file_uri=part.url or "", mime_type=part.mime)
    return types.Part.from_bytes(data=part.data, mime_type=part.mime)


def _usage(meta: Any) -> dict[str, int] | None:
    """Return flownb's usage form of Gemini's ``usageMetadata``: thinking tokens are billed as
    output, so ``completion_tokens`` counts them (as OpenAI's counts reasoning tokens)."""
    if meta is None:
        return None
    prompt = int(meta.prompt_token_count or 0)
    answer = int(meta.candidates_token_count or 0)
    thoughts = int(meta.thoughts_token_count or 0)
    cached = int(meta.cached_content_token_count or 0)
    found = {
        "prompt_tokens": prompt,
        "completion_tokens": answer + thoughts,
        "total_tokens": int(meta.total_token_count or prompt + answer + thoughts),
    }
    if thoughts:
        found["reasoning_tokens"] = thoughts
    if cached:
        found["cached_tokens"] = cached
    return found
