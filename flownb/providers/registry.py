"""Building a provider by name (``--provider`` / ``FLOWNB_PROVIDER``)."""

from __future__ import annotations

from ..errors import ConfigError
from ..media import MediaStore
from ..settings import PROVIDERS, get_settings
from .base import Provider

__all__ = ["make_provider"]


def make_provider(name: str | None = None, *, media: MediaStore | None = None) -> Provider:
    """Return a new provider: ``name``, else ``FLOWNB_PROVIDER``, else offline.

    Raises:
        ConfigError: the name is not a provider, or the provider cannot be configured.
    """
    settings = get_settings()
    chosen = (name or settings.provider).strip().lower()
    media = media or MediaStore(settings.media_dir)
    if chosen == "offline":
        from .offline import OfflineProvider

        return OfflineProvider(media)
    if chosen == "openai":
        try:
            from .openai import OpenAIProvider
        except ImportError as exc:  # pragma: no cover - until the OpenAI provider lands
            raise ConfigError(f"the openai provider is not available: {exc}") from exc
        return OpenAIProvider(media=media)
    raise ConfigError(f"unknown provider {chosen!r}; choose one of {', '.join(PROVIDERS)}")
