"""The OpenAI provider: OpenAI itself or any OpenAI-compatible server (Ollama, vLLM, LM Studio,
llama.cpp) through ``OPENAI_BASE_URL``, and Azure OpenAI.

The provider turns a call into a request (:mod:`.request`: what a node's modelParams become),
sends it through a transport (:mod:`.transport`: aiohttp by default, or the ``openai`` SDK) and
reads the answer (:mod:`.answers`: text, usage, rate limits, errors). Image nodes' images are
kept in the media store and returned as ``Generation(media=name)``: a ``b64_json`` answer is
decoded, a URL answer is downloaded once (provider URLs expire within hours; flownb's own media
URL does not), only from allowed places (:mod:`..download`). An image paid for whose bytes
cannot be had is :class:`~flownb.errors.ImageNotFetched`, never bought again.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import AsyncIterator, Callable, Mapping
from types import MappingProxyType
from typing import Any, ClassVar

from ...config.origins import shown
from ...config.settings import DEFAULT_OPENAI_TRANSPORT, RunConfig
from ...errors import ConfigError, ImageNotFetched, ProviderError
from ...infra.media import MediaStore, NotAnImage, image_ext
from ..base import PROMPT_LIMITS, Call, Generation, Kind, RateLimits
from ..download import DownloadFailed, Places, download_image
from ..images import has_images
from ..vendor import HostedProvider
from .answers import (
    _NO_STREAM,
    _answer_text,
    _bad_answer,
    usage_of,
)
from .batch import OpenAIBatches
from .request import (
    MAX_TOKENS_PARAMS,
    Azure,
    Prepared,
    _content_parts,
    _prepare_image,
    _prepare_text,
)
from .stream import ChatChunks
from .transport import TRANSPORTS, _AiohttpTransport, _SdkTransport

__all__ = [
    "DEFAULT_AZURE_API_VERSION",
    "OPENAI_BASE_URL",
    "AzureOpenAIProvider",
    "OpenAIProvider",
]


OPENAI_BASE_URL = "https://api.openai.com/v1"


DEFAULT_AZURE_API_VERSION = "2024-10-21"  # Azure OpenAI's current GA data-plane version


ENTRA_SCOPE = "https://cognitiveservices.azure.com/.default"


class OpenAIProvider(HostedProvider):
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
        media_allow: tuple[str, ...] = (),
        max_tokens_param: str | None = None,
    ) -> None:
        self.media = media
        self.base_url = (base_url or OPENAI_BASE_URL).rstrip("/")
        self.media_allow = media_allow
        key = api_key
        if not key and self.base_url == OPENAI_BASE_URL:
            raise ConfigError(
                "the openai provider needs OPENAI_API_KEY (or OPENAI_BASE_URL pointing at an "
                "OpenAI-compatible server that needs no key)"
            )
        # OpenAI's own API takes the current name; a compatible server (Ollama, llama.cpp, LM
        # Studio) often reads only max_tokens and would ignore the other, so it is theirs.
        official = self.base_url == OPENAI_BASE_URL
        self.max_tokens_param = _token_limit(max_tokens_param, official)
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
        # Where image URLs may be fetched from: public addresses, this endpoint's own origin
        # and what FLOWNB_MEDIA_ALLOW lists.
        self.places = Places.of(self.base_url, getattr(self, "media_allow", ()))
        self.warm_modules = ("openai",) if chosen == "sdk" else ("aiohttp",)
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
                media_allow=config.media_allow,
            )
        return cls(
            media=media,
            api_key=endpoint.key(),
            base_url=endpoint.base_url,
            transport=config.openai_transport,
            headers=endpoint.headers,
            pool=endpoint.name,
            media_allow=config.media_allow,
            max_tokens_param=endpoint.max_tokens_param,
        )

    def __repr__(self) -> str:  # never the key
        return (
            f"<{type(self).__name__} base_url={self.base_url!r} transport={self.transport_name!r}>"
        )

    def banner(self) -> str:
        """Return the line naming the endpoint calls go to."""
        return f"provider: {self.name} at {self.base_url} (transport {self.transport_name})"

    def prepare(self, kind: Kind, params: Mapping[str, Any], node: str = "") -> Prepared:
        """Return the request a node's params map to (:meth:`notes` says what it drops).

        Raises:
            ConfigError: params the API would refuse (best_of on a chat model, n>1 on dall-e-3).
        """
        entry = self._prepared.get(id(params))
        if entry is not None and entry[0] is params and entry[1] == kind:
            return entry[2]
        if kind == "text":
            prepared = _prepare_text(params, node, self.max_tokens_param)
        else:
            prepared = _prepare_image(params, node)
        # Keyed by identity: a node's params object lives as long as its plan.
        self._prepared[id(params)] = (params, kind, prepared)
        return prepared

    def sent_params(self, kind: Kind, params: Mapping[str, Any]) -> dict[str, Any]:
        """Return the request fields a node's params become (dropped ones left out)."""
        return dict(self.prepare(kind, params).body)

    def notes(self, kind: Kind, params: Mapping[str, Any], node: str) -> list[tuple[str, str]]:
        """Return what this node's request drops, one note per node and parameter."""
        return [(f"{node}:{n}", f"node {node!r}: {n}") for n in self.prepare(kind, params).notes]

    def check_params(self, kind: Kind, params: Mapping[str, Any], node: str) -> None:
        """Refuse params the API would reject, at flow load (see :meth:`prepare`).

        Raises:
            ConfigError: naming the node and the parameter.
        """
        self.prepare(kind, params, node)

    def priced_model(self, kind: Kind, params: Mapping[str, Any]) -> str | None:
        """Return the model a node's calls are sent to (an image node's default included)."""
        model = self.prepare(kind, params).body.get("model")
        return str(model) if model else None

    async def generate(self, call: Call) -> Generation:
        """Return one generation: a single attempt (retries are the engine's).

        Raises:
            ProviderError, ProviderTimeout, RateLimited: translated from the transport.
        """
        prepared, body = self.request(call)
        data, request_id, limits, cost = await self._transport.post(prepared.endpoint, body)
        if call.kind == "image":
            gen = await self._image(data, prepared, request_id)
            gen.limits = limits
            gen.usage = usage_of(data.get("usage"))
            # dall-e models are billed per image, by size and quality: what pricing needs.
            body = prepared.body
            gen.priced_as = {k: body[k] for k in ("size", "quality", "n") if k in body}
        else:
            gen = self.text_answer(data, prepared, body, request_id, limits)
        if cost is not None:  # a gateway's own price of this call wins over the table's
            gen.cost = cost
        return gen

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
        gen = self.text_answer(
            chunks.answer(), prepared, body, info.get("request_id"), info.get("limits")
        )
        cost = info.get("cost")
        if cost is not None:  # a gateway's own price of this call wins over the table's
            gen.cost = cost
        yield gen

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
        answer_id = data.get("id")
        return Generation(
            text,
            model=model,
            usage=usage_of(data.get("usage")),
            limits=limits,
            finish_reason=finish,
            response_id=answer_id if isinstance(answer_id, str) else None,
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
        if item.get("url") and not item.get("b64_json"):
            return self._download(str(item["url"]), data, prepared)
        if not item.get("b64_json"):
            raise _bad_answer("an image with neither 'url' nor 'b64_json'", request_id)
        try:
            raw = base64.b64decode(item["b64_json"], validate=True)
        except (binascii.Error, ValueError) as exc:
            raise self._not_fetched(data, prepared, "the answer's b64_json is not base64") from exc
        media = self._keep(raw, "the answer's b64_json", data, prepared)
        return Generation("", media=media, model=model)

    def _download(self, url: str, data: Mapping[str, Any], prepared: Prepared) -> Generation:
        """Return the generation of an image answered as ``url``, its download ``pending``: the
        call runner awaits it once the paid call has ended (see :class:`Generation`)."""
        gen = Generation("", model=prepared.body["model"])

        async def fetch() -> Generation:
            try:
                raw, _ = await download_image(url, self.places)
            except DownloadFailed as exc:
                raise self._not_fetched(data, prepared, exc.why) from None
            gen.media = self._keep(raw, shown(url), data, prepared)
            return gen

        gen.pending = fetch
        return gen

    def _keep(self, raw: bytes, where: str, data: Mapping[str, Any], prepared: Prepared) -> str:
        """Return the media name ``raw`` is stored as, under the extension of what it is.

        Raises:
            ImageNotFetched: ``raw`` is not an image flownb keeps.
        """
        try:
            ext = image_ext(raw)  # the type the bytes are, whatever the request asked for
        except NotAnImage as exc:
            raise self._not_fetched(data, prepared, f"{where} is not kept: {exc}") from None
        name = self.media.name_for(raw, ext)
        if not self.media.exists(name):
            self.media.save(name, raw)
        return name

    def _not_fetched(
        self, data: Mapping[str, Any], prepared: Prepared, why: str
    ) -> ImageNotFetched:
        """Return the error for an image answered (so paid for) whose bytes cannot be kept;
        ``paid`` is the generation as billed, for the run to record its cost."""
        body = prepared.body
        paid = Generation(
            "",
            model=data.get("model") or body["model"],
            usage=usage_of(data.get("usage")),
            priced_as={k: body[k] for k in ("size", "quality", "n") if k in body},
        )
        return ImageNotFetched(
            f"the image was generated and paid for, but could not be fetched: {why}",
            provider=self.name,
            paid=paid,
        )

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
        media_allow: tuple[str, ...] = (),
        max_tokens_param: str | None = None,
    ) -> None:
        self.media = media
        self.media_allow = media_allow
        self.max_tokens_param = _token_limit(max_tokens_param, official=True)
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
            media_allow=config.media_allow,
            max_tokens_param=endpoint.max_tokens_param,
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


def _token_limit(chosen: str | None, official: bool) -> str:
    """Return the name a chat request's token limit is sent under: the endpoint's
    ``max_tokens_param``, else ``max_completion_tokens`` for OpenAI and Azure and ``max_tokens``
    for any other server.

    Raises:
        ConfigError: a name that is neither.
    """
    if chosen is None:
        return MAX_TOKENS_PARAMS[0] if official else MAX_TOKENS_PARAMS[1]
    if chosen not in MAX_TOKENS_PARAMS:
        raise ConfigError(
            f"max_tokens_param must be one of {', '.join(MAX_TOKENS_PARAMS)}, got {chosen!r}"
        )
    return chosen


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
