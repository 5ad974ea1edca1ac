"""Flows by value: a :class:`FlowSpec` is all a process needs to rebuild a local flow.

It holds the exported JSON, the name and the flow's :class:`~flownb.config.settings.RunConfig`
(provider
name, endpoint, concurrency, rpm, tpm, timeout, retries, cache, log, the FLOWNB_HOME path, the
OpenAI base URL). It never holds an API key: the endpoint travels with the *name* of its key's
variable, and a process that rebuilds the flow reads that variable from its own environment (a
copy in the same process keeps the key the flow was loaded with; a literal ``api_key=`` never
leaves its process, see :mod:`flownb.config.endpoints`). Nothing live travels (threads, sockets,
SQLite
handles): each process builds its flow once per spec (:func:`flow_from_spec` keeps them by the
spec's digest) and reuses it.

This module sits below the flow classes: it reads a flow through :class:`Rebuildable` and is
handed the function that builds one (:meth:`flownb.core.local.LocalCore.from_spec`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import threading
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from ..config.endpoints import Endpoint
from ..config.settings import RunConfig
from ..errors import ConfigError
from ..providers.base import Provider
from ..providers.registry import provider_class, provider_names

__all__ = ["FlowSpec", "Rebuildable", "flow_from_spec", "spec_of"]

F = TypeVar("F")


class Rebuildable(Protocol):
    """What :func:`spec_of` reads of a local flow."""

    @property
    def name(self) -> str:
        """The flow's name."""

    @property
    def source(self) -> dict[str, Any]:
        """The exported JSON the flow was built from."""

    @property
    def config(self) -> RunConfig:
        """Its run configuration."""

    @property
    def provider(self) -> Provider:
        """Its provider instance."""


@dataclasses.dataclass(frozen=True)
class FlowSpec:
    """What a worker needs to build a flow (picklable, small, no secrets): the exported JSON,
    the name, and the run configuration with its API key left out."""

    flow: dict[str, Any]
    name: str
    config: RunConfig

    def __post_init__(self) -> None:
        vendors = self.config.vendors
        config = self.config
        keyed = config.openai_api_key is not None or config.service_key is not None
        if keyed or vendors != vendors.without_keys():
            # Keys are never pickled, never sent to a worker.
            keyless = config.replace(
                openai_api_key=None, service_key=None, vendors=vendors.without_keys()
            )
            object.__setattr__(self, "config", keyless)

    @property
    def digest(self) -> str:
        """A SHA-256 over every field: equal specs build equal flows."""
        material = json.dumps(dataclasses.asdict(self), sort_keys=True, default=_material)
        return hashlib.sha256(material.encode("utf-8")).hexdigest()

    def replace(self, **changes: Any) -> FlowSpec:
        """Return a copy whose run configuration has ``changes`` applied."""
        return dataclasses.replace(self, config=self.config.replace(**changes))


def spec_of(flow: Rebuildable, **changes: Any) -> FlowSpec:
    """Return ``flow``'s spec, with ``changes`` (run configuration field -> value) applied.

    Raises:
        ConfigError: the flow's provider is an instance that other processes cannot rebuild
            from its registered name.
    """
    provider = flow.provider
    names = provider_names()
    if provider.name not in names or type(provider) is not provider_class(provider.name):
        raise ConfigError(
            f"flow {flow.name!r} uses provider {provider.name!r}, which other processes cannot "
            f"rebuild; to send a flow to workers use a registered one ({', '.join(names)})"
        )
    config = flow.config.replace(
        provider=provider.name,
        home=flow.config.home.resolve(),
        openai_base_url=getattr(provider, "base_url", flow.config.openai_base_url),
        **changes,
    )
    return FlowSpec(flow=flow.source, name=flow.name, config=config)


def _material(value: Any) -> str:
    # An endpoint's fingerprint tells apart two flows that differ only in their key.
    return value.fingerprint() if isinstance(value, Endpoint) else str(value)


_flows: dict[str, Any] = {}
_flows_lock = threading.Lock()


def flow_from_spec(spec: FlowSpec, build: Callable[[FlowSpec], F]) -> F:
    """Return this process's flow for ``spec``, made by ``build`` on first use (then reused: one
    engine, provider connection pool and cache handle per spec per process)."""
    key = spec.digest
    with _flows_lock:
        flow = _flows.get(key)
        if flow is None:
            flow = _flows[key] = build(spec)
        return flow
