"""An image a vendor's answer names by URL: fetched only from allowed places, checked at every
hop, and kept only when its bytes are an image.

A URL in an answer is data, not an instruction: fetched as it stands, it could read what only
this machine reaches (loopback services, the cloud's metadata address, the private network) and
store it in the media store that ``flownb serve`` serves. So:

- only ``http``/``https`` URLs are fetched, and only from the endpoint's own origin (scheme,
  host, port of the base URL that produced the answer), an origin or address range listed in
  ``FLOWNB_MEDIA_ALLOW``, or a public address;
- a name is checked by the addresses it resolves to (every one must be public: not loopback,
  private, link-local, multicast, reserved, unspecified, shared, nor an IPv4-mapped IPv6 of
  such), and the connection goes to the addresses checked (the connector's resolver is the
  check), so DNS cannot answer one address to the check and another to the connection;
- redirects are followed by hand (at most :data:`MAX_HOPS`), each hop checked the same way;
- the bytes must be a PNG, JPEG, WebP or GIF that Pillow opens and verifies, within
  :data:`~flownb.infra.media.MAX_IMAGE_BYTES`; the extension kept is the one the bytes say.

No proxy is used: a proxy would resolve the name itself, after the check. A failure is a
:class:`DownloadFailed` saying whether another try could help (connection errors, 5xx, 429) or
not (4xx, a refused place, not an image); :func:`download_image` retries the first kind itself,
so a caller never buys an image again for its download.
"""

from __future__ import annotations

import asyncio
import ipaddress
import random
import socket
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..config.origins import Origin, origin, shown
from ..infra.media import MAX_IMAGE_BYTES, NotAnImage, image_ext
from .redirects import REDIRECTS

__all__ = ["DOWNLOAD_ATTEMPTS", "MAX_HOPS", "DownloadFailed", "Places", "download_image"]

MAX_HOPS = 5  # redirects followed for one image
DOWNLOAD_ATTEMPTS = 4  # tries of one download whose failure may pass (the first included)
_TIMEOUT = 60.0  # seconds for one try

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


class DownloadFailed(Exception):
    """An image could not be downloaded: ``why`` (names the URL's origin, never its path or
    query) and whether another try could help (``retry``)."""

    def __init__(self, why: str, *, retry: bool = False) -> None:
        super().__init__(why)
        self.why = why
        self.retry = retry


@dataclass(frozen=True)
class Places:
    """Where image URLs may be fetched from besides public addresses: the endpoint's own
    origin, and ``FLOWNB_MEDIA_ALLOW``'s origins and address ranges."""

    own: Origin | None = None
    origins: frozenset[Origin] = frozenset()
    networks: tuple[IPNetwork, ...] = ()

    @classmethod
    def of(cls, base_url: str | None, allow: Iterable[str] = ()) -> Places:
        """Return the places for an endpoint at ``base_url`` and the setting's entries
        (origins or address ranges, as :mod:`flownb.config.settings` checked them)."""
        origins: set[Origin] = set()
        networks: list[IPNetwork] = []
        for entry in allow:
            if "://" in entry:
                origins.add(origin(entry))
            else:
                networks.append(ipaddress.ip_network(entry, strict=False))
        own = origin(base_url) if base_url else None
        return cls(own, frozenset(origins), tuple(networks))

    def trusts(self, url: str) -> bool:
        """Return whether ``url``'s origin is allowed by name (the endpoint's, or listed)."""
        where = origin(url)
        return where == self.own or where in self.origins

    def address_allowed(self, address: str) -> bool:
        """Return whether ``address`` is public or in a listed range."""
        ip: IPAddress = ipaddress.ip_address(address.split("%", 1)[0])
        if any(ip in net for net in self.networks):
            return True
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
            if any(ip in net for net in self.networks):
                return True
        inner = ip
        return bool(
            inner.is_global
            and not (
                inner.is_loopback
                or inner.is_private
                or inner.is_link_local
                or inner.is_multicast
                or inner.is_reserved
                or inner.is_unspecified
            )
        )


def _refused(url: str, what: str) -> DownloadFailed:
    return DownloadFailed(
        f"{shown(url)} {what}; image URLs are fetched only from public addresses, the "
        "endpoint's own origin or FLOWNB_MEDIA_ALLOW"
    )


class _CheckedResolver:
    """An aiohttp resolver whose answers are checked: the connection goes only to addresses
    :meth:`Places.address_allowed` passed (every address of a name must pass)."""

    def __init__(self, places: Places, url: str, trusted: bool) -> None:
        self.places = places
        self.url = url
        self.trusted = trusted

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[dict[str, Any]]:
        loop = asyncio.get_running_loop()
        try:
            infos = await loop.getaddrinfo(
                host, port, type=socket.SOCK_STREAM, family=family, flags=socket.AI_ADDRCONFIG
            )
        except OSError as exc:
            raise DownloadFailed(f"{shown(self.url)} does not resolve ({exc})") from None
        found = []
        for fam, _, proto, _, address in infos:
            if not self.trusted and not self.places.address_allowed(str(address[0])):
                raise _refused(self.url, f"resolves to {address[0]}, which is not public")
            found.append(
                {
                    "hostname": host,
                    "host": address[0],
                    "port": address[1],
                    "family": fam,
                    "proto": proto,
                    "flags": socket.AI_NUMERICHOST | socket.AI_NUMERICSERV,
                }
            )
        return found

    async def close(self) -> None:
        return None


def _check_url(url: str, places: Places) -> bool:
    """Return whether ``url`` is trusted by its origin (else its addresses are checked when it
    is resolved).

    Raises:
        DownloadFailed: not http(s), no host, or a literal address that is not allowed.
    """
    parts = urllib.parse.urlsplit(url)
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        scheme = parts.scheme or "no scheme"
        raise DownloadFailed(f"the image URL is not http(s) ({scheme}); it is not fetched")
    if places.trusts(url):
        return True
    try:
        literal = ipaddress.ip_address(parts.hostname.split("%", 1)[0])
    except ValueError:
        return False  # a name: checked by the resolver, by what it resolves to
    if not places.address_allowed(str(literal)):
        raise _refused(url, "is not a public address")
    return False


async def _get_once(url: str, places: Places) -> tuple[bytes, str | None]:
    """Return the body at ``url`` (one hop) and the next hop's URL when it is a redirect.

    Raises:
        DownloadFailed: a refused place, an error status, too large, a failed connection.
    """
    import aiohttp

    trusted = _check_url(url, places)
    resolver: Any = _CheckedResolver(places, url, trusted)
    connector = aiohttp.TCPConnector(resolver=resolver, use_dns_cache=False, force_close=True)
    timeout = aiohttp.ClientTimeout(total=_TIMEOUT)
    try:
        async with (
            aiohttp.ClientSession(connector=connector, timeout=timeout, trust_env=False) as session,
            session.get(url, allow_redirects=False) as resp,
        ):
            if resp.status in REDIRECTS:
                location = resp.headers.get("Location")
                if not location:
                    raise DownloadFailed(f"{shown(url)} answered {resp.status} without Location")
                return b"", urllib.parse.urljoin(url, location)
            if resp.status >= 400:
                again = resp.status >= 500 or resp.status in (408, 429)
                raise DownloadFailed(f"{shown(url)} answered HTTP {resp.status}", retry=again)
            if (resp.content_length or 0) > MAX_IMAGE_BYTES:
                raise DownloadFailed(f"{shown(url)} sent over {MAX_IMAGE_BYTES} bytes")
            parts: list[bytes] = []
            size = 0
            async for chunk in resp.content.iter_chunked(256 * 1024):
                size += len(chunk)
                if size > MAX_IMAGE_BYTES:
                    raise DownloadFailed(f"{shown(url)} sent over {MAX_IMAGE_BYTES} bytes")
                parts.append(chunk)
            return b"".join(parts), None
    except (aiohttp.ClientError, TimeoutError) as exc:
        cause = exc.__cause__ or exc.__context__
        if isinstance(cause, DownloadFailed):  # the resolver's refusal, wrapped by aiohttp
            raise cause from None
        raise DownloadFailed(
            f"could not download from {shown(url)} ({type(exc).__name__})", retry=True
        ) from None


async def _download(url: str, places: Places) -> tuple[bytes, str]:
    """Return the image at ``url`` (redirects followed, each hop checked) and its extension.

    Raises:
        DownloadFailed: see :func:`_get_once`; too many redirects; not an image.
    """
    current = url
    for _ in range(MAX_HOPS + 1):
        data, following = await _get_once(current, places)
        if following is None:
            try:
                return data, image_ext(data)
            except NotAnImage as exc:
                raise DownloadFailed(f"what {shown(current)} sent is not kept: {exc}") from None
        current = following
    raise DownloadFailed(f"{shown(url)} redirected more than {MAX_HOPS} times")


async def download_image(url: str, places: Places) -> tuple[bytes, str]:
    """Return the image at ``url`` and its extension (``png``, ``jpg``, ``webp``, ``gif``),
    trying again (with backoff) a download that failed in a way that may pass.

    Raises:
        DownloadFailed: the last failure (``retry`` False: it cannot pass, or tries ran out).
    """
    for attempt in range(DOWNLOAD_ATTEMPTS):
        try:
            return await _download(url, places)
        except DownloadFailed as exc:
            if not exc.retry or attempt == DOWNLOAD_ATTEMPTS - 1:
                raise
        await asyncio.sleep(random.uniform(0, 0.5 * 2**attempt))  # full jitter: 0.5, 1, 2 s
    raise AssertionError("unreachable")  # pragma: no cover
