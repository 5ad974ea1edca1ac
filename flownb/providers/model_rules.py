"""Which sampling knobs each vendor's models take: the one table of model rules, with where each
rule was learned and when, and :func:`screen`, which every provider applies to a node's params
at flow load (plain, streamed, batched and judges' calls alike).

A rule names a model family and the version it holds from; an unknown model of a known family
gets its family's rule (``claude-sonnet-4-9`` the Sonnet 4.5+ rule, ``claude-opus-4-8`` the
Opus 4.7+ rule, ``gemini-3-flash`` the Gemini 2.5+ rule). Three kinds of rule:

- ``one_of``: the model takes one of two knobs, never both (current Claude models: temperature
  or top_p). Both set is refused at load, naming the node, the model and the rule.
- ``takes_none``: the model takes none of these knobs (Claude Opus 4.7+, OpenAI's reasoning
  models). They are left out, with one warning per node.
- ``no_nonzero``: a non-zero value is refused by the vendor (Gemini 2.5+ penalties). A non-zero
  value is refused at load; a zero, which changes nothing, is left out.

The knobs' no-op defaults that exported flows carry (``top_p`` 1, penalties 0, ``n`` 1,
``best_of`` 1) are left out before this, by :func:`flownb.flowfile.params.to_send`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError

__all__ = ["RULES", "ModelRule", "rule_for", "screen"]


@dataclass(frozen=True)
class ModelRule:
    """What one family of models takes, from version ``since`` on, and where that was learned
    (``sources``: public URLs and issues; ``learned``: the date the rule was checked)."""

    name: str
    family: str
    since: tuple[int, int]
    one_of: tuple[str, str] | None = None
    takes_none: tuple[str, ...] = ()
    no_nonzero: tuple[str, ...] = ()
    vendor_says: str = ""
    sources: tuple[str, ...] = ()
    learned: str = ""


_CLAUDE_ONE_OF = (
    "https://docs.claude.com/en/api/messages (top_p: 'alter either temperature or top_p, "
    "but not both')",
    "https://github.com/BerriAI/litellm/issues/15097",
    "https://github.com/langfuse/langfuse/issues/9882 (fixed in langfuse#10254)",
    "https://github.com/open-webui/pipelines/issues/546",
    "https://github.com/cloud-apim/otoroshi-llm-extension/issues/140",
)
_ONE_OF_SAYS = (
    "`temperature` and `top_p` cannot both be specified for this model. Please use only one."
)

RULES: tuple[ModelRule, ...] = (
    ModelRule(
        "Claude Opus 4.1+: temperature or top_p",
        "claude-opus",
        (4, 1),
        one_of=("temperature", "top_p"),
        vendor_says=_ONE_OF_SAYS,
        sources=_CLAUDE_ONE_OF,
        learned="2026-11-27",
    ),
    ModelRule(
        "Claude Opus 4.7+: no temperature, top_p or top_k",
        "claude-opus",
        (4, 7),
        takes_none=("temperature", "top_p", "top_k"),
        vendor_says="`temperature` is deprecated for this model.",
        sources=(
            "https://github.com/UKGovernmentBEIS/inspect_ai/issues/3721 (fixed in #3722)",
            "https://github.com/promptfoo/promptfoo/issues/9500 (Opus 4.8)",
            "models.dev#1468",
        ),
        learned="2026-11-27",
    ),
    ModelRule(
        "Claude Sonnet 4.5+: temperature or top_p",
        "claude-sonnet",
        (4, 5),
        one_of=("temperature", "top_p"),
        vendor_says=_ONE_OF_SAYS,
        sources=_CLAUDE_ONE_OF,
        learned="2026-11-27",
    ),
    ModelRule(
        "Claude Haiku 4.5+: temperature or top_p",
        "claude-haiku",
        (4, 5),
        one_of=("temperature", "top_p"),
        vendor_says=_ONE_OF_SAYS,
        sources=_CLAUDE_ONE_OF,
        learned="2026-11-27",
    ),
    ModelRule(
        "Gemini 2.5+: no presence or frequency penalty",
        "gemini",
        (2, 5),
        no_nonzero=("presence_penalty", "frequency_penalty"),
        vendor_says="Penalty is not enabled for models/{model}",
        sources=(
            "https://github.com/vercel/ai/issues/8943",
            "https://github.com/google-gemini/cookbook/issues/1290",
        ),
        learned="2026-11-27",
    ),
    ModelRule(
        "OpenAI reasoning models (o1, o3, o4, gpt-5): no sampling knobs",
        "openai-reasoning",
        (0, 0),
        takes_none=("temperature", "top_p", "frequency_penalty", "presence_penalty"),
        vendor_says="Unsupported parameter: 'temperature' is not supported with this model.",
        sources=("https://platform.openai.com/docs/guides/reasoning",),
        learned="2026-11-27",
    ),
)

# claude-opus-4-1-20250805, claude-sonnet-4-5, claude-opus-4-20250514 (4.0: a date is no
# minor version), anthropic.claude-haiku-4-5-20251001-v1:0, claude-sonnet-4-5@20250929.
_CLAUDE = re.compile(r"claude-(opus|sonnet|haiku)-(\d+)(?:[-.](\d{1,2}))?(?=$|[-@:._])")
# gemini-2.5-flash, models/gemini-2.5-pro, gemini-3-pro-preview; gemini-flash-latest has no
# number: the newest, so the newest rule.
_GEMINI = re.compile(r"(?:^|/)gemini-(?:(\d+)(?:\.(\d+))?)?")
_REASONING = re.compile(r"^(o1|o3|o4|gpt-5)(\b|[-.])")
_NEWEST = (1_000, 0)


def _family(model: str) -> tuple[str, tuple[int, int]] | None:
    """Return a model's family and version, or None for a model no rule is about."""
    name = model.strip().lower()
    found = _CLAUDE.search(name)
    if found:
        return f"claude-{found.group(1)}", (int(found.group(2)), int(found.group(3) or 0))
    found = _GEMINI.search(name)
    if found:
        if found.group(1) is None:
            return "gemini", _NEWEST
        return "gemini", (int(found.group(1)), int(found.group(2) or 0))
    if _REASONING.match(name):
        return "openai-reasoning", (0, 0)
    return None


def rule_for(model: str) -> ModelRule | None:
    """Return the rule ``model`` falls under: its family's rule of the highest version it has
    reached, or None when no rule is about it (its knobs are sent as set)."""
    family = _family(model)
    if family is None:
        return None
    name, version = family
    rules = [r for r in RULES if r.family == name and r.since <= version]
    return max(rules, key=lambda r: r.since) if rules else None


def screen(model: str, params: Mapping[str, Any], node: str) -> tuple[dict[str, Any], str | None]:
    """Return ``params`` without the knobs ``model`` does not take, and the one note saying
    which were left out (None when nothing was).

    Raises:
        ConfigError: the model takes one of two knobs and both are set, or a knob it refuses
            is set to a non-zero value; the message names the node, the model and the rule.
    """
    kept = dict(params)
    rule = rule_for(model)
    if rule is None:
        return kept, None
    if rule.one_of is not None and all(kept.get(k) is not None for k in rule.one_of):
        first, second = rule.one_of
        raise ConfigError(
            f"node {node!r}: {model!r} takes {first} or {second}, not both ({rule.name}; "
            f"the vendor answers 400: {rule.vendor_says!r}); keep one: remove {second} from "
            f"the node's modelParams, or leave it out of with_params"
        )
    for knob in rule.no_nonzero:
        value = kept.get(knob)
        if value is not None and value != 0:
            raise ConfigError(
                f"node {node!r}: {model!r} refuses a non-zero {knob} ({rule.name}; the vendor "
                f"answers 400: {rule.vendor_says.format(model=model)!r}); remove {knob} from "
                "the node's modelParams, or leave it out of with_params"
            )
        kept.pop(knob, None)  # zero changes nothing: not sent to a model without the knob
    dropped = [k for k in rule.takes_none if kept.pop(k, None) is not None]
    if not dropped:
        return kept, None
    return kept, (
        f"{', '.join(dropped)} left out: {model!r} takes none ({rule.name}); it uses its own "
        "defaults"
    )
