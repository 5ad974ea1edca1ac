"""How OpenAI requests travel: a lean aiohttp path by default (about a tenth of the SDK's CPU
per call, which is what bounds throughput against fast local servers at high concurrency), or
the official ``openai`` SDK's ``AsyncOpenAI`` (``transport="sdk"`` /
``FLOWNB_OPENAI_TRANSPORT=sdk``). Either way one call is one attempt: retries, backoff and the
concurrency limit belong to the engine, so they work the same for every provider.

Each transport posts a body and returns the decoded answer with its request id and rate limits,
and streams chat chunks; a redirect to another origin is refused (:mod:`..redirects`). A
generated image's URL is downloaded by :mod:`..download`, never with the key. Errors are
translated at this boundary (answers with
:func:`~flownb.providers.openai.answers._translate_status`, failed connections with
:func:`_connection_failed`). Azure's differences (deployment URLs, ``api-key``, Entra ID tokens)
are an :class:`~flownb.providers.openai.request.Azure` handed to either transport.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import errno
import functools
import ipaddress
import json
import os
import socket
import ssl
import urllib.parse
import urllib.request
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import orjson

from ...errors import ProviderError, ProviderTimeout
from ..base import RateLimits
from ..redirects import REDIRECTS, aiohttp_middleware, check_redirect, httpx_hooks, refused_in
from ..vendor import raw_uninstrumented, redact, tls_context
from ..wire import mark_answered, mark_sent
from .answers import (
    _as_chunk,
    _chunk_of,
    _first_line,
    _not_json,
    _translate_status,
    gateway_cost,
    rate_limits,
)
from .request import (
    Azure,
)
from .stream import sse_data

__all__ = ["TRANSPORTS", "UNREACHABLE"]


TRANSPORTS = ("aiohttp", "sdk")


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
            f"could not reach the OpenAI API at {base_url}: {redact(why, key)} (check "
            "OPENAI_BASE_URL)",
            provider="openai",
            code=UNREACHABLE,
        )
    detail = next(
        (str(c) for c in reversed(_causes(exc)) if str(c)), type(exc).__name__
    )  # the innermost cause says most ("Connection error." says nothing)
    return ProviderError(
        f"could not reach the OpenAI API at {base_url}: {type(exc).__name__}: "
        f"{redact(_first_line(detail), key)}",
        provider="openai",
    )


def _encoded(body: Mapping[str, Any]) -> bytes:
    """Return a request's JSON body: orjson's (a few times json's speed, a tenth of a call's
    CPU), else json's where the two differ. orjson writes NaN and infinities as null, so a body
    with a null anywhere (rare: a request's fields are set, not null) is json's, whose NaN the
    server refuses as it always did; what orjson refuses (a lone surrogate) json encodes."""
    try:
        data = orjson.dumps(body)
    except TypeError:  # orjson.JSONEncodeError
        return json.dumps(body).encode()
    return json.dumps(body).encode() if b"null" in data else data


# 19 digits in a row or more: maybe an integer past 64 bits, which orjson reads as a float.
# Looked for by mapping every digit to "0" and every other byte to a space, then searching
# for 19 zeros: two passes in C, where a regex tries a match at every digit of every answer
# (several times orjson's own decoding of a chat answer).
_DIGITS_ONLY = bytes(0x30 if 0x30 <= b <= 0x39 else 0x20 for b in range(256))
_LONG_NUMBER = b"0" * 19


def _has_long_number(raw: bytes) -> bool:
    """Return whether ``raw`` holds 19 ASCII digits or more in a row."""
    return _LONG_NUMBER in raw.translate(_DIGITS_ONLY)


def _decoded(raw: bytes) -> Any:
    """Return an answer's decoded JSON: orjson's, else json's (which reads what orjson refuses,
    NaN or a lone surrogate, and keeps an integer past 64 bits exact).

    Raises:
        ValueError: it is not JSON.
    """
    if not _has_long_number(raw):
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass
    return json.loads(raw)


@functools.cache
def _wire_connector() -> Any:
    """Return the aiohttp connector class that marks a request sent (:func:`mark_sent`) as its
    connection is handed over, a new one connected or a pooled one taken, the moment before its
    headers are written; aiohttp's trace hooks say the same at about 8% of a call's CPU."""
    import aiohttp

    class WireConnector(aiohttp.TCPConnector):
        async def connect(self, req: Any, traces: Any, timeout: Any) -> Any:
            conn = await super().connect(req, traces, timeout)
            mark_sent()
            return conn

    return WireConnector


# aiohttp sessions, shared by every provider with the same endpoint and key on the same event
# loop (a session is bound to its loop): flows loaded one after another reuse connections. A
# session is closed with its loop (see _close_with_loop), or at exit for a loop still running.
_SESSIONS: dict[tuple[asyncio.AbstractEventLoop, Any, str | None], Any] = {}


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
        # Per request, not on the session (Entra ID tokens change; see _headers).
        if api_key and azure is not None:
            self.auth: dict[str, str] | None = {"api-key": api_key}
        else:
            self.auth = {"Authorization": f"Bearer {api_key}"} if api_key else None
        # A request's headers without an Entra ID token: merged once, not once a call.
        self._fixed = {**self.headers, **self.auth} if self.auth else self.headers
        # The endpoint's sessions, told apart by the headers their calls send (see _new_session).
        place = (self.pool + self.base_url, frozenset(self._fixed.items()))
        self._places = (place, (place[0] + " following", place[1]))
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
        return self._fixed

    def _ident(self, follow: bool = False) -> tuple[Any, Any, str | None]:
        # One session per loop, endpoint (its pool: endpoints on one host stay apart), headers
        # and key, and whether it follows redirects (see _new_session).
        return (asyncio.get_running_loop(), self._places[follow], self.key)

    async def _session(self, follow: bool = False) -> Any:
        session = _SESSIONS.get(self._ident(follow))
        if session is None or session.closed:
            session = await self._new_session(follow)
        return session

    async def _new_session(self, follow: bool = False) -> Any:
        """Return a new session for this endpoint on the running loop (kept for its calls).

        The connector marks when each request left (for its time). A ``follow`` session
        follows redirects, its middleware refusing one to another origin before anything is
        sent there (what a trace config did, without its cost per request); the other sends
        requests that do not follow (``allow_redirects=False``: see :meth:`post`), without the
        middleware's layers on every call."""
        import aiohttp

        ident = self._ident(follow)
        connector = _wire_connector()(limit=0, ttl_dns_cache=300, keepalive_timeout=30)
        session = aiohttp.ClientSession(
            connector=connector,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=30),
            middlewares=(aiohttp_middleware,) if follow else (),
            # A call's headers, sent by default: a request that names none of its own is not
            # merged into a copy of them (see post). A session that follows redirects is given
            # them with each request (whatever hop it is asked to send again).
            headers=None if follow else self._fixed,
        )
        _SESSIONS[ident] = session
        await _close_with_loop(_SESSIONS, ident, session.close)
        return session

    async def _redirected(
        self, url: str, data: bytes, headers: Mapping[str, str], answer: tuple[bytes, int, Any]
    ) -> tuple[bytes, int, Any]:
        """Return the answer (body, status, headers) of the request to ``url`` whose
        ``answer`` was a redirect: sent again through the session that follows redirects,
        each hop checked. A redirect without a target is the answer as it is.

        Raises:
            RedirectRefused: the redirect (or a later hop) leads to another origin; nothing was
                sent there.
        """
        _, status, moved = answer
        target = moved.get("Location") or moved.get("URI")
        if not target:
            return answer
        # Refused here, before the request goes out again: the first hop's target is known.
        check_redirect(url, urllib.parse.urljoin(url, target), status)
        session = await self._session(follow=True)
        async with session.post(url, data=data, headers=headers, proxy=self.proxy) as resp:
            mark_answered()
            return await resp.read(), resp.status, resp.headers

    async def post(
        self, endpoint: str, body: Mapping[str, Any]
    ) -> tuple[Any, str | None, RateLimits | None, float | None]:
        """Return the decoded answer, its request id, its rate limits and the price a gateway
        put on it (:func:`~.answers.gateway_cost`).

        Raises:
            ProviderError, ProviderTimeout, RateLimited: the request failed or was refused.
        """
        import aiohttp

        try:
            session = _SESSIONS.get(self._ident())
            if session is None or session.closed:
                session = await self._new_session()
            url = self._url(endpoint, body)
            data = _encoded(body)
            sent = self._headers()
            own = None if sent is self._fixed else sent  # an Entra ID token's: not the session's
            async with session.post(
                url, data=data, headers=own, proxy=self.proxy, allow_redirects=False
            ) as resp:
                mark_answered()  # the answer's head is in
                raw = await resp.read()
                status = resp.status
                headers = resp.headers
            if status in REDIRECTS:  # rare: an API that moved
                answer = (raw, status, headers)
                raw, status, headers = await self._redirected(url, data, sent, answer)
        except aiohttp.ServerTimeoutError as exc:
            raise ProviderTimeout(f"OpenAI API timed out: {exc}", provider="openai") from exc
        except aiohttp.ClientError as exc:
            raise _connection_failed(exc, self.base_url, self.key) from exc
        try:
            data = _decoded(raw)
        except ValueError:
            data = raw.decode("utf-8", "replace")
        if status >= 400:
            raise _translate_status(status, data, headers, self.key, self.base_url + endpoint)
        if not isinstance(data, dict):
            raise _not_json(status, data, headers.get("x-request-id"))
        return data, headers.get("x-request-id"), rate_limits(headers), gateway_cost(headers)

    async def stream(
        self, endpoint: str, body: Mapping[str, Any], info: dict[str, Any]
    ) -> AsyncIterator[Any]:
        """Yield the chunks (decoded JSON) of a streamed answer as they arrive, after putting
        its ``request_id``, ``limits`` and a gateway's ``cost`` in ``info``. A server that
        answers in one JSON body instead yields it as one chunk.

        Raises:
            ProviderError, ProviderTimeout, RateLimited: as :meth:`post`, also mid-stream.
        """
        import aiohttp

        url = self._url(endpoint, body)
        headers = {**self._headers(), "Accept": "text/event-stream"}
        try:
            # Through the session that follows redirects (each hop checked): a stream's cost
            # is its chunks, not the middleware's layers.
            session = await self._session(follow=True)
            async with session.post(
                url, data=_encoded(body), headers=headers, proxy=self.proxy
            ) as resp:
                mark_answered()
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
                    info.update(
                        request_id=request_id,
                        limits=rate_limits(resp.headers),
                        cost=gateway_cost(resp.headers),
                    )
                    yield _as_chunk(data)
                    return
                info.update(
                    request_id=request_id,
                    limits=rate_limits(resp.headers),
                    cost=gateway_cost(resp.headers),
                )
                async for text in sse_data(resp.content):
                    if text.strip() == "[DONE]":
                        return
                    yield _chunk_of(text, resp.status, resp.headers, self.key)
        except aiohttp.ServerTimeoutError as exc:
            raise ProviderTimeout(f"OpenAI API timed out: {exc}", provider="openai") from exc
        except aiohttp.ClientError as exc:
            raise _connection_failed(exc, self.base_url, self.key) from exc

    async def aclose(self) -> None:
        for follow in (False, True):
            ident = self._ident(follow)
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
            from openai import DefaultAsyncHttpxClient

            # The SDK's usual client, refusing a redirect to another origin (the key and the
            # endpoint's headers stay with theirs).
            http = DefaultAsyncHttpxClient(
                event_hooks=httpx_hooks(), timeout=None, verify=tls_context()
            )
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
                    http_client=http,
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
                    http_client=http,
                )
            self._clients[loop] = client
            await _close_with_loop(self._clients, loop, client.close)  # not kept past its loop
        return client

    async def post(
        self, endpoint: str, body: Mapping[str, Any]
    ) -> tuple[Any, str | None, RateLimits | None, float | None]:
        """Return the decoded answer, its request id, its rate limits and the price a gateway
        put on it, as :meth:`_AiohttpTransport.post` does.

        Raises:
            ProviderError, ProviderTimeout, RateLimited: the request failed or was refused.
        """
        import openai

        client = await self._client()
        rest = dict(body)
        model = rest.pop("model")
        if self.azure is not None:
            model = self.azure.deployment(model)  # the SDK routes by deployment name
        try:
            # with_raw_response: the same call, with the answer's headers (rate limits) kept;
            # the SDK's own method, without an instrumentation's span (flownb's counts it).
            if endpoint == "/chat/completions":
                messages = rest.pop("messages")
                raw = await raw_uninstrumented(client.chat.completions)(
                    model=model, messages=messages, extra_body=rest
                )
            elif endpoint == "/completions":
                prompt = rest.pop("prompt")
                raw = await raw_uninstrumented(client.completions)(
                    model=model, prompt=prompt, extra_body=rest
                )
            else:
                prompt = rest.pop("prompt")
                raw = await raw_uninstrumented(client.images, "generate")(
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
        return data, request_id, rate_limits(raw.headers), gateway_cost(raw.headers)

    def _translate(self, exc: Exception) -> ProviderError:
        """Return the flownb error for an exception of the SDK."""
        import openai

        refused = refused_in(exc)
        if refused is not None:
            return refused
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
        return ProviderError(f"OpenAI SDK error: {redact(str(exc), self.key)}", provider="openai")

    async def stream(
        self, endpoint: str, body: Mapping[str, Any], info: dict[str, Any]
    ) -> AsyncIterator[Any]:
        """Yield the chunks of a streamed chat answer as the SDK reads them (as plain JSON
        data), after putting its ``request_id``, ``limits`` and a gateway's ``cost`` in ``info``.

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
            raw = await raw_uninstrumented(client.chat.completions)(
                model=model,
                messages=messages,
                stream=True,
                stream_options=options,
                extra_body=rest,
            )
            info.update(
                request_id=raw.headers.get("x-request-id"),
                limits=rate_limits(raw.headers),
                cost=gateway_cost(raw.headers),
            )
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

    async def aclose(self) -> None:
        loop = asyncio.get_running_loop()
        client = self._clients.pop(loop, None)
        _WATCHES.pop((id(self._clients), loop), None)
        if client is not None:
            await client.close()


def _forget_sessions_in_child() -> None:
    # A forked child must neither use nor close its parent's sessions (their loop and sockets
    # stay the parent's): they are kept aside unused, and the child's loop opens its own.
    _INHERITED_SESSIONS.append((dict(_SESSIONS), dict(_WATCHES)))
    _SESSIONS.clear()
    _WATCHES.clear()  # the watchers of the parent's loops: never run in the child


_INHERITED_SESSIONS: list[object] = []


os.register_at_fork(after_in_child=_forget_sessions_in_child)
