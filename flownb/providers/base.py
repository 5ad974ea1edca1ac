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
- ``supports_vision``: the provider shows a text call's images to the model (the image
  references of :mod:`flownb.providers.images`, which a judge of an image output writes).
- :meth:`Provider.check_params`: refuses, at flow load, model parameters it would reject.
- ``prompt_limits``: the longest prompt, in characters, it takes per node kind; a longer one
  is refused before any work (see :data:`PROMPT_LIMITS`).
- :meth:`Provider.cost`: what a generation cost in US dollars, from its usage and the price
  table (:mod:`flownb.config.pricing`) under ``price_kind``, or an endpoint's ``prices``.
- :meth:`Provider.stream`: the text of a call as it arrives, then the same
  :class:`Generation` ``generate`` returns. Every provider streams: the default yields the
  whole answer at once; OpenAI chat, Anthropic, Gemini and offline stream for real.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol

from ..config import pricing
from ..infra.unicode import replace_lone_surrogates
from ..show.notices import warn

if TYPE_CHECKING:
    from typing import Self

    from ..config.settings import RunConfig
    from ..infra.media import MediaStore

__all__ = [
    "FINAL_STATES",
    "PROMPT_LIMITS",
    "BatchAPI",
    "BatchState",
    "Call",
    "Generation",
    "Kind",
    "Provider",
    "RateLimits",
]

Kind = Literal["text", "image"]

# The longest prompt (characters) a provider takes by default, per node kind: what a real model
# service accepts, so the work one request can ask for stays in proportion to it. OpenAI's
# images API takes 4,000 characters for dall-e-3; a text prompt of a million characters is
# already beyond most models' context windows (about 250,000 tokens).
PROMPT_LIMITS: Mapping[Kind, int] = MappingProxyType({"text": 1_000_000, "image": 4_000})


@dataclass(slots=True)
class Call:
    """One node execution: what to generate (``kind``), from which ``prompt``, with which params.
    ``system`` is the node's system message (a flownb extension), sent as the provider's system
    instruction; ``None`` when the node has none."""

    kind: Kind
    prompt: str
    params: Mapping[str, Any] = field(default_factory=dict)
    node_id: str = ""
    system: str | None = None


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
    (never cached). ``finish_reason`` is why the provider stopped (``"length"``: at the token
    limit, the text is cut short), ``None`` when it did not say; every provider says it in
    OpenAI's words (``stop``, ``length``, ``content_filter``, ``tool_calls``). ``response_id`` is
    the provider's id of its answer (for traces; not cached).
    ``cost`` is what the call cost in US dollars when it was paid for (NaN:
    price unknown; ``None``: not priced yet); a cached generation keeps it, as the saving and
    as the row's price. ``priced_as`` is what the request asked for that a per-image price
    depends on (``size``, ``quality``, ``n``), for image generations priced per image (see
    :func:`~flownb.config.pricing.image_call_cost`); ``None`` for the others.
    ``prompt_cache_saved`` is what the provider's prompt caching saved on this call at list price
    (its cached input tokens priced as fresh input, less ``cost``; negative when writing the
    cache cost more than it saved), kept with the cached answer; ``None`` when the answer
    reported no cached tokens.
    ``provider_s`` is how long the provider took to answer the attempt that succeeded (seconds,
    request sent to answer read; queueing and retries excluded), kept with a cached generation
    as the time it took when bought; ``None`` when not measured.
    ``pending``, when set, is what is left to do after the paid call ended: an async callable
    returning the finished generation (an image URL downloaded into the media store). The call
    runner awaits it outside the call's time limit and retries, so a slow or failed download
    never buys the call again; never cached (it is done by then).

    A generation is where a provider's answer becomes flownb's, whatever path it came by (a
    call, a stream's end, a provider batch's results): text that is not valid Unicode (a lone
    surrogate, e.g. a JSON ``"\\ud800"``) is kept with U+FFFD in place of each, with one notice,
    so the cache, the run log and every view can store and show it (see
    :mod:`flownb.infra.unicode`).
    """

    output: str
    media: str | None = None
    model: str | None = None
    usage: dict[str, int] | None = None
    cached: bool = False
    latency: float = 0.0
    limits: RateLimits | None = None
    cost: float | None = None
    finish_reason: str | None = None
    priced_as: Mapping[str, Any] | None = None
    prompt_cache_saved: float | None = None
    response_id: str | None = None
    provider_s: float | None = None
    pending: Callable[[], Awaitable[Generation]] | None = field(
        default=None, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        model, finish, answer_id = self.model, self.finish_reason, self.response_id
        if (
            self.output.isascii()
            and (model is None or model.isascii())
            and (finish is None or finish.isascii())
            and (answer_id is None or answer_id.isascii())
        ):
            return  # the usual answer: nothing to scan (one is made for every answer read)
        output, replaced = replace_lone_surrogates(self.output)
        for name in ("model", "finish_reason", "response_id"):
            value = getattr(self, name)
            if value is not None and not value.isascii():
                clean, n = replace_lone_surrogates(value)
                setattr(self, name, clean)
                replaced += n
        if replaced:
            self.output = output
            lone_surrogates_replaced()


def lone_surrogates_replaced() -> None:
    """Say that an answer held text that is not valid Unicode, and what was kept instead (one
    message, so Python's warning filters show it once per place)."""
    warn(
        "a model's answer held text that is not valid Unicode (a lone surrogate); it was kept "
        "with U+FFFD, the replacement character, in place of each"
    )


# -- provider batches (half price, results within hours; driven by flownb.frames.batch_api)
# -----------

# States after which a batch changes no more.
FINAL_STATES = frozenset({"completed", "failed", "expired", "cancelled"})


@dataclass(frozen=True)
class BatchState:
    """What the API says of a batch: its ``status``, request counts and result files."""

    id: str
    status: str
    total: int = 0
    completed: int = 0
    failed: int = 0
    output_file_id: str | None = None
    error_file_id: str | None = None
    errors: list[str] = field(default_factory=list)

    @property
    def final(self) -> bool:
        """Whether the batch has ended (completed, failed, expired or cancelled)."""
        return self.status in FINAL_STATES


class BatchAPI(Protocol):
    """A vendor's batch API, as :mod:`flownb.frames.batch_api` uses it (OpenAI's Batch API and
    Anthropic's Message Batches implement it)."""

    base_url: str
    limits: Mapping[str, int]  # "requests" and "bytes" one batch may hold

    def line(self, key: str, call: Call) -> tuple[str, str, bytes]:
        """Return ``(endpoint, model, line)``: the request that asks for ``call`` under the
        custom id ``key``, serialized as one JSON object (one batch holds one endpoint's and
        one model's lines)."""
        ...

    def lines(self, calls: Iterable[tuple[str, Call]]) -> Iterator[tuple[str, str, bytes]]:
        """Yield what :meth:`line` returns for each ``(key, call)`` of ``calls``, in order."""
        ...

    def submit(
        self, lines: Sequence[bytes], endpoint: str, metadata: Mapping[str, str]
    ) -> BatchState:
        """Create a batch of ``lines`` (as :meth:`line` made them); ``metadata`` is kept with
        it where the API keeps any (``flownb_digest`` lets :meth:`find` recognise it)."""
        ...

    def status(self, batch_id: str) -> BatchState:
        """Return the batch's current state."""
        ...

    def cancel(self, batch_id: str) -> BatchState:
        """Ask for the batch to be cancelled."""
        ...

    def results(
        self, state: BatchState, endpoint: str, model: str
    ) -> Iterator[tuple[str, Generation | str]]:
        """Yield each answered line of an ended batch as ``(custom_id, generation)``, or
        ``(custom_id, why it has no answer)``."""
        ...

    def find(self, digest: str, since: float, total: int) -> list[BatchState]:
        """Return the batches that may be the one created at or after ``since`` (Unix time)
        over ``total`` lines whose digest is ``digest``, best match first: a batch whose
        creation a crashed process never heard back about. Empty: there is none."""
        ...


class Provider(ABC):
    """Base class of model providers."""

    name: ClassVar[str] = "provider"
    inline: ClassVar[bool] = False
    cacheable: ClassVar[bool] = True
    supports_images: ClassVar[bool] = True
    supports_vision: ClassVar[bool] = False
    prompt_limits: ClassVar[Mapping[Kind, int]] = PROMPT_LIMITS
    # Which price table prices this provider's calls (see flownb.config.pricing; None: its name),
    # and
    # an endpoint's own prices (model -> USD per million tokens), which come first.
    price_kind: str | None = None
    prices: Mapping[str, Mapping[str, Any]] | None = None
    # The table's (provider id, model id) whose list price its token-priced calls cost: an
    # endpoint's ``price_as`` (an alias, or a model behind a gateway the table cannot name).
    price_as: tuple[str, str] | None = None
    # Modules this provider's calls import (its HTTP client): imported in a background thread
    # when the provider is made (see flownb.providers.warmup), with tenacity and the price table.
    # Empty (the default): nothing is warmed up.
    warm_modules: tuple[str, ...] = ()

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

    def texts_inline(self, call: Call, prompts: list[str]) -> tuple[list[str], str | None] | None:
        """Return the answers to ``call`` asked once with each of ``prompts`` (its own prompt
        unused), all at once, as ``(texts, model)``: each text exactly what
        ``generate_inline`` would answer (no usage, cost, media or finish reason), ``model`` the
        one model that answers them all. ``None`` (the default): the provider answers one call
        at a time, and the engine asks it so."""
        return None

    def warm(self) -> None:  # noqa: B027 - a hook: most providers have nothing to make
        """Make what the first call on the running event loop would make first (an SDK's client,
        whose TLS set-up takes a good part of a second, and what its first request loads), so
        that the time measured for the answers of a run started after it is the provider's:
        called on the event loop before a run's calls are sent. The default does nothing."""

    def notes(self, kind: Kind, params: Mapping[str, Any], node: str) -> Sequence[tuple[str, str]]:
        """Return what the provider changes in a node's request: ``(topic, message)`` pairs (a
        parameter dropped, a model replaced). flownb says them once per provider and topic, when
        a flow is first run or previewed (see :mod:`flownb.runtime.notes`), so they describe
        what is sent, not a flow later changed by ``with_model``. The default changes nothing.
        """
        return ()

    @abstractmethod
    async def generate(self, call: Call) -> Generation:
        """Return the generation for ``call``.

        Raises:
            ProviderError: the provider failed (or a subclass: timeout, rate limited).
        """

    async def stream(self, call: Call) -> AsyncIterator[str | Generation]:
        """Yield the text of a text call as the provider sends it (``str`` pieces, in order),
        then, last, the :class:`Generation` :meth:`generate` would return: its ``output`` is
        exactly the pieces joined, and usage, model and finish reason are the same, so the
        engine caches, logs and returns it as a plain call's. An image call yields only its
        generation. This default calls :meth:`generate` and yields its text in one piece.

        Raises:
            ProviderError: as :meth:`generate` (possibly after some text was yielded).
        """
        gen = await self.generate(call)
        if call.kind == "text" and gen.media is None and gen.output:
            yield gen.output
        yield gen

    def cost(self, gen: Generation) -> float:
        """Return what ``gen`` cost in US dollars, from its model and usage, or for an image
        priced per image from what its request asked for (NaN: unknown)."""
        kind = self.price_kind or self.name
        if gen.priced_as is not None:
            return pricing.image_call_cost(kind, gen.model, gen.usage, gen.priced_as, self.prices)
        return pricing.call_cost(kind, gen.model, gen.usage, self.prices, self.price_as)

    def prompt_cache_saving(self, gen: Generation) -> float | None:
        """Return what the provider's prompt caching saved on ``gen`` at list price: its cost
        with every cached input token (reads and writes) priced as fresh input, less its cost
        (NaN: a price is unknown). ``None`` when its usage reports no cached tokens."""
        usage = gen.usage
        if not usage or not (usage.get("cached_tokens") or usage.get("cache_write_tokens")):
            return None
        fresh = {k: v for k, v in usage.items() if k not in ("cached_tokens", "cache_write_tokens")}
        uncached = Generation(gen.output, model=gen.model, usage=fresh, priced_as=gen.priced_as)
        cost = self.cost(gen) if gen.cost is None else gen.cost
        return self.cost(uncached) - cost

    def sent_params(self, kind: Kind, params: Mapping[str, Any]) -> dict[str, Any]:
        """Return the model parameters a node's requests carry, as the provider sends them
        (what reports show: a parameter the provider drops is not listed, a default it adds
        is). The default sends the params as written."""
        return dict(params)

    def priced_model(self, kind: Kind, params: Mapping[str, Any]) -> str | None:
        """Return the model a node's call would be priced as (for estimates): its ``model``."""
        model = params.get("model")
        return str(model) if model else None

    def generate_inline(self, call: Call) -> Generation:
        """Return the generation synchronously; only for providers with ``inline = True``."""
        raise NotImplementedError(f"{self.name} cannot generate inline")

    # Whether :meth:`batch_api` returns one (checked without building its client).
    supports_batches: ClassVar[bool] = False

    def batch_api(self) -> BatchAPI | None:
        """Return the provider's batch API (half price, results within hours; see
        :mod:`flownb.frames.batch_api`), or ``None``: it has none."""
        return None

    def identity(self) -> Mapping[str, Any]:
        """Return what, besides the call, decides the output (endpoint, ...): part of cache keys."""
        return {"provider": self.name}

    def banner(self) -> str:
        """Return one line saying which provider runs and what that means for the user."""
        return f"provider: {self.name}"

    async def aclose(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Release network resources. Safe to call more than once."""
