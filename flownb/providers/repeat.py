"""Another draw of the same calls: a provider whose cache keys carry a repeat number.

``evaluate(..., repeats=k)`` runs each (variant, row) k times. For the k runs to be k answers
(not one answer read back k-1 times from the cache), repeat ``r`` > 0 runs on
:func:`repeated`, which adds ``{"repeat": r}`` to the provider's :meth:`~Provider.identity`,
the part of every cache key besides the call. Repeat 0 is the provider itself, so its keys
are those of a plain run and caches made before repeats existed still serve it. Every call
still goes to the real provider (its connection pool, limits and prices are shared).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .base import BatchAPI, Call, Generation, Kind, Provider

__all__ = ["RepeatedProvider", "repeated", "unrepeated"]

# The class attributes a provider declares about itself, which the wrapper must report alike.
_DECLARED = ("name", "inline", "cacheable", "supports_images", "prompt_limits", "supports_batches")


class RepeatedProvider(Provider):
    """``real``, with ``repeat`` in its identity (so in its cache keys); every call goes to
    ``real``. Made by :func:`repeated`, which also copies ``real``'s declared attributes."""

    def __init__(self, real: Provider, repeat: int) -> None:
        self.real = real
        self.repeat = repeat
        self.price_kind = real.price_kind
        self.prices = real.prices
        self.price_as = real.price_as

    def identity(self) -> Mapping[str, Any]:
        return {**self.real.identity(), "repeat": self.repeat}

    def banner(self) -> str:
        return self.real.banner()

    def check_params(self, kind: Kind, params: Mapping[str, Any], node: str) -> None:
        self.real.check_params(kind, params, node)

    def warm(self) -> None:
        self.real.warm()

    def sent_params(self, kind: Kind, params: Mapping[str, Any]) -> dict[str, Any]:
        return self.real.sent_params(kind, params)

    def notes(self, kind: Kind, params: Mapping[str, Any], node: str) -> Sequence[tuple[str, str]]:
        return self.real.notes(kind, params, node)

    async def generate(self, call: Call) -> Generation:
        return await self.real.generate(call)

    def generate_inline(self, call: Call) -> Generation:
        return self.real.generate_inline(call)

    def cost(self, gen: Generation) -> float:
        return self.real.cost(gen)

    def priced_model(self, kind: Kind, params: Mapping[str, Any]) -> str | None:
        return self.real.priced_model(kind, params)

    def batch_api(self) -> BatchAPI | None:
        return self.real.batch_api()

    async def aclose(self) -> None:
        # The real provider is shared with the flow repeat 0 runs on: that flow closes it.
        return None


def repeated(provider: Provider, repeat: int) -> Provider:
    """Return ``provider`` for repeat ``repeat``: itself for 0 (today's cache keys), else a
    :class:`RepeatedProvider` whose cache keys differ from every other repeat's."""
    real = unrepeated(provider)
    if repeat == 0:
        return real
    # A class per wrapper: the declared attributes are class attributes on Provider.
    declared = {attr: getattr(real, attr) for attr in _DECLARED}
    cls = type(f"Repeated{type(real).__name__}", (RepeatedProvider,), declared)
    made: Provider = cls(real, repeat)
    return made


def unrepeated(provider: Provider) -> Provider:
    """Return the provider a :func:`repeated` one calls (``provider`` itself when it is not)."""
    return provider.real if isinstance(provider, RepeatedProvider) else provider
