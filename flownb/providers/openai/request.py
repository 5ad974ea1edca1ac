"""What a node's modelParams become in an OpenAI request, decided once per node at flow load
(:func:`_prepare_text`, :func:`_prepare_image`, read through ``OpenAIProvider.prepare``):

- text nodes go to ``/chat/completions`` (prompt = one user message), or to ``/completions``
  for completion models (``*-instruct``, ``davinci-002``, ``babbage-002``) or when the node sets
  ``endpoint: "completions"``;
- ``max_tokens`` is sent as ``max_completion_tokens`` on chat (the current name; reasoning
  models know no other), except where the endpoint says its server knows only ``max_tokens``
  (``max_tokens_param``: the default for servers other than OpenAI's and Azure's, since
  Ollama, llama.cpp and LM Studio read only the old name); ``/completions`` has only
  ``max_tokens``;
- the model's rule (:mod:`flownb.providers.model_rules`) decides which sampling knobs go:
  reasoning models (o1/o3/o4/gpt-5 families) take none, so temperature, top_p and the
  penalties are left out for them, with one warning;
- ``logprobs`` is a flag on chat and a whole number 0 to 5 on ``/completions`` (how many of
  the likeliest tokens to return); the other form is refused at load;
- ``n`` > 1 is sent and the **first** choice (index 0) becomes the output;
- ``best_of`` exists only on ``/completions``: 1 is a no-op and dropped; more on a chat model is
  refused at load time (:class:`ConfigError`), never sent to fail;
- a handful of known extra parameters pass through (``seed``, ``stop``, ...); anything else is
  dropped with a warning naming it;
- image nodes go to ``/images/generations``.

:class:`Azure` is what makes a request Azure's (its URL, api-version and credentials).
"""

from __future__ import annotations

import re
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any

from ...errors import ConfigError
from ...infra.media import MediaStore
from ..images import prompt_parts
from ..model_rules import screen

__all__ = ["DEFAULT_IMAGE_MODEL", "DEFAULT_TEXT_MODEL", "MAX_TOKENS_PARAMS", "Azure", "Prepared"]


DEFAULT_TEXT_MODEL = "gpt-4o-mini"


DEFAULT_IMAGE_MODEL = "dall-e-3"


_REASONING = re.compile(r"^(o1|o3|o4|gpt-5)(\b|[-.])")


# The two names of a chat answer's token limit: OpenAI's current one, and the one it deprecated
# that OpenAI-compatible servers (Ollama, llama.cpp, LM Studio) still read.
MAX_TOKENS_PARAMS = ("max_completion_tokens", "max_tokens")


_COMPLETION_MODELS = re.compile(r"(-instruct\b|^davinci-002$|^babbage-002$|^text-)")


# Extra parameters passed through as written; anything else is dropped with a warning.
_CHAT_EXTRAS = frozenset(
    {
        "seed",
        "stop",
        "user",
        "logit_bias",
        "response_format",
        "reasoning_effort",
        "service_tier",
        "logprobs",
        "top_logprobs",
        "verbosity",
        "safety_identifier",
        "prompt_cache_key",
    }
)


_COMPLETION_EXTRAS = frozenset({"seed", "stop", "user", "logit_bias", "logprobs", "suffix", "echo"})


_IMAGE_EXTRAS = frozenset(
    {
        "size",
        "quality",
        "style",
        "response_format",
        "background",
        "output_format",
        "output_compression",
        "moderation",
        "user",
    }
)


_IMAGE_EXT = {"png": "png", "jpeg": "jpg", "jpg": "jpg", "webp": "webp", "gif": "gif"}


class Prepared:
    """A node's request, fixed at load time: the endpoint path and every body field but the
    prompt."""

    __slots__ = ("body", "endpoint", "image_ext", "notes")

    def __init__(
        self, endpoint: str, body: dict[str, Any], notes: list[str], image_ext: str = "png"
    ):
        self.endpoint = endpoint
        self.body = body
        self.notes = notes
        self.image_ext = image_ext


def _prepare_text(
    params: Mapping[str, Any], node: str, max_tokens_param: str = "max_completion_tokens"
) -> Prepared:
    """Return the request a text node's params become (endpoint, body, notes on what it
    drops); ``max_tokens_param`` is the name a chat request's token limit goes under.

    Raises:
        ConfigError: params the API would refuse (an unknown endpoint, best_of on a chat model
            or below n, a logprobs of the other endpoint's form).
    """
    p = dict(params)
    notes: list[str] = []
    model = p.pop("model", None) or DEFAULT_TEXT_MODEL
    completions = _is_completions(model, p.pop("endpoint", None), node)
    body: dict[str, Any] = {"model": model}
    _choices(body, p.pop("best_of", None), p.pop("n", None), completions, model, node)
    reasoning = bool(_REASONING.match(model)) and not completions
    name = "max_completion_tokens" if reasoning else max_tokens_param
    _put_token_limit(body, notes, p, "max_tokens" if completions else name, completions)
    _logprobs(p.get("logprobs"), completions, node)
    # What this model takes of the sampling knobs (model_rules: one table for every vendor).
    p, left_out = screen(model, p, node)
    if left_out is not None:
        notes.append(left_out)
    for knob in ("temperature", "top_p", "frequency_penalty", "presence_penalty"):
        value = p.pop(knob, None)
        if value is not None:
            body[knob] = value
    allowed = _COMPLETION_EXTRAS if completions else _CHAT_EXTRAS
    where = "completions" if completions else "chat completions"
    for extra, value in p.items():
        if extra in allowed:
            body[extra] = value
        else:
            notes.append(f"{extra} dropped: not a {where} parameter flownb passes through")
    return Prepared("/completions" if completions else "/chat/completions", body, notes)


def _is_completions(model: str, choice: Any, node: str) -> bool:
    """Return whether a text node goes to ``/completions``: its ``endpoint`` says so, or, when
    it says nothing, its model is a completion model.

    Raises:
        ConfigError: an ``endpoint`` that is neither ``chat`` nor ``completions``.
    """
    if choice not in (None, "chat", "completions"):
        raise ConfigError(
            f"node {node!r}: endpoint must be 'chat' or 'completions', got {choice!r}"
        )
    if choice is None:
        return bool(_COMPLETION_MODELS.search(model))
    return choice == "completions"


def _choices(
    body: dict[str, Any], best_of: Any, n: Any, completions: bool, model: str, node: str
) -> None:
    """Put ``best_of`` and ``n`` in ``body`` where they do something (1 is a no-op).

    Raises:
        ConfigError: ``best_of`` on a chat model, or below ``n``.
    """
    if best_of is not None and best_of != 1:
        if not completions:
            raise ConfigError(
                f"node {node!r}: best_of={best_of} only works on the completions endpoint, and "
                f"{model!r} is a chat model; remove best_of, or set endpoint: 'completions' with a "
                "completion model (e.g. gpt-3.5-turbo-instruct)"
            )
        body["best_of"] = best_of
    if n is not None and n != 1:
        if best_of is not None and best_of != 1 and best_of < n:
            raise ConfigError(f"node {node!r}: best_of ({best_of}) must be at least n ({n})")
        body["n"] = n  # the first choice becomes the output


def _put_token_limit(
    body: dict[str, Any], notes: list[str], p: dict[str, Any], name: str, completions: bool
) -> None:
    """Put the node's token limit in ``body`` under ``name`` (taking both spellings out of
    ``p``); ``max_completion_tokens`` written in the node is sent as written, as the current
    name on chat (``/completions`` has only the old one), and wins over ``max_tokens``."""
    max_tokens = p.pop("max_tokens", None)
    max_completion = p.pop("max_completion_tokens", None)
    if max_completion is not None:
        body["max_tokens" if completions else "max_completion_tokens"] = max_completion
        if max_tokens is not None:
            notes.append("max_tokens dropped: max_completion_tokens is set")
    elif max_tokens is not None:
        body[name] = max_tokens


def _logprobs(value: Any, completions: bool, node: str) -> None:
    """Refuse a ``logprobs`` of the other endpoint's form (a flag on chat, a whole number 0 to 5
    on ``/completions``), which OpenAI would refuse.

    Raises:
        ConfigError: naming the node, the endpoint and the form it takes.
    """
    if value is None:
        return
    if completions and isinstance(value, bool):
        raise ConfigError(
            f"node {node!r}: logprobs on /completions is a whole number from 0 to 5 (how many of "
            f"the likeliest tokens to return), got {str(value).lower()}"
        )
    if not completions and not isinstance(value, bool):
        raise ConfigError(
            f"node {node!r}: logprobs on chat completions is true or false (top_logprobs says "
            f"how many), got {value!r}"
        )


def _prepare_image(params: Mapping[str, Any], node: str) -> Prepared:
    p = dict(params)
    notes: list[str] = []
    model = p.pop("model", None) or DEFAULT_IMAGE_MODEL
    body: dict[str, Any] = {"model": model}
    n = p.pop("n", None)
    if n is not None and n != 1:
        if model == "dall-e-3":
            raise ConfigError(f"node {node!r}: dall-e-3 makes one image per request; n must be 1")
        body["n"] = n  # the first image becomes the output
    for name, value in p.items():
        if name in _IMAGE_EXTRAS:
            body[name] = value
        else:
            notes.append(f"{name} dropped: not an images parameter")
    fmt = str(body.get("output_format", "png")).lower()
    return Prepared("/images/generations", body, notes, _IMAGE_EXT.get(fmt, "png"))


def _content_parts(prompt: str, media: MediaStore) -> list[dict[str, Any]]:
    """Return a prompt with images as chat content parts: ``text`` parts and ``image_url``
    parts (the bytes as a ``data:`` URL, or the image's http(s) URL)."""
    return [
        {"type": "text", "text": part}
        if isinstance(part, str)
        else {"type": "image_url", "image_url": {"url": part.data_url()}}
        for part in prompt_parts(prompt, media)
    ]


class Azure:
    """What makes a request Azure's: the api-version, the model -> deployment map, and an Entra
    ID token provider (``None`` when an ``api-key`` is sent instead)."""

    __slots__ = ("api_version", "deployments", "token_provider")

    def __init__(
        self,
        api_version: str,
        deployments: Mapping[str, str] | None = None,
        token_provider: Callable[[], str] | None = None,
    ) -> None:
        self.api_version = api_version
        self.deployments = dict(deployments or {})
        self.token_provider = token_provider

    def deployment(self, model: str) -> str:
        """Return the deployment serving ``model``: the mapped name, else the model's."""
        return self.deployments.get(model, model)

    def url(self, base_url: str, endpoint: str, model: str) -> str:
        """Return ``{base}/openai/deployments/{deployment}{endpoint}?api-version=V``."""
        deployment = urllib.parse.quote(self.deployment(model), safe="")
        version = urllib.parse.quote(self.api_version, safe="")
        return f"{base_url}/openai/deployments/{deployment}{endpoint}?api-version={version}"
