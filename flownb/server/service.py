"""What one ``flownb serve`` serves: :class:`ServerConfig` (flows folder, provider, keys, media,
limits, resolved once) and how the image URLs of its answers are made.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Unpack

from starlette.requests import Request

from ..config.options import RunOptions, check_run_options
from ..config.settings import (
    DEFAULT_MAX_BATCH,
    DEFAULT_MAX_BODY,
    resolve_run_config,
    resolve_serve_limits,
)
from ..core.local import LocalCore
from ..errors import ConfigError
from ..flowfile.model import FlowGraph
from ..infra.media import MediaStore
from ..providers.base import Provider
from ..providers.registry import make_provider
from ..runtime.cache import open_cache
from ..runtime.runlog import open_runlog
from .keys import KeyStore
from .store import FlowStore

__all__ = ["ServerConfig", "current_request", "media_url"]


class ServerConfig:
    """What one server serves and with what: flows folder, provider, keys, media, limits.

    Settings are resolved once, here (explicit argument > environment > default; ``options``
    are the run settings, :class:`~flownb.config.options.RunOptions`): the server's
    call cache and run log are off unless ``FLOWNB_SERVER_CACHE=1`` / ``FLOWNB_SERVER_RUNLOG=1``
    (or ``cache=`` / ``log=``), since a server answers many callers and keeping their inputs
    and outputs is its operator's decision.

    Raises:
        ConfigError: a limit below 1, or a provider that cannot be set up.
    """

    def __init__(
        self,
        flows_dir: str | Path,
        *,
        provider: Provider | str | None = None,
        home: str | Path | None = None,
        max_batch: int = DEFAULT_MAX_BATCH,
        max_body_bytes: int = DEFAULT_MAX_BODY,
        body_timeout: float | None = None,
        media_max_bytes: int | None = None,
        public_url: str | None = None,
        forwarded_allow_ips: str | None = None,
        **options: Unpack[RunOptions],
    ) -> None:
        if max_batch < 1 or max_body_bytes < 1:
            raise ConfigError("--max-batch and --max-body-bytes must be at least 1")
        check_run_options(dict(options), "ServerConfig")
        serving = resolve_serve_limits(
            body_timeout=body_timeout,
            public_url=public_url,
            forwarded_allow_ips=forwarded_allow_ips,
        )
        self.body_timeout = serving.body_timeout
        self.public_url = serving.public_url
        # Read by the listener (flownb.server.protocol.listen_options), not the app.
        self.forwarded_allow_ips = serving.forwarded_allow_ips
        self.run_config = resolve_run_config(
            provider=provider if isinstance(provider, str) else None,
            home=home,
            server=True,
            media_max=media_max_bytes,
            **options,
        )
        self.home = self.run_config.home
        self.media = MediaStore(self.run_config.media_dir, max_bytes=self.run_config.media_max)
        self.provider: Provider = (
            provider if isinstance(provider, Provider) else make_provider(self.run_config)
        )
        self.store = FlowStore(flows_dir, self._flow)
        self.keys = KeyStore(self.home)
        self.max_batch = max_batch
        self.max_body_bytes = max_body_bytes
        self.concurrency = self.run_config.concurrency
        use_cache = self.run_config.cache and self.provider.cacheable
        self.cache = open_cache(self.home) if use_cache else None
        self.runlog = open_runlog(self.home) if self.run_config.runlog else None

    def _flow(self, flow_id: str, graph: FlowGraph, source: Mapping[str, Any]) -> LocalCore:
        # The flow a notebook runs (a local flow's core), on the server's provider and run
        # configuration, named by its id: one engine per version of a flow file (its pacing
        # spans requests). Media URLs are made from the public URL, else the address the
        # current request reached (a context variable set per request).
        public = self.public_url

        def url_of(name: str) -> str:
            return media_url(name, public)

        return LocalCore(
            graph,
            name=flow_id,
            config=self.run_config,
            provider=self.provider,
            media_url=url_of,
            source=source,
        )


# The request being answered, set by the run route: media URLs use the address it reached.
current_request: ContextVar[Request | None] = ContextVar("flownb_request", default=None)


def media_url(name: str, public_url: str | None) -> str:
    """Return the URL of a media file in an answer: under ``public_url`` when the operator set
    one, else at the address and port the request's connection reached (never the ``Host``
    header, which the caller writes), else relative."""
    if public_url:
        return f"{public_url}/media/{name}"
    request = current_request.get()
    server = request.scope.get("server") if request is not None else None
    if not server or server[1] is None:
        return f"/media/{name}"  # a Unix socket: no address to name
    host, port = server
    shown = f"[{host}]" if ":" in str(host) else host
    scheme = request.url.scheme if request is not None else "http"
    return f"{scheme}://{shown}:{port}/media/{name}"
