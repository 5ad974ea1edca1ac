"""What a model parameter may be: its type and range, checked when a flow is loaded or a
variant made (the flow file, ``with_params``, an eval TOML), before anything is sent.

The ranges are the widest any vendor documents (OpenAI: temperature 0 to 2, ``n`` up to 128;
top_p 0 to 1; penalties -2 to 2); a provider narrows them at load where its API does
(Anthropic: temperature 0 to 1). A number that is not finite (NaN, infinity) is refused
everywhere, in any parameter, since JSON cannot carry it and an API would refuse it.

:func:`to_send` is the one rule for what a node's calls send: a sampling knob at its no-op
value (an exported flow's editor default) stays home unless it was set on purpose.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["NO_OP", "RULES", "Rule", "param_problem", "params_problem", "to_send"]

# Outputs a request may ask for: no model writes more than this many tokens in one answer.
MAX_OUTPUT_TOKENS = 1_000_000


@dataclass(frozen=True)
class Rule:
    """A parameter's kind (``"number"``, ``"whole"``, ``"bool"``, ``"text"``, ``"stop"``) and
    its inclusive bounds (``None``: unbounded on that side)."""

    kind: str
    low: float | None = None
    high: float | None = None

    def allowed(self) -> str:
        """Return the allowed values in words ("a number from 0 to 2", ...)."""
        what = {
            "number": "a finite number",
            "whole": "a whole number",
            "bool": "true or false",
            "text": "text",
            "stop": "text or a list of texts",
            "logprobs": "true, false or a whole number from 0 to 5",
        }[self.kind]
        if self.low is not None and self.high is not None:
            return f"{what} from {_shown(self.low)} to {_shown(self.high)}"
        if self.low is not None:
            return f"{what} of at least {_shown(self.low)}"
        return what


def _shown(bound: float) -> str:
    return f"{int(bound):,}" if float(bound).is_integer() else f"{bound:g}"


RULES: Mapping[str, Rule] = {
    "model": Rule("text"),
    "temperature": Rule("number", 0, 2),
    "top_p": Rule("number", 0, 1),
    "frequency_penalty": Rule("number", -2, 2),
    "presence_penalty": Rule("number", -2, 2),
    "n": Rule("whole", 1, 128),
    "best_of": Rule("whole", 1, 20),
    "max_tokens": Rule("whole", 1, MAX_OUTPUT_TOKENS),
    "max_completion_tokens": Rule("whole", 1, MAX_OUTPUT_TOKENS),
    "max_output_tokens": Rule("whole", 1, MAX_OUTPUT_TOKENS),
    "top_k": Rule("whole", 1, None),
    "seed": Rule("whole"),
    # A flag on chat, a whole number 0 to 5 on /completions: each provider checks its own.
    "logprobs": Rule("logprobs"),
    "top_logprobs": Rule("whole", 0, 20),
    "stop": Rule("stop"),
}


def _fits(rule: Rule, value: Any) -> bool:
    kind = rule.kind
    if kind == "text":
        return isinstance(value, str)
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "logprobs":
        return isinstance(value, bool) or (isinstance(value, int) and 0 <= value <= 5)
    if kind == "stop":
        return isinstance(value, str) or (
            isinstance(value, list | tuple) and all(isinstance(v, str) for v in value)
        )
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    if kind == "whole" and not (isinstance(value, int) or float(value).is_integer()):
        return False
    if not math.isfinite(value):
        return False
    return (rule.low is None or value >= rule.low) and (rule.high is None or value <= rule.high)


def _not_finite(value: Any) -> bool:
    """Return whether ``value`` holds a NaN or an infinity anywhere (lists, mappings)."""
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, list | tuple):
        return any(_not_finite(v) for v in value)
    if isinstance(value, Mapping):
        return any(_not_finite(v) for v in value.values())
    return False


def param_problem(name: str, value: Any) -> str | None:
    """Return what is wrong with the model parameter ``name`` = ``value`` ("temperature must be
    a finite number from 0 to 2, got nan"), or ``None`` when it may be sent. ``None`` values
    (a parameter left out) and unknown parameters with finite values pass."""
    if value is None:
        return None
    rule = RULES.get(name)
    if rule is not None and not _fits(rule, value):
        return f"{name} must be {rule.allowed()}, got {value!r}"
    if rule is None and _not_finite(value):
        return f"{name} must be finite (JSON has no NaN or infinity), got {value!r}"
    return None


def params_problem(params: Mapping[str, Any]) -> str | None:
    """Return the first problem of a node's model parameters (see :func:`param_problem`)."""
    for name, value in params.items():
        problem = param_problem(str(name), value)
        if problem is not None:
            return problem
    return None


# The sampling knobs' values that change nothing, as every vendor documents them: what an exported
# flow carries at its editor defaults. Sent only when set on purpose (see to_send).
NO_OP: Mapping[str, float] = {
    "top_p": 1,
    "frequency_penalty": 0,
    "presence_penalty": 0,
    "n": 1,
    "best_of": 1,
}


def to_send(params: Mapping[str, Any], chosen: Collection[str] = ()) -> dict[str, Any]:
    """Return the model parameters a node's calls send: ``params`` without a knob at its no-op
    value (:data:`NO_OP`: ``top_p`` 1, penalties 0, ``n`` 1, ``best_of`` 1) unless its name is
    in ``chosen``, the parameters the user set on purpose (``with_params``, an eval TOML, the
    CLI). A flow exported by the web tool carries every knob at its editor default; sending
    those would make some vendors refuse the call (current Claude models take temperature or
    top_p, not both), and leaving them out changes nothing."""
    return {
        name: value
        for name, value in params.items()
        if name in chosen or name not in NO_OP or isinstance(value, bool) or value != NO_OP[name]
    }
