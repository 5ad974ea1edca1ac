"""Endpoints: named ways to reach a model (provider kind, base URL, key source, headers, prices).

A minimal form, enough for the providers and cost code to read; the full one (``flownb.toml``
tables, Azure deployments, ...) builds on it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import ConfigError

__all__ = ["Endpoint"]


@dataclass(frozen=True)
class Endpoint:
    """A named way to reach a model. ``api_key`` (a literal key, Python only) never appears in
    the repr; ``api_key_env`` names the environment variable that holds the key instead.

    ``prices`` overrides the price table for this endpoint: model name -> ``{"input": usd,
    "output": usd}`` in US dollars per million tokens (``"*"`` matches every model; ``0`` for a
    local model). See :mod:`flownb.pricing`.
    """

    name: str
    provider: str = "openai"
    base_url: str | None = None
    api_key: str | None = field(default=None, repr=False)
    api_key_env: str | None = None
    api_version: str | None = None
    deployments: Mapping[str, str] | None = None
    headers: Mapping[str, str] | None = None
    prices: Mapping[str, Mapping[str, Any]] | None = None
    images: bool = True

    def key(self) -> str | None:
        """Return the literal key, else the value of the variable named by ``api_key_env``,
        else ``None``.

        Raises:
            ConfigError: ``api_key_env`` names a variable that is unset or empty.
        """
        if self.api_key:
            return self.api_key
        if not self.api_key_env:
            return None
        from .settings import env_value

        value = env_value(self.api_key_env)
        if not value:
            raise ConfigError(
                f"endpoint {self.name!r}: its key comes from ${self.api_key_env}, which is not set"
            )
        return value
