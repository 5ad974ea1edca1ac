"""What the hosted vendor providers share: where their endpoint and key come from, one SDK
client per event loop, one TLS context for every SDK client (:func:`tls_context`), the notes
on what a request drops or replaces (Anthropic, Gemini), a model's vendor, and for all three
(OpenAI too) the masking of API keys in anything shown (:func:`redact`) and the translation
of an HTTP error answer into flownb's error tree (:func:`status_error`).
"""

from __future__ import annotations

import asyncio
import functools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..config.settings import RunConfig, env_value
from ..error_map import parse_retry_after
from ..errors import ConfigError, ProviderError, ProviderTimeout, RateLimited
from .base import Provider, RateLimits

if TYPE_CHECKING:
    import ssl

__all__ = [
    "OPENAI_MODEL",
    "HostedProvider",
    "Notes",
    "Reach",
    "clients_per_loop",
    "import_quietly",
    "need_extra",
    "no_sdk_spans",
    "raw_uninstrumented",
    "redact",
    "split_version",
    "status_error",
    "tls_context",
    "vendor_of",
    "wait_asked",
]

# Model names of OpenAI's families, as exported flows carry them: a vendor provider replaces
# them with its own default (with a warning) instead of sending a name the vendor refuses.
OPENAI_MODEL = re.compile(r"^(gpt-|chatgpt|o\d|dall-e|text-|davinci|babbage|gpt-image)")
# A model's vendor told by its name (the vendor's own families), whoever serves it.
_FAMILIES = (
    ("OpenAI", OPENAI_MODEL),
    ("Anthropic", re.compile(r"^claude")),
    ("Google", re.compile(r"^(gemini|gemma|imagen)")),
)
# A provider kind's vendor, for a model name no family claims.
_KIND_VENDORS = {
    "openai": "OpenAI",
    "azure": "OpenAI",
    "anthropic": "Anthropic",
    "gemini": "Google",
}
# Anthropic's, OpenAI's and Google's key shapes ("*" too: text already masked stays masked).
_KEY_LIKE = re.compile(r"(sk-ant-|sk-|AIza)[A-Za-z0-9_*\-]{3,}")


def vendor_of(provider: Provider, model: str | None) -> str:
    """Return the vendor of ``model`` as ``provider`` sends it: by the model's family name
    (``gpt-``/``o3`` OpenAI, ``claude`` Anthropic, ``gemini`` Google) wherever it is served,
    else by the provider kind (Azure's is OpenAI), else the provider's name (``offline``, a
    plugin's)."""
    for vendor, family in _FAMILIES:
        if model and family.match(model):
            return vendor
    kind = provider.price_kind or provider.name
    return _KIND_VENDORS.get(kind, kind)


class HostedProvider(Provider):
    """A vendor's provider reached at ``base_url`` (Anthropic, Gemini): its repr, cache identity
    and banner, none of which ever holds the key."""

    base_url: str

    def __repr__(self) -> str:  # never the key
        return f"<{type(self).__name__} base_url={self.base_url!r}>"

    def identity(self) -> Mapping[str, Any]:
        """Return the provider and endpoint (never the key): part of cache keys."""
        return {"provider": self.name, "base_url": self.base_url}

    def banner(self) -> str:
        """Return the line naming where calls go."""
        return f"provider: {self.name} at {self.base_url}"


@dataclass(frozen=True)
class Reach:
    """Where a vendor provider's calls go: base URL (``None``: the SDK's own default), key,
    extra headers. ``repr`` never shows the key."""

    base_url: str | None
    key: str | None
    headers: Mapping[str, str]

    def __repr__(self) -> str:
        return f"Reach(base_url={self.base_url!r}, headers={sorted(self.headers)!r})"

    @classmethod
    def of(cls, config: RunConfig, kind: str, env_key: str | None, env_base: str | None) -> Reach:
        """Return the endpoint in ``config`` (the one this provider was made for), else the
        vendor's environment values (read by :mod:`flownb.config.settings`).

        Raises:
            ConfigError: the endpoint's key variable is unset.
        """
        endpoint = config.endpoint
        if endpoint is not None:
            return cls(endpoint.base_url, endpoint.key(), dict(endpoint.headers or {}))
        return cls(env_base, env_key, {})


def split_version(base_url: str, versions: tuple[str, ...]) -> tuple[str, str | None]:
    """Return ``base_url`` without a trailing API version the SDK adds itself (``/v1``,
    ``/v1beta``), and that version (None when there was none): a base URL written either way
    reaches the same paths."""
    base = base_url.rstrip("/")
    for version in versions:
        if base.endswith("/" + version):
            return base[: -len(version) - 1], version
    return base, None


def redact(text: str, key: str | None) -> str:
    """Return ``text`` with ``key`` and anything shaped like a vendor key masked."""
    if key:
        text = text.replace(key, "***")
    return _KEY_LIKE.sub(lambda m: m.group(1) + "***", text)


# What a vendor provider changes in a node's request: (topic, message) pairs, said once per topic.
Notes = list[tuple[str, str]]


def import_quietly(*modules: str) -> None:
    """Import ``modules`` now, those that exist: what an SDK would import on its first request
    (see :meth:`~flownb.providers.base.Provider.warm`)."""
    import importlib

    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError:
            continue


def clients_per_loop(factory: Callable[[], Any]) -> Callable[[], Any]:
    """Return a getter of one SDK client per running event loop (a client's connection pool
    is bound to the loop that opened it)."""
    clients: dict[asyncio.AbstractEventLoop, Any] = {}

    def get() -> Any:
        loop = asyncio.get_running_loop()
        client = clients.get(loop)
        if client is None:
            client = clients[loop] = factory()
        return client

    get.clients = clients  # type: ignore[attr-defined]  # for aclose
    return get


def wait_asked(headers: Mapping[str, str]) -> float | None:
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


def status_error(
    vendor: str,
    status: int,
    message: str,
    headers: Mapping[str, str] | None,
    key: str | None,
    *,
    request_id_header: str,
    quota_exhausted: bool = False,
    limits: RateLimits | None = None,
    url: str | None = None,
) -> ProviderError:
    """Return the flownb error for a vendor's HTTP error answer: 429 is :class:`RateLimited`
    (with the wait asked for, see :func:`wait_asked`) unless the account is out of credit,
    408/504 a :class:`ProviderTimeout`, anything else a :class:`ProviderError` keeping the
    status (5xx and 529 "overloaded" are retried by the engine). ``url`` is the address asked
    for, named in a 404's message (a wrong base URL or path); keys are masked throughout."""
    headers = headers or {}
    request_id = headers.get(request_id_header)
    text = f"{vendor} API error {status}: {redact(message or 'no message', key)}"
    if status == 404 and url:
        text += f" (asked for {redact(url, key)}; is the base URL right?)"
    if request_id:
        text += f" (request id {request_id})"
    retry_after = wait_asked(headers)
    if status == 429 and not quota_exhausted:
        return RateLimited(
            text,
            retry_after=retry_after,
            status=status,
            request_id=request_id,
            provider=vendor.lower(),
            rate_limits=limits,
        )
    if status in (408, 504):
        return ProviderTimeout(text, status=status, request_id=request_id, provider=vendor.lower())
    return ProviderError(
        text,
        status=status,
        request_id=request_id,
        provider=vendor.lower(),
        retry_after=retry_after,
    )


def no_sdk_spans(client_class: Any) -> dict[str, Any]:
    """Return the client option turning off a vendor SDK's own OpenTelemetry spans
    (``open_telemetry=False``, as the anthropic SDK takes it; ``{}`` for a client without the
    option): flownb's ``chat`` span already carries each call's usage, and a second span with
    the same tokens would count it twice in a backend that sums them."""
    import inspect

    try:
        accepts = "open_telemetry" in inspect.signature(client_class.__init__).parameters
    except (TypeError, ValueError):
        accepts = False
    return {"open_telemetry": False} if accepts else {}


def raw_uninstrumented(resource: Any, method: str = "create") -> Callable[..., Any]:
    """Return ``resource.with_raw_response.<method>`` (a Stainless SDK resource such as the
    openai SDK's ``client.chat.completions`` or the anthropic SDK's ``client.messages``) calling
    the SDK's own method, without the wrapper an OpenTelemetry instrumentation put around it
    (``opentelemetry-instrumentation-openai-v2``, OpenLLMetry's, ...: each wraps the SDK's
    classes with wrapt, and some ignore OpenTelemetry's suppression key). flownb's ``chat`` span
    is the GenAI span of each call it makes: a second one would count the same tokens twice in
    a trace, and a wrapper that reads the raw answer returns a stream in its own type."""
    import inspect
    import sys

    wrapt = sys.modules.get("wrapt")  # not imported: nothing was wrapped with it
    found = inspect.getattr_static(type(resource), method, None)
    inner = found
    while wrapt is not None and isinstance(inner, wrapt.FunctionWrapper):
        inner = getattr(inner, "__wrapped__", None)
    if inner is found or inner is None:  # not instrumented: the SDK's own path
        return getattr(resource.with_raw_response, method)
    import copy

    # A copy of the resource whose method is the SDK's own, bound to it: with_raw_response (a
    # cached property, dropped from the copy) then wraps that one.
    bare = copy.copy(resource)
    vars(bare).pop("with_raw_response", None)
    setattr(bare, method, inner.__get__(bare, type(bare)))
    return getattr(bare.with_raw_response, method)


def tls_context() -> ssl.SSLContext:
    """Return the TLS context every vendor SDK's HTTP client is given (``verify=`` for httpx,
    ``ssl=`` for aiohttp): httpx's default one (certifi's certificates, or ``SSL_CERT_FILE`` /
    ``SSL_CERT_DIR`` when set), made once per process and setting of those two. Left to
    themselves, the SDKs make one for every client, loading the certificates each time: about
    50 ms of CPU for an OpenAI or Anthropic client and 80 for a Gemini one (three contexts),
    paid by every flow loaded and every event loop it runs on."""
    return _tls_context(env_value("SSL_CERT_FILE"), env_value("SSL_CERT_DIR"))


@functools.lru_cache(maxsize=4)
def _tls_context(cert_file: str | None, cert_dir: str | None) -> ssl.SSLContext:
    # The variables are the cache's key: httpx reads them itself.
    import httpx

    return httpx.create_ssl_context()


def need_extra(vendor: str, package: str, extra: str) -> ConfigError:
    """Return the error for a vendor provider whose SDK is not installed."""
    return ConfigError(
        f"the {vendor} provider needs the {package!r} package: pip install 'flownb[{extra}]'"
    )
