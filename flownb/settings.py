"""The one module that reads environment variables.

Precedence everywhere is: explicit argument > environment > default. Other modules call
:func:`get_settings` (cheap; reads the environment each time, so tests and notebooks that change
``os.environ`` see the change) and never touch ``os.environ`` themselves.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from .errors import ConfigError

__all__ = ["PROVIDERS", "SERVE_CONFIG", "Settings", "export_serve_config", "get_settings"]

PROVIDERS = ("offline", "openai")

DEFAULT_CONCURRENCY = 16
DEFAULT_RETRIES = 8  # retries of a 429/5xx/timeout/dropped call, after the first attempt
# `flownb serve --workers N`: the serve options, as JSON, for the worker processes' app factory.
SERVE_CONFIG = "FLOWNB_SERVE_CONFIG"


@dataclass(frozen=True)
class Settings:
    """A snapshot of flownb's environment. Secrets are kept out of the repr."""

    home: Path
    provider: str
    concurrency: int
    base_url: str | None
    api_key: str | None = field(repr=False)
    openai_api_key: str | None = field(repr=False)
    openai_base_url: str | None
    openai_timeout: float | None
    requests_per_minute: float | None
    # Issue 5: transport, retries, call cache and run log.
    openai_transport: str = "aiohttp"
    retries: int = 8
    cache: bool = True
    server_cache: bool = False
    runlog: bool = True
    # Issue 12: tokens per minute (FLOWNB_TPM), None for no limit.
    tokens_per_minute: float | None = None
    serve_config: str | None = None  # FLOWNB_SERVE_CONFIG (set by `flownb serve --workers`)

    @property
    def media_dir(self) -> Path:
        """Where generated images are written (``FLOWNB_HOME/media``)."""
        return self.home / "media"


def _number(name: str, raw: str | None, kind: type[int] | type[float]) -> float | int | None:
    if raw is None or raw.strip() == "":
        return None
    try:
        value = kind(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a number, got {raw!r}") from None
    if value <= 0:
        raise ConfigError(f"{name} must be positive, got {raw!r}")
    return value


def get_settings() -> Settings:
    """Return the current settings read from the environment.

    Raises:
        ConfigError: a variable is set to something unusable (unknown provider, non-number).
    """
    env = os.environ
    home = Path(env.get("FLOWNB_HOME") or Path.home() / ".flownb").expanduser()
    provider = (env.get("FLOWNB_PROVIDER") or "offline").strip().lower()
    if provider not in PROVIDERS:
        raise ConfigError(
            f"FLOWNB_PROVIDER={provider!r} is not a provider; choose one of {', '.join(PROVIDERS)}"
        )
    concurrency = _number("FLOWNB_CONCURRENCY", env.get("FLOWNB_CONCURRENCY"), int)
    return Settings(
        home=home,
        provider=provider,
        concurrency=int(concurrency or DEFAULT_CONCURRENCY),
        base_url=env.get("FLOWNB_BASE_URL") or None,
        api_key=env.get("FLOWNB_API_KEY") or None,
        openai_api_key=env.get("OPENAI_API_KEY") or None,
        openai_base_url=env.get("OPENAI_BASE_URL") or None,
        openai_timeout=_number("FLOWNB_TIMEOUT", env.get("FLOWNB_TIMEOUT"), float),
        requests_per_minute=_number("FLOWNB_RPM", env.get("FLOWNB_RPM"), float),
        openai_transport=(env.get("FLOWNB_OPENAI_TRANSPORT") or "aiohttp").strip().lower(),
        retries=_retries(env.get("FLOWNB_RETRIES")),
        cache=_flag("FLOWNB_CACHE", env.get("FLOWNB_CACHE"), True),
        server_cache=_flag("FLOWNB_SERVER_CACHE", env.get("FLOWNB_SERVER_CACHE"), False),
        runlog=_flag("FLOWNB_RUNLOG", env.get("FLOWNB_RUNLOG"), True),
        tokens_per_minute=_number("FLOWNB_TPM", env.get("FLOWNB_TPM"), float),
        serve_config=env.get(SERVE_CONFIG) or None,
    )


def export_serve_config(config: str) -> None:
    """Put ``config`` (JSON) where the worker processes of ``flownb serve --workers`` find it:
    the environment they inherit."""
    os.environ[SERVE_CONFIG] = config


def _flag(name: str, raw: str | None, default: bool) -> bool:
    if raw is None or raw.strip() == "":
        return default
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{name} must be 1/0 (true/false, on/off), got {raw!r}")


def _retries(raw: str | None) -> int:
    if raw is None or raw.strip() == "":
        return DEFAULT_RETRIES
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"FLOWNB_RETRIES must be a whole number, got {raw!r}") from None
    if value < 0:
        raise ConfigError(f"FLOWNB_RETRIES must be 0 or more, got {raw!r}")
    return value
