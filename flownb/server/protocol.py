"""How ``flownb serve`` listens: the socket bound before anything is announced, and uvicorn's
connection limits with defaults that keep one careless or hostile client from holding the server.

uvicorn closes idle keep-alive connections (``timeout_keep_alive``) and answers 503 over a
connection/task limit (``limit_concurrency``), but it has no limit on how long a client may take
to send a request's head: a "slowloris" client trickling header bytes keeps its connection (and
a file descriptor) forever. :func:`http_protocol` adds that limit to uvicorn's h11 protocol.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

from ..config.settings import DEFAULT_HEADER_TIMEOUT
from ..errors import ConfigError

__all__ = [
    "HTTP_PROTOCOL",
    "MAX_HEADER_BYTES",
    "HeaderTimeoutH11Protocol",
    "bind",
    "http_protocol",
]

# Largest request head h11 buffers before answering 400 (plain text): h11's own default.
MAX_HEADER_BYTES = 16 * 1024


class HeaderTimeoutH11Protocol(H11Protocol):
    """uvicorn's h11 protocol that closes a connection sending no complete request head within
    :attr:`header_timeout` seconds, and turns Nagle's algorithm off on every connection (small
    JSON answers otherwise wait for the client's delayed ACK; asyncio does it only for sockets
    it made itself, not for ones uvicorn or we bound)."""

    header_timeout: float = DEFAULT_HEADER_TIMEOUT

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._arm_head_timer()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        timer = getattr(self, "_head_timer", None)
        if timer is not None:
            timer.cancel()
        super().connection_lost(exc)

    def _arm_head_timer(self) -> None:
        timer = getattr(self, "_head_timer", None)
        if timer is not None:
            timer.cancel()
        # A new request head replaces ``self.cycle``: still the same one when the timer fires
        # means no head arrived in time.
        waiting_after = self.cycle
        self._head_timer = self.loop.call_later(
            self.header_timeout, self._head_timed_out, waiting_after
        )

    def _head_timed_out(self, waiting_after: Any) -> None:
        if self.cycle is waiting_after and not self.transport.is_closing():
            self.transport.close()


# What `flownb serve --workers N` hands uvicorn (an import string: worker processes import it).
HTTP_PROTOCOL = "flownb.server.protocol:HeaderTimeoutH11Protocol"


def http_protocol(header_timeout: float = DEFAULT_HEADER_TIMEOUT) -> type[H11Protocol]:
    """Return :class:`HeaderTimeoutH11Protocol` with a request-head timeout of
    ``header_timeout`` seconds (pass it as ``uvicorn.Config(http=...)``)."""
    if header_timeout == HeaderTimeoutH11Protocol.header_timeout:
        return HeaderTimeoutH11Protocol
    return type(
        "HeaderTimeoutH11Protocol",
        (HeaderTimeoutH11Protocol,),
        {"header_timeout": header_timeout},
    )


def bind(host: str, port: int) -> socket.socket:
    """Return a listening TCP socket on ``host``:``port`` (port 0: one the OS picks).

    Raises:
        ConfigError: the address is in use, not this machine's, or not allowed.
    """
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise ConfigError(f"cannot listen on {host!r}: {exc.strerror}") from None
    family, kind, proto, _, address = infos[0]
    # The protocol number matters: asyncio turns Nagle's algorithm off (TCP_NODELAY) only on
    # sockets that say IPPROTO_TCP, and with it on, small answers wait for delayed ACKs (the
    # server ran at half its speed).
    sock = socket.socket(family, kind, proto or socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind(address)
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        shown = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        reason = exc.strerror or type(exc).__name__
        hint = " (is another server running there? pick another --port)" if port else ""
        raise ConfigError(f"cannot listen on {shown}: {reason.lower()}{hint}") from None
    sock.set_inheritable(True)
    return sock
