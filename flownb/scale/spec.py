"""Flows by value: a :class:`FlowSpec` is all a process needs to rebuild a :class:`LocalFlow`.

It holds the exported JSON, the name, the provider's name and the run knobs (concurrency, rpm,
tpm, timeout, retries, cache, log), the FLOWNB_HOME path and the OpenAI base URL. It never holds
an API key: a process that rebuilds an OpenAI flow reads ``OPENAI_API_KEY`` from its own
environment. Nothing live travels (threads, sockets, SQLite handles): each process builds its
flow once per spec (:func:`flow_from_spec` keeps them by the spec's digest) and reuses it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from ..settings import PROVIDERS

if TYPE_CHECKING:
    from ..flow import LocalFlow

__all__ = ["FlowSpec", "flow_from_spec", "spec_of"]


@dataclasses.dataclass(frozen=True)
class FlowSpec:
    """What a worker needs to build a flow (picklable, small, no secrets)."""

    flow: dict[str, Any]
    name: str
    provider: str
    concurrency: int
    rpm: float | None
    tpm: float | None
    timeout: float | None
    retries: int
    cache: bool
    log: bool
    home: str
    openai_base_url: str | None = None
    # Seconds a paid answer waits before the cache commits it (None: the cache's default).
    cache_flush_after: float | None = None

    @property
    def digest(self) -> str:
        """A SHA-256 over every field: equal specs build equal flows."""
        material = json.dumps(dataclasses.asdict(self), sort_keys=True, default=str)
        return hashlib.sha256(material.encode("utf-8")).hexdigest()

    def build(self) -> LocalFlow:
        """Return a new flow from this spec (prefer :func:`flow_from_spec`, which reuses one).

        Raises:
            FlowFileError: the JSON is not a valid flow.
            ConfigError: the provider cannot be set up here (e.g. no OpenAI key in this
                process's environment).
        """
        from ..flow import LocalFlow
        from ..media import MediaStore
        from ..model import parse_flow
        from ..providers.registry import make_provider

        home = Path(self.home)
        media = MediaStore(home / "media")
        if self.provider == "openai":
            from ..providers.openai import OpenAIProvider

            provider = OpenAIProvider(media=media, base_url=self.openai_base_url)
        else:
            provider = make_provider(self.provider, media=media)
        flow = LocalFlow(
            parse_flow(self.flow, self.name),
            name=self.name,
            provider=provider,
            concurrency=self.concurrency,
            cache=self.cache,
            rpm=self.rpm or 0,  # 0, not None: no limit, whatever this process's FLOWNB_RPM says
            tpm=self.tpm or 0,
            timeout=self.timeout,
            retries=self.retries,
            log=self.log,
            home=home,
            source=self.flow,
        )
        cache = flow.engine.cache
        if cache is not None and self.cache_flush_after is not None:
            cache.flush_after = self.cache_flush_after
        return flow


def spec_of(flow: LocalFlow, **changes: Any) -> FlowSpec:
    """Return ``flow``'s spec, with ``changes`` (field -> value) applied.

    Raises:
        ConfigError: the flow's provider is an instance that cannot be rebuilt from its name.
    """
    provider = flow.provider
    if provider.name not in PROVIDERS:
        raise ConfigError(
            f"flow {flow.name!r} uses provider {provider.name!r}, which other processes cannot "
            f"rebuild; to send a flow to workers use one of {', '.join(PROVIDERS)}"
        )
    knobs = flow.knobs
    spec = FlowSpec(
        flow=flow.source,
        name=flow.name,
        provider=provider.name,
        concurrency=flow.concurrency,
        rpm=knobs["rpm"],
        tpm=knobs["tpm"],
        timeout=knobs["timeout"],
        retries=knobs["retries"],
        cache=bool(knobs["cache"]),
        log=bool(knobs["log"]),
        home=str(Path(flow.home).resolve()),
        openai_base_url=getattr(provider, "base_url", None),
    )
    return dataclasses.replace(spec, **changes) if changes else spec


_flows: dict[str, LocalFlow] = {}
_flows_lock = threading.Lock()


def flow_from_spec(spec: FlowSpec) -> LocalFlow:
    """Return this process's flow for ``spec``, building it on first use (then reused: one
    engine, provider connection pool and cache handle per spec per process)."""
    key = spec.digest
    with _flows_lock:
        flow = _flows.get(key)
        if flow is None:
            flow = _flows[key] = spec.build()
        return flow
