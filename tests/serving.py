"""Helpers for the server and client tests: a real uvicorn server on 127.0.0.1 in a thread, and a
scripted provider that stands in for a model service (failing, slowing or succeeding by prompt).
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import requests
import uvicorn

from flownb.config.settings import (
    DEFAULT_HEADER_TIMEOUT,
    DEFAULT_KEEP_ALIVE,
    DEFAULT_LIMIT_CONCURRENCY,
    DEFAULT_SHUTDOWN_TIMEOUT,
)
from flownb.errors import ProviderError, ProviderTimeout, RateLimited
from flownb.providers.base import Call, Generation, Provider
from flownb.server import KeyStore, ServerConfig, create_app
from flownb.server.protocol import http_protocol, listen_options


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Running:
    """A server running in this process: its URL, config (store, keys, provider) and a key."""

    url: str
    config: ServerConfig
    key: str


@contextmanager
def run_server(
    flows_dir: Path,
    home: Path,
    *,
    create_key: bool = True,
    header_timeout: float = DEFAULT_HEADER_TIMEOUT,
    limit_concurrency: int = DEFAULT_LIMIT_CONCURRENCY,
    **options: Any,
) -> Iterator[Running]:
    """Serve ``flows_dir`` with uvicorn on a free loopback port until the block ends, listening
    as ``flownb serve`` does (its HTTP protocol and uvicorn options; the test's own logging)."""
    config = ServerConfig(flows_dir, home=home, **options)
    key = KeyStore(home).create("test") if create_key else ""
    app = create_app(config)
    listening = listen_options(
        log_level="warning",
        timeout_keep_alive=DEFAULT_KEEP_ALIVE,
        limit_concurrency=limit_concurrency,
        shutdown_timeout=DEFAULT_SHUTDOWN_TIMEOUT,
        forwarded_allow_ips=config.forwarded_allow_ips,
    )
    listening["log_config"] = None  # leave the test process's logging (caplog) as it is
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host="127.0.0.1",
            port=free_port(),
            lifespan="on",
            http=http_protocol(header_timeout),
            **listening,
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    # A guard against a server that never starts, not a measure: a loaded machine may take long.
    deadline = time.monotonic() + 120
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield Running(f"http://127.0.0.1:{port}", config, key)
    finally:
        server.should_exit = True
        thread.join(timeout=20)


class ScriptedProvider(Provider):
    """An async provider whose prompt says what happens: ``FAIL502`` (a provider error that is
    not worth retrying), ``FAIL504`` (timeout), ``FAIL429`` (rate limited, retry after 2 s),
    ``BOOM`` (an unexpected exception), ``ONCE`` (a provider error the first time that prompt is
    seen, then success), ``SLOW`` (takes ``delay`` seconds). Otherwise the output is the prompt.

    It records every prompt it was called with and the peak number of calls in flight.
    """

    name: ClassVar[str] = "scripted"
    cacheable: ClassVar[bool] = False

    def __init__(self, delay: float = 0.2) -> None:
        self.delay = delay
        self.calls: Counter[str] = Counter()
        self.in_flight = 0
        self.peak = 0
        self._lock = threading.Lock()

    def _enter(self, prompt: str) -> None:
        with self._lock:
            self.calls[prompt] += 1
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)

    def _leave(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def _outcome(self, prompt: str) -> Generation:
        if "FAIL502" in prompt:
            raise ProviderError("the model refused the request (HTTP 400)", status=400)
        if "FAIL504" in prompt:
            raise ProviderTimeout("the model service did not answer within 30 s")
        if "FAIL429" in prompt:
            raise RateLimited("the model service is rate-limiting us", retry_after=2)
        if "BOOM" in prompt:
            raise RuntimeError("secret internal detail /etc/shadow")
        if "ONCE" in prompt and self.calls[prompt] == 1:
            raise ProviderError("the model refused once (HTTP 400)", status=400)
        return Generation(prompt)

    async def generate(self, call: Call) -> Generation:
        self._enter(call.prompt)
        try:
            if "SLOW" in call.prompt:
                await asyncio.sleep(self.delay)
        finally:
            self._leave()
        return self._outcome(call.prompt)


class InlineScriptedProvider(ScriptedProvider):
    """The same script, answered synchronously like the offline provider: the engine runs it
    without its retry layer, so every scripted failure reaches the HTTP answer as it is."""

    name: ClassVar[str] = "scripted-inline"
    inline: ClassVar[bool] = True

    def generate_inline(self, call: Call) -> Generation:
        self._enter(call.prompt)
        try:
            if "SLOW" in call.prompt:
                time.sleep(self.delay)
        finally:
            self._leave()
        return self._outcome(call.prompt)


def sample_flows(root: Path) -> Path:
    """Return ``root/flows`` holding the sample blog-intro flow and ``echo`` (variables a, b;
    one output ``say`` = "A={a} B={b}")."""
    from tests.conftest import FLOWS, make_flow, write_flow

    flows = root / "flows"
    flows.mkdir()
    (flows / "blog-intro.json").write_bytes((FLOWS / "blog-intro.json").read_bytes())
    write_flow(flows / "echo.json", make_flow({"say": "A={a} B={b}"}, ["a", "b"]))
    return flows


def post_run(server: Running, flow_id: str, variables: object) -> requests.Response:
    """POST ``{"variables": variables}`` to the run route with the server's key."""
    return requests.post(
        f"{server.url}/api/flows/run/{flow_id}",
        json={"variables": variables},
        headers={"x-api-key": server.key},
        timeout=30,
    )
