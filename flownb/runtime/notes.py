"""What flownb says about a flow's requests before they are sent: the parameters a provider drops,
a model it replaces, a model the price table does not know.

These are said when a flow is first run or previewed, not when it is loaded: a flow loaded with
an OpenAI model name on the anthropic provider, then given ``with_model("claude-haiku-4-5")``,
sends Claude Haiku and must not be warned about the replacement its loaded form would have made.
Each note is said once per provider and topic (variants of one flow share their provider), as a
warning attributed to the user's line (:func:`flownb.show.notices.warn`), without a ``flownb:``
prefix (the CLI and the magics add it once).
"""

from __future__ import annotations

import difflib
import functools
import math
import threading
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

from ..config.pricing import call_cost, table_id, uses_table
from ..providers.base import Provider
from ..show.notices import warn

__all__ = ["closest_models", "price_note", "say_notes"]

# A usage any priced text model has a price for: a model the table lacks costs NaN for it.
_PROBE = {"prompt_tokens": 1000, "completion_tokens": 1000}
# provider -> the topics already said for it
_said: weakref.WeakKeyDictionary[Provider, set[str]] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


@functools.lru_cache(maxsize=8)
def _table_models(provider_id: str) -> tuple[str, ...]:
    """Return the model names the price table knows for a provider id (empty when none)."""
    from genai_prices import data

    for found in data.providers:
        if found.id == provider_id:
            return tuple(model.id for model in found.models)
    return ()


def closest_models(kind: str, model: str, n: int = 3) -> list[str]:
    """Return up to ``n`` model names the price table knows for provider kind ``kind`` that are
    closest to ``model`` (by :func:`difflib.get_close_matches`), best first."""
    provider_id = table_id(kind)
    if provider_id is None:
        return []
    return difflib.get_close_matches(model, _table_models(provider_id), n=n, cutoff=0.6)


def price_note(kind: str, model: str, prices: Mapping[str, Mapping[str, Any]] | None) -> str | None:
    """Return the note for a text model the price table (and the endpoint's ``prices``) does not
    price, naming the closest known names; None when its price is known or the provider kind has
    no table (a plugin, the offline provider)."""
    if not uses_table(kind, prices) or not math.isnan(call_cost(kind, model, _PROBE, prices)):
        return None
    near = closest_models(kind, model)
    said = f"{model!r} is not in the price table, so its cost is unknown"
    if near:
        said += f"; did you mean {' or '.join(map(repr, near))}?"
    return said


def _notes(provider: Provider, steps: Sequence[Any]) -> list[tuple[str, str]]:
    """Return every note on the requests of ``steps`` (``(topic, message)``), in node order."""
    found: list[tuple[str, str]] = []
    kind = provider.price_kind or provider.name
    for step in steps:
        found.extend(provider.notes(step.kind, step.params, step.name))
        if step.kind != "text":
            continue  # image prices are per image, not per token: not this table's to judge
        model = provider.priced_model(step.kind, step.params)
        if model and provider.price_as is None:  # else priced as the endpoint says
            note = price_note(kind, model, provider.prices)
            if note is not None:
                found.append((f"price:{model}", f"node {step.name!r}: {note}"))
    return found


def say_notes(provider: Provider, steps: Sequence[Any]) -> None:
    """Warn, once per provider and topic, about what the requests of ``steps`` (a flow plan's
    steps: ``kind``, ``params``, ``name``) drop, replace or cannot price: one warning naming
    the provider, attributed to the user's line."""
    with _lock:
        said = _said.setdefault(provider, set())
        fresh = [(t, m) for t, m in _notes(provider, steps) if t not in said]
        said.update(t for t, _ in fresh)
    if fresh:
        warn(f"{provider.name}: {'; '.join(dict.fromkeys(m for _, m in fresh))}")
