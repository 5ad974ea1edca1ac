"""The seam every model provider plugs into: one async call per node execution.

A provider turns a :class:`Call` (node kind, rendered prompt, the node's modelParams) into a
:class:`Generation`. It is built by :meth:`Provider.create` from the run configuration, and
found by name through :mod:`flownb.providers.registry` (built-ins, and third-party packages that
declare a ``flownb.providers`` entry point). What it can do is declared here, on the class:

- ``inline``: :meth:`Provider.generate_inline` is cheap and synchronous (no I/O), so the engine
  may run a whole batch without an event loop. Only the offline provider sets it.
- ``cacheable``: results are worth caching (they cost money or time). The offline provider's
  are not: recomputing them is cheaper than a cache lookup.
- ``supports_images``: the provider can serve imageNodes.
- :meth:`Provider.check_params`: refuses, at flow load, model parameters it would reject.
- :meth:`Provider.cost`: what a generation cost in US dollars, from its usage and the price
  table (:mod:`flownb.pricing`) under ``price_kind``, or an endpoint's ``prices``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

if TYPE_CHECKING:
    from typing import Self

    from ..media import MediaStore
    from ..settings import RunConfig

__all__ = ["Call", "Generation", "Kind", "Provider", "RateLimits"]

Kind = Literal["text", "image"]


@dataclass(slots=True)
class Call:
    """One node execution: what to generate (``kind``), from which ``prompt``, with which params."""

    kind: Kind
    prompt: str
    params: Mapping[str, Any] = field(default_factory=dict)
    node_id: str = ""


@dataclass(slots=True, frozen=True)
class RateLimits:
    """What a provider's answer said about its rate limits (OpenAI's ``x-ratelimit-*`` headers):
    requests and tokens left in the current window, seconds until each is replenished, and the
    window's size. ``None`` where the answer did not say."""

    remaining_requests: int | None = None
    reset_requests: float | None = None
    limit_requests: int | None = None
    remaining_tokens: int | None = None
    reset_tokens: float | None = None
    limit_tokens: int | None = None


@dataclass(slots=True)
class Generation:
    """What a provider produced for a :class:`Call`.

    ``output`` is the text, or an image URL the provider returned. ``media`` is the file name of
    an image the provider wrote to the media store instead; the engine turns it into a URL fit
    for where the result goes (``file://`` locally, ``http://.../media/...`` from the server).
    ``limits`` is what the answer said about the provider's rate limits, for the run's limiter
    (never cached). ``cost`` is what the call cost in US dollars when it was paid for (NaN:
    price unknown; ``None``: not priced yet); a cached generation keeps it, as the saving.
    """

    output: str
    media: str | None = None
    model: str | None = None
    usage: dict[str, int] | None = None
    cached: bool = False
    latency: float = 0.0
    limits: RateLimits | None = None
    cost: float | None = None


class Provider(ABC):
    """Base class of model providers."""

    name: ClassVar[str] = "provider"
    inline: ClassVar[bool] = False
    cacheable: ClassVar[bool] = True
    supports_images: ClassVar[bool] = True
    # Which price table prices this provider's calls (see flownb.pricing; None: its name), and
    # an endpoint's own prices (model -> USD per million tokens), which come first.
    price_kind: str | None = None
    prices: Mapping[str, Mapping[str, Any]] | None = None

    @classmethod
    def create(cls, config: RunConfig, media: MediaStore) -> Self:
        """Return a provider set up from the run configuration; ``media`` is where it may write
        images. The default takes no settings: override it to read the ones you need.

        Raises:
            ConfigError: the configuration cannot work for this provider (a missing key, ...).
        """
        return cls()

    def check_params(self, kind: Kind, params: Mapping[str, Any], node: str) -> None:  # noqa: B027
        """Refuse, before anything runs, a node's model parameters the provider would reject.
        The default accepts everything.

        Raises:
            ConfigError: naming the node and the parameter.
        """

    @abstractmethod
    async def generate(self, call: Call) -> Generation:
        """Return the generation for ``call``.

        Raises:
            ProviderError: the provider failed (or a subclass: timeout, rate limited).
        """

    def cost(self, gen: Generation) -> float:
        """Return what ``gen`` cost in US dollars, from its model and usage (NaN: unknown)."""
        from ..pricing import call_cost

        return call_cost(self.price_kind or self.name, gen.model, gen.usage, self.prices)

    def priced_model(self, kind: Kind, params: Mapping[str, Any]) -> str | None:
        """Return the model a node's call would be priced as (for estimates): its ``model``."""
        model = params.get("model")
        return str(model) if model else None

    def generate_inline(self, call: Call) -> Generation:
        """Return the generation synchronously; only for providers with ``inline = True``."""
        raise NotImplementedError(f"{self.name} cannot generate inline")

    def identity(self) -> Mapping[str, Any]:
        """Return what, besides the call, decides the output (endpoint, ...): part of cache keys."""
        return {"provider": self.name}

    def banner(self) -> str:
        """Return one line saying which provider runs and what that means for the user."""
        return f"provider: {self.name}"

    async def aclose(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Release network resources. Safe to call more than once."""
