"""What a call is: the one author of a node's prompt, cache key and price.

Every path that makes, looks up, previews or caps a provider call (a row, the bulk lookups of
a frame, the preview and dry run, the batch API, judges, the server) describes each node once
as a :class:`NodeCalls` (:func:`node_calls`: the provider, the node's kind, params and system
message) and asks it for each call: :meth:`NodeCalls.render` the prompt from the variables (or
:meth:`NodeCalls.render_columns` for many rows at once: the same template, the same rule),
:meth:`NodeCalls.key` its cache key, :meth:`NodeCalls.expected` the estimate a preview shows and
:meth:`NodeCalls.most` the most the call could cost (the spend cap's bound). A change of what
decides an answer (a new parameter, a system message) is made here once, so a cache hit in one
path is a hit in every other.

The cache key is a SHA-256 over the provider's identity (name and endpoint, never the key), the
node kind, every model parameter, the node's system message (left out when there is none, so
keys made before system messages existed still match) and the rendered prompt.

Prices, two of them, never mixed:

- **expected** (a preview's estimate): prompt tokens ``ceil(characters / 4)`` (OpenAI's rule
  of thumb for English) plus the images a judge's prompt shows, and each text call writing its
  ``max_tokens`` as sent (or :data:`~flownb.config.pricing.ESTIMATE_OUTPUT_TOKENS`).
- **most** (a bound no answer can pass): prompt tokens counted as the prompt's and system
  message's UTF-8 bytes, plus :data:`MESSAGE_OVERHEAD` tokens for the request's framing, plus
  the images' tokens. Every tokenizer the hosted vendors use (OpenAI's and Anthropic's
  byte-level BPE, Gemini's SentencePiece with byte fallback) makes each token from at least one
  byte of the text, so a text has at most as many tokens as bytes. The output is the
  ``max_tokens`` the request carries as sent (the provider's ``sent_params``: Anthropic's
  default included), else the model's context window from the price table (no answer is
  longer), times the answers one request asks for (``n``), all at list price; through a batch
  API at its own price (:data:`~flownb.config.pricing.BATCH_RATE`). An image call costs its
  per-image list price. NaN when the bound cannot be known (no price, no output limit): such a
  call cannot be capped.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..config import pricing
from .base import Call, Kind, Provider
from .images import image_tokens

if TYPE_CHECKING:
    from ..flowfile.template import Template

__all__ = [
    "KEY_VERSION",
    "MESSAGE_OVERHEAD",
    "NodeCalls",
    "key_of",
    "key_prefix",
    "keys_of",
    "node_calls",
]

KEY_VERSION = 1  # part of every key: bump when the stored form of a generation changes
# Tokens a chat request adds around its messages (role markers, message separators, the reply's
# priming): OpenAI documents 3 per message and 3 for the reply; a generous bound for all vendors.
MESSAGE_OVERHEAD = 32
# Names under which a request carries its output limit, as the providers send it.
_OUTPUT_LIMITS = ("max_tokens", "max_completion_tokens", "max_output_tokens")


def key_prefix(
    identity: Mapping[str, Any],
    kind: Kind,
    params: Mapping[str, Any],
    system: str | None = None,
) -> bytes:
    """Return the key material every call of one node shares (all but the prompt): the
    provider's identity, the kind, the params and the node's system message (left out when
    there is none, so keys made before system messages existed still match)."""
    parts: list[Any] = [KEY_VERSION, dict(identity), kind, dict(params)]
    if system is not None:
        parts.append({"system": system})
    material = json.dumps(parts, sort_keys=True, default=str)
    return material.encode("utf-8") + b"\0"


def key_of(prefix: bytes, prompt: str) -> str:
    """Return the cache key of a call: SHA-256 over its node's prefix and its prompt."""
    return hashlib.sha256(prefix + prompt.encode("utf-8", "surrogatepass")).hexdigest()


def keys_of(prefix: bytes, prompts: Iterable[str | None]) -> list[str | None]:
    """Return :func:`key_of` of each of ``prompts`` (``None`` for a ``None`` prompt): the same
    rule for a column of prompts."""
    return _keys_after(hashlib.sha256(prefix), prompts)


def _keys_after(hashed: Any, prompts: Iterable[str | None]) -> list[str | None]:
    """Return :func:`keys_of` for a prefix already hashed (``hashed``, not changed): each
    prompt hashed on from a copy of it, the same digest as the prefix and the prompt hashed
    together, without hashing the prefix (model, params and all) again for every call."""
    copy = hashed.copy
    keys: list[str | None] = []
    add = keys.append
    for prompt in prompts:
        if prompt is None:
            add(None)
            continue
        sha = copy()
        sha.update(prompt.encode("utf-8", "surrogatepass"))
        add(sha.hexdigest())
    return keys


class NodeCalls:
    """The calls of one node made with one provider: what they share (the key prefix, the
    model and the prices), and for each prompt the call, its key and its prices (see the
    module docstring). Make one with :func:`node_calls`."""

    __slots__ = (
        "_hashed",
        "_out_expected",
        "_out_most",
        "_price_as",
        "_price_kind",
        "_system_bytes",
        "_system_chars",
        "kind",
        "model",
        "node_id",
        "params",
        "prefix",
        "provider",
        "system",
        "template",
    )

    def __init__(
        self,
        provider: Provider,
        kind: Kind,
        params: Mapping[str, Any],
        system: str | None = None,
        node_id: str = "",
        template: Template | None = None,
    ) -> None:
        self.provider = provider
        self.kind = kind
        self.params = params
        self.system = system
        self.node_id = node_id
        self.template = template
        self.prefix = key_prefix(provider.identity(), kind, params, system)
        self._hashed = hashlib.sha256(self.prefix)  # copied for each call's key
        self.model: str | None = None
        self._price_kind = provider.price_kind or provider.name
        # An endpoint's "price as" (table id, model): what its calls are priced as.
        self._price_as: tuple[str, str] | None = getattr(provider, "price_as", None)
        self._system_chars = len(system) if system else 0
        self._system_bytes = len(system.encode("utf-8", "surrogatepass")) if system else 0
        self._out_expected: int | None = None  # worked out at the first price asked for
        self._out_most: int | None = None

    # -- the call ------------------------------------------------------------------------------

    def render(self, values: Mapping[str, str]) -> str:
        """Return the node's prompt rendered from ``values`` (variables, and upstream nodes'
        outputs by node name).

        Raises:
            KeyError: ``values`` lacks a label the prompt uses.
        """
        if self.template is None:
            raise TypeError("this node's calls were described without their template")
        return self.template.render(values)

    def render_columns(self, columns: Mapping[str, Sequence[str]], rows: int) -> list[str]:
        """Return :meth:`render` of each of ``rows`` rows of ``columns`` (label -> one value
        per row), in row order.

        Raises:
            KeyError: ``columns`` lacks a label the prompt uses.
        """
        if self.template is None:
            raise TypeError("this node's calls were described without their template")
        return self.template.render_columns(columns, rows)

    def call(self, prompt: str) -> Call:
        """Return the :class:`Call` of this node with ``prompt``."""
        return Call(self.kind, prompt, self.params, self.node_id, self.system)

    def key(self, prompt: str) -> str:
        """Return the cache key of this node's call with ``prompt`` (:func:`key_of`)."""
        sha = self._hashed.copy()
        sha.update(prompt.encode("utf-8", "surrogatepass"))
        return sha.hexdigest()

    def keys(self, prompts: Iterable[str | None]) -> list[str | None]:
        """Return :meth:`key` of each of ``prompts`` (``None`` for a ``None`` prompt)."""
        return _keys_after(self._hashed, prompts)

    # -- its price -----------------------------------------------------------------------------

    def _outputs(self) -> tuple[int, int | None]:
        """Return the output tokens the estimate assumes and the most an answer may write
        (``None``: not known), from the params as the provider sends them."""
        if self._out_expected is None:
            provider = self.provider
            sent = provider.sent_params(self.kind, self.params)
            limit = next((sent[k] for k in _OUTPUT_LIMITS if sent.get(k)), None)
            if limit is None:  # the params as written, where the provider rewrites none
                limit = next((self.params[k] for k in _OUTPUT_LIMITS if self.params.get(k)), None)
            self.model = provider.priced_model(self.kind, self.params)
            # Several answers to one request (OpenAI's n, Gemini's candidateCount) are each
            # billed: the bound counts every one of them.
            answers = max(1, int(sent.get("n") or sent.get("candidate_count") or 1))
            if limit is not None:
                self._out_expected = int(limit)
                self._out_most = int(limit) * answers
            else:
                self._out_expected = pricing.ESTIMATE_OUTPUT_TOKENS
                window = pricing.context_window(self._price_kind, self.model, self._price_as)
                self._out_most = None if window is None else window * answers
        return self._out_expected, self._out_most

    def _image_price(self) -> float:
        kind_name = self._price_kind
        if kind_name == "offline":
            return 0.0
        if kind_name in ("openai", "azure"):  # OpenAI's images API: a price per image
            from ..config.image_prices import image_price

            return image_price(self.provider.priced_model(self.kind, self.params), self.params)
        return math.nan

    def expected_tokens(self, prompt: str) -> int:
        """Return the prompt tokens a preview estimates for ``prompt`` (characters / 4, the
        system message's too, and the images it shows)."""
        tokens = math.ceil(len(prompt) / 4) + image_tokens(prompt)
        return tokens + math.ceil(self._system_chars / 4) if self._system_chars else tokens

    def expected_of(self, tokens: int) -> tuple[int, float]:
        """Return ``(output tokens, US dollars)`` a preview estimates for a call of this node
        with ``tokens`` prompt tokens (NaN: no price)."""
        if self.kind != "text":
            return 0, self._image_price()
        out, _ = self._outputs()
        return out, pricing.estimate_cost(
            self._price_kind, self.model, tokens, out, self.provider.prices, self._price_as
        )

    def expected(self, prompt: str) -> float:
        """Return the US dollars a preview estimates for this node's call with ``prompt``."""
        return self.expected_of(self.expected_tokens(prompt))[1]

    def most(self, prompt: str, *, batch: bool = False) -> float:
        """Return the most this node's call with ``prompt`` could cost, in US dollars (see the
        module docstring); ``batch``: sent through the provider's batch API, at its price. NaN
        when it cannot be bounded (the model has no price, or no output limit is known)."""
        if self.kind != "text":
            return self._image_price()
        _, out = self._outputs()
        if out is None:
            return math.nan
        tokens = (
            len(prompt.encode("utf-8", "surrogatepass"))
            + self._system_bytes
            + MESSAGE_OVERHEAD
            + image_tokens(prompt)
        )
        cost = pricing.estimate_cost(
            self._price_kind, self.model, tokens, out, self.provider.prices, self._price_as
        )
        return cost * pricing.BATCH_RATE if batch else cost


def node_calls(
    provider: Provider,
    kind: Kind,
    params: Mapping[str, Any],
    system: str | None = None,
    node_id: str = "",
    template: Template | None = None,
) -> NodeCalls:
    """Return the :class:`NodeCalls` of a node (its ``kind``, model ``params``, ``system``
    message and prompt ``template``) made with ``provider``: the one place its calls' prompt,
    key and price are made."""
    return NodeCalls(provider, kind, params, system, node_id, template)
