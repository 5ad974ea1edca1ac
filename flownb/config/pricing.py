"""Money: what a provider call cost, from the usage the provider reported and a price table.

Prices come from pydantic's maintained table, ``genai-prices`` (bundled with the package: no
network), looked up by the provider's table id (``openai``, ``azure``, ``anthropic``,
``google``) and the model the provider said it used. An endpoint's ``prices=`` overrides the
table, as a mapping of model name (``"*"`` for every model) to US dollars **per million
tokens**::

    flownb.Endpoint("local", "openai", base_url=..., prices={"*": {"input": 0, "output": 0}})
    flownb.Endpoint("azure-eu", "azure", ..., prices={"gpt-4o": {"input": 2.75, "output": 11,
                                                              "cached_input": 1.375}})

Keys of a model's prices: ``input``, ``output`` and optionally ``cached_input`` (cache reads;
defaults to ``input``) and ``cache_write`` (defaults to ``input``).

A price that cannot be found is ``NaN``, never 0: an unknown cost must not read as free. The
offline provider's calls cost exactly 0. Image generations the table cannot price (OpenAI bills
``dall-e-2`` and ``dall-e-3`` per image) are priced from :mod:`flownb.config.image_prices`.

Three figures are kept apart (:func:`money_of`): what a run *spent* (its paid calls; a cache hit
costs 0), what the cache *saved*, and the row's *price* (every call at the price it was bought
for, cached or not: the same on every re-run). A figure some of whose calls have no price is
the sum of the priced ones, a lower bound ("at least"), with ``unpriced`` counting the others;
NaN only when none of its calls has a price.

Behind a gateway, two more sources come first. A gateway that prices each call itself (LiteLLM's
proxy sends ``x-litellm-response-cost``, US dollars) is taken at its word for that call (the
provider sets the generation's ``cost``). An endpoint's ``price_as`` names the model whose list
price applies to its calls (:func:`price_as_model`): an alias the gateway routes, or a Claude
model behind an OpenAI-compatible gateway, which the table cannot know by the name it is sent as.

Estimates (previews, dry runs) count a prompt's tokens as ``ceil(characters / 4)`` (OpenAI's
rule of thumb for English; tiktoken's encodings are downloaded at first use, which flownb does
not rely on) and assume each call writes its ``max_tokens`` (or :data:`ESTIMATE_OUTPUT_TOKENS`
when the node sets none): an upper bound where ``max_tokens`` is set.
"""

from __future__ import annotations

import functools
import math
import threading
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

__all__ = [
    "BATCH_RATE",
    "ESTIMATE_OUTPUT_TOKENS",
    "NAN",
    "Money",
    "call_cost",
    "context_window",
    "costs_of",
    "estimate_cost",
    "estimate_tokens",
    "image_call_cost",
    "load_table",
    "money_of",
    "price_as_model",
    "table_id",
    "table_loaded",
    "uses_table",
]

# What a batch call costs against the same call made live: OpenAI's and Anthropic's batch APIs
# charge half.
BATCH_RATE = 0.5

NAN = float("nan")
# Output tokens a preview assumes for a text node without max_tokens.
ESTIMATE_OUTPUT_TOKENS = 256

# Provider kind -> the price table's provider id.
_TABLE_IDS: Mapping[str, str] = {
    "openai": "openai",
    "azure": "azure",
    "anthropic": "anthropic",
    "gemini": "google",
}


def table_id(provider: str) -> str | None:
    """Return the price table's id for a provider kind (``gemini`` -> ``google``), or None."""
    return _TABLE_IDS.get(provider)


# Set once genai-prices is imported. Its first import takes about a second (the table is built
# at import), so an event loop hands it to a thread instead of stalling every call in flight.
_loaded = threading.Event()


def uses_table(provider: str, prices: Mapping[str, Mapping[str, Any]] | None = None) -> bool:
    """Return whether calls of a provider kind, with an endpoint's ``prices``, may be priced from
    the table: a kind the table has (offline's calls are free), unless prices for every model
    (``"*"``) cover them."""
    return not (prices and "*" in prices) and table_id(provider) is not None


def table_loaded() -> bool:
    """Return whether the price table is imported already (pricing a call is then quick)."""
    return _loaded.is_set()


def load_table() -> None:
    """Import the price table, blocking until it is (at once when it already is)."""
    # The package and its data: ``import genai_prices`` alone leaves the table itself (a
    # 1.6 MB module) to the first price asked for, which would then stall the event loop.
    import genai_prices.data  # noqa: F401

    # One price, so that what the first lookup imports and indexes is done here too.
    _exact("openai", "gpt-4o-mini", _PROBE, _PROBE, 0, 0)
    _loaded.set()


def estimate_tokens(text: str) -> int:
    """Return an estimate of ``text``'s tokens: ``ceil(len(text) / 4)``."""
    return math.ceil(len(text) / 4)


def _override(prices: Mapping[str, Mapping[str, Any]], model: str | None) -> Mapping[str, Any]:
    entry = prices.get(model or "") if model else None
    if entry is None:
        entry = prices.get("*")
    return entry or {}


def _from_override(entry: Mapping[str, Any], usage: Mapping[str, int]) -> float:
    try:
        per_in = float(entry["input"])
        per_out = float(entry["output"])
    except (KeyError, TypeError, ValueError):
        return NAN
    cached = int(usage.get("cached_tokens", 0) or 0)
    written = int(usage.get("cache_write_tokens", 0) or 0)
    fresh = max(0, int(usage.get("prompt_tokens", 0) or 0) - cached - written)
    per_cached = float(entry.get("cached_input", per_in))
    per_write = float(entry.get("cache_write", per_in))
    out = int(usage.get("completion_tokens", 0) or 0)
    return (fresh * per_in + cached * per_cached + written * per_write + out * per_out) / 1e6


def _exact(
    provider_id: str, model: str, inp: int, out: int, cached: int, written: int
) -> Decimal | None:
    from genai_prices import Usage, calc_price

    _loaded.set()
    usage = Usage(
        input_tokens=inp,
        output_tokens=out,
        cache_read_tokens=cached or None,
        cache_write_tokens=written or None,
    )
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "prices may be out of date" is not the user's news
            calc = calc_price(usage, model, provider_id=provider_id)
    except (LookupError, ValueError):
        return None
    return Decimal(calc.total_price)


_PROBE = 1_000
_FAR = 400_000  # past every tier the table knows (Gemini's 200k-token prompts)


@functools.lru_cache(maxsize=256)
def _rates(provider_id: str, model: str) -> tuple[Decimal, ...] | None:
    """Return the model's USD per token for (input, output, cache read, cache write) when its
    prices are linear in tokens; ``()`` when the table does not know the model; None when its
    prices are tiered (each call is then priced by the table itself). A table lookup costs
    about 0.3 ms; a run pays it once per model, not once per call. Decimals, as the table
    computes: the total is the table's to the last digit."""
    found = [
        _exact(provider_id, model, _PROBE, 0, 0, 0),
        _exact(provider_id, model, 0, _PROBE, 0, 0),
        _exact(provider_id, model, _FAR, 0, 0, 0),
        _exact(provider_id, model, 0, _FAR, 0, 0),
        _exact(provider_id, model, _PROBE, 0, _PROBE, 0),
        _exact(provider_id, model, _PROBE, 0, 0, _PROBE),
    ]
    if found[0] is None or found[1] is None:
        return ()  # unknown: remembered, so a local model's calls do not search the table
    probes = [p for p in found if p is not None]
    if len(probes) < len(found):
        return None  # some usage kinds unpriced: let the table decide call by call
    per_in, per_out, far_in, far_out, read, write = probes
    if far_in / _FAR != per_in / _PROBE or far_out / _FAR != per_out / _PROBE:
        return None
    return (per_in / _PROBE, per_out / _PROBE, read / _PROBE, write / _PROBE)


@functools.lru_cache(maxsize=256)
def _whole_rates(provider_id: str, model: str) -> tuple[int, ...] | None:
    """Return :func:`_rates` as whole numbers over a common denominator, ``(input, output,
    cache read, cache write, denominator)``; ``()`` or None as :func:`_rates` says.

    Exact: a sum of whole numbers divided once (Python's int division is correctly rounded)
    is the float of the table's Decimal total, to the last bit, at a fraction of its cost
    (this prices every call)."""
    rates = _rates(provider_id, model)
    if rates is None:
        return None
    ratios = [r.as_integer_ratio() for r in rates]
    if not ratios:
        return ()  # unknown: remembered, as _rates remembers it
    denominator = math.lcm(*(d for _, d in ratios))
    return (*(n * (denominator // d) for n, d in ratios), denominator)


def _table_price(
    provider_id: str, model: str, inp: int, out: int, cached: int, written: int
) -> float:
    rates = _whole_rates(provider_id, model)
    if not rates:
        if rates == ():
            return NAN
        exact = _exact(provider_id, model, inp, out, cached, written)
        return NAN if exact is None else float(exact)
    per_in, per_out, per_read, per_write, denominator = rates
    fresh = max(0, inp - cached - written)
    return (fresh * per_in + out * per_out + cached * per_read + written * per_write) / denominator


@functools.lru_cache(maxsize=64)
def price_as_model(name: str) -> tuple[str, str]:
    """Return the price table's ``(provider id, model id)`` of the model ``name`` (an endpoint's
    ``price_as``), found among every vendor the table knows.

    Raises:
        ConfigError: the table knows no such model (naming the closest names it knows).
    """
    from genai_prices import Usage, calc_price, data

    from ..errors import ConfigError

    _loaded.set()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            found = calc_price(Usage(input_tokens=_PROBE, output_tokens=_PROBE), name)
    except (LookupError, ValueError):
        import difflib

        known = {model.id for provider in data.providers for model in provider.models}
        near = difflib.get_close_matches(name, sorted(known), n=3, cutoff=0.6)
        hint = f"; did you mean {' or '.join(map(repr, near))}?" if near else ""
        raise ConfigError(
            f"price_as {name!r} is not a model of the price table, so its price is unknown{hint}"
        ) from None
    return found.provider.id, found.model.id


def call_cost(
    provider: str,
    model: str | None,
    usage: Mapping[str, int] | None,
    prices: Mapping[str, Mapping[str, Any]] | None = None,
    price_as: tuple[str, str] | None = None,
) -> float:
    """Return the US dollars one call cost, or NaN when it cannot be known.

    ``usage`` is flownb's form of what the provider reported: ``prompt_tokens`` (every input
    token, cache reads and writes included), ``completion_tokens`` (every output token,
    reasoning included), and optionally ``cached_tokens`` and ``cache_write_tokens``.
    ``prices`` is an endpoint's override (see the module docstring), used first; ``price_as``
    the table's ``(provider id, model id)`` whose price applies instead of ``model``'s (see
    :func:`price_as_model`).
    """
    if provider == "offline":
        return 0.0
    if prices:
        entry = _override(prices, model)
        if entry:
            return _from_override(entry, usage or {}) if usage else NAN
    provider_id = table_id(provider) if price_as is None else price_as[0]
    if price_as is not None:
        model = price_as[1]
    if not usage or not model:
        return NAN
    if provider_id is None:
        return NAN
    return _table_price(
        provider_id,
        model,
        int(usage.get("prompt_tokens", 0) or 0),
        int(usage.get("completion_tokens", 0) or 0),
        int(usage.get("cached_tokens", 0) or 0),
        int(usage.get("cache_write_tokens", 0) or 0),
    )


@functools.lru_cache(maxsize=256)
def context_window(
    provider: str, model: str | None, price_as: tuple[str, str] | None = None
) -> int | None:
    """Return the tokens ``model`` (of a provider kind; ``price_as``: the table's id and model
    to look up instead) takes and writes in one call, from the price table (an upper bound on
    what one answer can write); None when the table does not say."""
    provider_id = table_id(provider)
    if price_as is not None:
        provider_id, model = price_as
    if provider_id is None or not model:
        return None
    from genai_prices import Usage, calc_price

    _loaded.set()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            calc = calc_price(
                Usage(input_tokens=1, output_tokens=1), model, provider_id=provider_id
            )
    except (LookupError, ValueError):
        return None
    window = getattr(calc.model, "context_window", None)
    return int(window) if window else None


def estimate_cost(
    provider: str,
    model: str | None,
    prompt_tokens: int,
    output_tokens: int,
    prices: Mapping[str, Mapping[str, Any]] | None = None,
    price_as: tuple[str, str] | None = None,
) -> float:
    """Return an estimate, in US dollars, of a call with that many input and output tokens
    (NaN when the model's price is unknown)."""
    usage = {"prompt_tokens": prompt_tokens, "completion_tokens": output_tokens}
    return call_cost(provider, model, usage, prices, price_as)


def image_call_cost(
    provider: str,
    model: str | None,
    usage: Mapping[str, int] | None,
    params: Mapping[str, Any],
    prices: Mapping[str, Mapping[str, Any]] | None = None,
) -> float:
    """Return the US dollars one image request cost: from its token usage as
    :func:`call_cost` prices it, else, for OpenAI's and Azure's images API, the per-image list
    price of ``model`` at the request's ``params`` (``size``, ``quality``, ``n``; see
    :func:`~flownb.config.image_prices.image_price`). NaN when neither knows it."""
    cost = call_cost(provider, model, usage, prices)
    if not math.isnan(cost) or provider not in ("openai", "azure"):
        return cost
    if prices and _override(prices, model):
        return cost  # the endpoint priced this model itself: its word stands
    from .image_prices import image_price

    return image_price(model, params)


@dataclass(frozen=True, slots=True)
class Money:
    """The money of one run (or a sum of runs), three figures never mixed.

    ``spent``: what its paid calls cost (cache hits cost 0). ``saved``: what its cached
    answers cost when they were bought. ``price``: every call at the price it was bought for,
    cached or not (a row's list price, the same on every re-run; a batch answer's is the batch
    price). ``unpriced``: calls without a known price, left out of the sums, which are then
    lower bounds ("at least"); a figure is NaN only when it has calls and none is priced.
    ``unpriced_paid``: how many of those were paid in this run (what ``spent`` lacks)."""

    spent: float = 0.0
    saved: float = 0.0
    price: float = 0.0
    unpriced: int = 0
    unpriced_paid: int = 0


def _known_sum(costs: list[float]) -> float:
    """Return the sum of the known costs; NaN when there are costs and none is known."""
    known = [c for c in costs if not math.isnan(c)]
    if costs and not known:
        return NAN
    return float(sum(known))


def money_of(provider: str, generations: Iterable[Any]) -> Money:
    """Return the :class:`Money` of one run's generations (``None`` entries, nodes that did not
    run, are skipped). The offline provider's runs cost 0."""
    if provider == "offline":
        return Money()
    # The usual row: every call paid for now and priced. Its three sums are one sum, found in
    # one pass (this runs for every row the run logs).
    if not isinstance(generations, list | tuple):
        generations = list(generations)  # read twice below when the usual pass stops
    spent = 0.0
    for g in generations:
        if g is None:
            continue
        cost = g.cost
        if g.cached or cost is None or cost != cost:
            break
        spent += cost
    else:
        return Money(spent=spent, price=spent)
    paid: list[float] = []
    cached: list[float] = []
    for g in generations:
        if g is None:
            continue
        cost = NAN if g.cost is None else float(g.cost)
        (cached if g.cached else paid).append(cost)
    unpriced_paid = sum(1 for c in paid if math.isnan(c))
    return Money(
        spent=_known_sum(paid),
        saved=_known_sum(cached),
        price=_known_sum(paid + cached),
        unpriced=unpriced_paid + sum(1 for c in cached if math.isnan(c)),
        unpriced_paid=unpriced_paid,
    )


def costs_of(provider: str, generations: Any) -> tuple[float, float]:
    """Return ``(spent, saved)`` of :func:`money_of` (each the sum of the priced calls, NaN
    when none of its calls has a price)."""
    money = money_of(provider, generations)
    return money.spent, money.saved
