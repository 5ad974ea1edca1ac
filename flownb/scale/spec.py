"""Flows by value: a :class:`FlowSpec` is all a process needs to rebuild a :class:`LocalFlow`.

It holds the exported JSON, the name and the flow's :class:`~flownb.settings.RunConfig` (provider
name, concurrency, rpm, tpm, timeout, retries, cache, log, the FLOWNB_HOME path, the OpenAI
base URL). It never holds an API key: a process that rebuilds an OpenAI flow reads
``OPENAI_API_KEY`` from its own environment. Nothing live travels (threads, sockets, SQLite
handles): each process builds its flow once per spec (:func:`flow_from_spec` keeps them by the
spec's digest) and reuses it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import threading
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from ..providers.registry import provider_class, provider_names
from ..settings import RunConfig, get_settings

if TYPE_CHECKING:
    from ..flow import LocalFlow

__all__ = ["FlowSpec", "flow_from_spec", "spec_of"]


@dataclasses.dataclass(frozen=True)
class FlowSpec:
    """What a worker needs to build a flow (picklable, small, no secrets): the exported JSON,
    the name, and the run configuration with its API key left out."""

    flow: dict[str, Any]
    name: str
    config: RunConfig

    def __post_init__(self) -> None:
        vendors = self.config.vendors
        if self.config.openai_api_key is not None or vendors != vendors.without_keys():
            # Keys are never pickled, never sent to a worker.
            keyless = self.config.replace(openai_api_key=None, vendors=vendors.without_keys())
            object.__setattr__(self, "config", keyless)

    @property
    def digest(self) -> str:
        """A SHA-256 over every field: equal specs build equal flows."""
        material = json.dumps(dataclasses.asdict(self), sort_keys=True, default=str)
        return hashlib.sha256(material.encode("utf-8")).hexdigest()

    def build(self) -> LocalFlow:
        """Return a new flow from this spec (prefer :func:`flow_from_spec`, which reuses one).
        The OpenAI key, if the provider needs one, comes from this process's environment.

        Raises:
            FlowFileError: the JSON is not a valid flow.
            ConfigError: the provider cannot be set up here (e.g. no OpenAI key in this
                process's environment).
        """
        from ..flow import LocalFlow
        from ..model import parse_flow

        here = get_settings()
        config = self.config.replace(
            openai_api_key=here.openai_api_key, vendors=self.config.vendors.keys_from(here.vendors)
        )
        return LocalFlow(
            parse_flow(self.flow, self.name), name=self.name, config=config, source=self.flow
        )

    def replace(self, **changes: Any) -> FlowSpec:
        """Return a copy whose run configuration has ``changes`` applied."""
        return dataclasses.replace(self, config=self.config.replace(**changes))


def spec_of(flow: LocalFlow, **changes: Any) -> FlowSpec:
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
