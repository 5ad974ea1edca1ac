"""How ``flownb serve`` listens: the socket bound before anything is announced, uvicorn's options
in one place, and a guard on each connection that keeps one careless or hostile client from
holding the server.

Requests are parsed by httptools (llhttp, the C parser Node.js uses) through uvicorn's httptools
protocol, which is what a stock ``uvicorn.run(app)`` picks where httptools is installed. On h11,
uvicorn's pure-Python parser, building and checking each head took about a third of the server's
CPU a small request; with httptools the whole request takes about 0.65x the CPU it took on h11
(``python -m bench server_throughput`` prints the server's CPU a request).

uvicorn closes idle keep-alive connections (``timeout_keep_alive``) and answers 503 over a
connection/task limit (``limit_concurrency``), but three things it leaves open are closed here,
in :class:`GuardedHttpToolsProtocol` (uvicorn's httptools protocol, subclassed):

- **time to send a head.** A "slowloris" client trickling header bytes would keep its connection
  (and a file descriptor) forever: a connection that has not sent a complete request head within
  ``header_timeout`` seconds (10 by default) is closed.
- **size of a head.** llhttp sets no limit on a head: it gathers a header's bytes for as long as
  they come. The guard counts the bytes of each head (request line and headers, up to the blank
  line) as they arrive, whether in one read or trickled in many, and counts a head again from its
  parsed fields once it is complete (a pipelined head that began in the middle of a read), and
  answers ``431 request_header_too_large`` past :data:`MAX_HEADER_BYTES`.
- **a share of the limit for strangers.** uvicorn counts every open connection against
  ``limit_concurrency``, so 1,100 idle connections without a key sent everyone else to 503. A
  connection is *proven* once one of its requests was authenticated (the key dependency leaves
  the caller in the request's state); connections not proven may hold at most
  :data:`UNPROVEN_SHARE` of the limit. When a new connection would pass that share, the oldest
  unproven connection that is idle (waiting for a request head) is closed to make room, so a
  flood of idle connections can only push out its own.

It also sends each answer in one piece: uvicorn writes a response's head and its body
separately, each write a ``send`` of its own (and, with Nagle's algorithm
off, a packet of its own that wakes the client). What a request's cycle writes in one turn of
the event loop is held and sent at once (:class:`_Coalesced`): a small JSON answer leaves in one
``send``, one packet.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
from typing import Any

import httptools
import orjson
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from ..config.settings import DEFAULT_HEADER_TIMEOUT
from ..errors import ConfigError
from .auth import CALLER_STATE
from .body import BODY_RECEIVED
from .logs import log_config
from .request_id import new_request_id

__all__ = [
    "EVENT_LOOP",
    "HTTP_PROTOCOL",
    "MAX_HEADER_BYTES",
    "UNPROVEN_SHARE",
    "GuardedHttpToolsProtocol",
    "bind",
    "http_protocol",
    "listen_options",
]

# Largest request head (request line and headers) accepted; a bigger one is answered 431.
MAX_HEADER_BYTES = 16 * 1024
# The share of --limit-concurrency that connections not yet authenticated may hold.
UNPROVEN_SHARE = 0.5

# Held writes of a cycle are sent at once past this many bytes (a big body is not held back
# from the transport's flow control).
COALESCE_MAX = 64 * 1024

# The end of a head: a blank line (a bare LF is taken as a line end too, to be safe).
_HEAD_END = re.compile(rb"\n\r?\n")
# A head's bytes besides its method, target and header fields: " ", " HTTP/1.1\r\n" and the
# blank line; and each header's ": " and "\r\n".
_REQUEST_LINE_EXTRA = 1 + 11 + 2
_HEADER_EXTRA = 4


class _HeadTooLarge(Exception):
    """Raised from the parser's callback when a complete head is over :data:`MAX_HEADER_BYTES`
    (it stops the parser; the protocol answers 431)."""


def _too_large_answer() -> bytes:
    rid = new_request_id()
    message = f"the request head is over {MAX_HEADER_BYTES // 1024} KiB"
    body = orjson.dumps(
        {
            "code": "request_header_too_large",
            "message": message,
            "errors": [{"code": "request_header_too_large", "message": message}],
            "request_id": rid,
        }
    )
    head = (
        "HTTP/1.1 431 Request Header Fields Too Large\r\n"
        "content-type: application/json\r\n"
        f"content-length: {len(body)}\r\n"
        "connection: close\r\n"
        f"x-request-id: {rid}\r\n\r\n"
    )
    return head.encode("ascii") + body


class _Coalesced:
    """The transport as a request's cycle sees it: what the cycle writes in one turn of the
    event loop is sent in one ``write`` (at the end of that turn, when the response completes,
    before the connection is closed, or at once past :data:`COALESCE_MAX` bytes), in order.

    A cycle uses only ``write``, ``close`` and ``is_closing``; the protocol keeps the real
    transport for everything else.
    """

    __slots__ = ("_held", "_loop", "_size", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: list[bytes] = []
        self._size = 0

    def write(self, data: bytes) -> None:
        if not data:  # an empty body (or uvicorn's write of one): nothing to send
            return
        if not self._held:
            # A stream's head or chunk still leaves in this turn of the loop.
            self._loop.call_soon(self.flush)
        self._held.append(data)
        self._size += len(data)
        if self._size > COALESCE_MAX:
            self.flush()

    def flush(self) -> None:
        """Write what is held to the transport, in one piece (dropped when the connection is
        gone: no one would read it)."""
        held = self._held
        if held:
            self._held, self._size = [], 0
            if not self._transport.is_closing():
                self._transport.write(held[0] if len(held) == 1 else b"".join(held))

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def is_closing(self) -> bool:
        return self._transport.is_closing()


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the guards above: a time limit and a size limit on each
    request head, and a share of the connection limit for connections not yet authenticated.
    It also turns Nagle's algorithm off on every connection (small JSON answers otherwise wait
    for the client's delayed ACK; asyncio does it only for sockets it made itself, not for ones
    uvicorn or we bound)."""

    header_timeout: float = DEFAULT_HEADER_TIMEOUT

    _head_timer: asyncio.TimerHandle | None = None
    # Since when (loop time) the connection waits for a request head, and the request cycle
    # that was current then (a new head replaces it).
    _waiting_since: float = 0.0
    _waiting_after: Any = None
    _proven = False  # one of its requests was authenticated
    _refused = False  # a request head was over the limit: 431, then the connection closes
    # Whether the bytes that come next belong to a request head (none begun, or one begun and
    # not complete): the parser says when a head ends and when a body does.
    _in_head = True
    # Bytes of the request head being received, and the last bytes seen, so a blank line split
    # across two reads is found.
    _head_bytes: int = 0
    _head_tail: bytes = b""
    _writer: _Coalesced | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._writer = _Coalesced(transport, self.loop)
        self._admit()
        self._arm_head_timer()

    def data_received(self, data: bytes) -> None:
        if self._refused:  # a head was refused: the rest is not read (the 431 waits its turn)
            return
        # Only while the client sends a head do its bytes count toward one; a body's do not (nor
        # the rest of a body refused early, 413).
        if self._in_head and not self._head_fits(data):
            self._refuse_head()
            return
        # What uvicorn's data_received does, but for a head refused from the parser's callback,
        # which uvicorn would take for a malformed request (a 400).
        self._unset_keepalive_if_required()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserCallbackError as exc:
            if isinstance(exc.__context__, _HeadTooLarge):
                self._refuse_head()
            else:
                self._bad_request()
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
        except httptools.HttpParserError:
            self._bad_request()

    def _bad_request(self) -> None:
        """Answer a request the parser refused as uvicorn does (400, plain text, closed)."""
        message = "Invalid HTTP request received."
        self.logger.warning(message)
        self.send_400_response(message)

    def _refuse_head(self) -> None:
        """Answer 431 (a JSON error) and close the connection; when answers to requests before
        this head (pipelined) are still owed, once they have left (answers go in order)."""
        self._refused = True
        if self.idle() and not self.pipeline:
            self.transport.write(_too_large_answer())
            self.transport.close()
        else:
            self.flow.pause_reading()  # nothing more is read: the parser stopped at this head

    # -- the parser's callbacks ----------------------------------------------------------------

    def on_headers_complete(self) -> None:
        # A head that began in the middle of a read (pipelined after another request) was not
        # counted as it came: it is counted here from its fields, before anything runs.
        if self._parsed_head_size() > MAX_HEADER_BYTES:
            raise _HeadTooLarge
        self._in_head = False
        super().on_headers_complete()
        cycle = self.cycle
        if cycle is not None:  # it writes through the coalescing writer (see _Coalesced)
            cycle.transport = self._writer  # type: ignore[assignment]  # what it uses of one

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._in_head = True  # whatever comes next starts the next request's head
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            # The whole body is here before the app reads it (it starts on the next turn of the
            # loop): reading cannot wait, so the app arms no body timer (see
            # flownb.server.body.read_body). A body that ends later finds the timer armed.
            cycle.scope[BODY_RECEIVED] = True  # type: ignore[literal-required]  # our key

    def on_response_complete(self) -> None:
        # The answer leaves before anything that follows it: the keep-alive timer, a close, the
        # answer to a pipelined request.
        if self._writer is not None:
            self._writer.flush()
        if self._refused and not self.pipeline and not self.transport.is_closing():
            # The answers owed before the refused head have left: now its 431.
            self.transport.write(_too_large_answer())
            self.transport.close()
        if not self._proven:
            state = self.scope.get("state") if self.scope is not None else None
            if state and state.get(CALLER_STATE) is not None:
                self._proven = True
                self._unproven().pop(self, None)  # proven: no longer counted among strangers
        super().on_response_complete()
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
        self._unproven().pop(self, None)
        super().connection_lost(exc)

    # -- the size of a head ------------------------------------------------------------------

    def _head_fits(self, data: bytes) -> bool:
        """Count ``data`` into the current head; return whether the head is still within
        :data:`MAX_HEADER_BYTES` (whatever follows its end is body, not counted)."""
        seen = self._head_tail + data
        end = _HEAD_END.search(seen)
        if end is None:
            self._head_bytes += len(data)
            self._head_tail = seen[-3:]
            return self._head_bytes <= MAX_HEADER_BYTES
        size = self._head_bytes + end.end() - len(self._head_tail)
        self._head_bytes, self._head_tail = 0, b""  # the next head starts from nothing
        return size <= MAX_HEADER_BYTES

    def _parsed_head_size(self) -> int:
        """Return the size of the head just parsed, as its request line and header fields
        written plainly make it (``name: value``, CRLF line ends)."""
        size = len(self.parser.get_method()) + len(self.url) + _REQUEST_LINE_EXTRA
        for name, value in self.headers:
            size += len(name) + len(value) + _HEADER_EXTRA
        return size

    # -- the share of strangers --------------------------------------------------------------

    def _unproven(self) -> dict[GuardedHttpToolsProtocol, None]:
        """Return this server's connections not yet proven, oldest first (shared by all its
        connections through uvicorn's server state)."""
        unproven: dict[GuardedHttpToolsProtocol, None] | None = getattr(
            self.server_state, "flownb_unproven", None
        )
        if unproven is None:
            unproven = {}
            self.server_state.flownb_unproven = unproven  # type: ignore[attr-defined]
        return unproven

    def _admit(self) -> None:
        """Count this new connection among the unproven; when they hold their share of the
        limit already, close the oldest one that is idle to make room."""
        unproven = self._unproven()
        if self.limit_concurrency is not None:
            share = max(1, int(self.limit_concurrency * UNPROVEN_SHARE))
            if len(unproven) >= share:
                for other in unproven:
                    if other.idle():
                        del unproven[other]
                        other.transport.close()
                        break
        unproven[self] = None

    def idle(self) -> bool:
        """Whether this connection waits for a request head (none sent, or the last answered)."""
        return not self.transport.is_closing() and (
            self.cycle is None or self.cycle.response_complete
        )

    # -- the time to send a head -------------------------------------------------------------

    def _arm_head_timer(self) -> None:
        """Note that the connection waits for a request head from now on (it was made, or a
        response was completed). One timer per connection, armed only when none is pending,
        checks the wait when it fires: no timer made and cancelled for every request."""
        self._waiting_since = self.loop.time()
        self._waiting_after = self.cycle
        if self._head_timer is None:
            self._schedule_head_timer()

    def _schedule_head_timer(self) -> None:
        since = self._waiting_since
        self._head_timer = self.loop.call_at(
            since + self.header_timeout, self._head_timed_out, since
        )

    def _head_timed_out(self, since: float) -> None:
        """Close the connection when it has waited for a head since ``since`` (the wait the
        timer was armed for) without one; when it has waited only since a later response,
        wait for that one's deadline; when a request is in progress, stop (its response
        arms the timer again)."""
        self._head_timer = None
        # A new request head replaces ``self.cycle``; a pipelined one may already be running.
        if not self.idle() or self.cycle is not self._waiting_after:
            return
        if self._waiting_since == since:
            self.transport.close()
        else:
            self._schedule_head_timer()


# What `flownb serve --workers N` hands uvicorn (an import string: worker processes import it).
HTTP_PROTOCOL = "flownb.server.protocol:GuardedHttpToolsProtocol"


def http_protocol(header_timeout: float = DEFAULT_HEADER_TIMEOUT) -> type[HttpToolsProtocol]:
    """Return :class:`GuardedHttpToolsProtocol` with a request-head timeout of
    ``header_timeout`` seconds (pass it as ``uvicorn.Config(http=...)``)."""
    if header_timeout == GuardedHttpToolsProtocol.header_timeout:
        return GuardedHttpToolsProtocol
    return type(
        "GuardedHttpToolsProtocol",
        (GuardedHttpToolsProtocol,),
        {"header_timeout": header_timeout},
    )


# The event loop `flownb serve` runs on, as ``uvicorn.Config(loop=...)`` names it, in the single
# process and every --workers process alike. Not uvloop, though flownb depends on it (for the
# sync API's background loop) and uvicorn's "auto" would pick it: with every one of 32
# keep-alive connections busy, uvloop answered as many requests a second as asyncio's loop but
# its p99 was about 1.4x and its slowest request about 1.8x (`python -m bench server_throughput`,
# both sides on each loop), and a server's slowest answers are what its callers wait on.
EVENT_LOOP = "asyncio"


def listen_options(
    *,
    log_level: str = "info",
    timeout_keep_alive: int,
    limit_concurrency: int,
    shutdown_timeout: int,
    forwarded_allow_ips: str | None,
) -> dict[str, Any]:
    """Return the keyword arguments of ``uvicorn.Config`` / ``uvicorn.run`` that ``flownb
    serve`` listens with (all but the app, the address and the HTTP protocol).

    Forwarded headers (``X-Forwarded-Proto``, ``X-Forwarded-For``) are believed only from
    ``forwarded_allow_ips``; with ``None``, from nobody (uvicorn's own default trusts any
    process on 127.0.0.1, which would let a local caller make image URLs https).
    """
    return {
        "log_config": log_config(log_level),
        "log_level": log_level,
        # The access log prints method, path and status only (never headers): no key leaks.
        "access_log": log_level in ("info", "debug"),
        "server_header": False,
        # Named, not left to uvicorn's "auto" (which picks uvloop, installed with flownb):
        # asyncio's loop keeps the slowest answers shorter (see EVENT_LOOP).
        "loop": EVENT_LOOP,
        "timeout_keep_alive": timeout_keep_alive,
        "limit_concurrency": limit_concurrency,
        # Runs still going then are cancelled (their threads stop at the next element): a
        # stopping server never waits on work whose clients are gone.
        "timeout_graceful_shutdown": shutdown_timeout,
        "proxy_headers": forwarded_allow_ips is not None,
        "forwarded_allow_ips": forwarded_allow_ips or "",
    }


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
