"""What an OpenAI answer says, read in one place for both transports (and the Batch API):
the first choice's text (:func:`_answer_text`; a refusal, a tool call or an empty answer is a
:class:`ProviderError`), streamed chunks, token usage (:func:`usage_of`), the rate-limit headers
(``x-ratelimit-remaining-requests`` / ``-tokens``, ``x-ratelimit-reset-*`` in OpenAI's duration
format such as ``"6m0s"``) as :class:`RateLimits`, so the run's limiter can pace before the
provider refuses rather than after, and an HTTP error answer as a flownb error
(:func:`_translate_status`: the provider's message, HTTP status and request id, any API key
masked).
"""

from __future__ import annotations

import html
import json
import operator
import re
from collections.abc import Callable, Mapping
from itertools import chain
from typing import Any, NamedTuple

from ...errors import ProviderError
from ..base import RateLimits
from ..vendor import status_error

__all__ = ["GATEWAY_COST", "gateway_cost", "parse_duration", "rate_limits", "usage_of"]


# The header in which a gateway states its own price of the call, in US dollars: LiteLLM's
# proxy sends it on every answer it prices (plain and streamed).
GATEWAY_COST = "x-litellm-response-cost"


def gateway_cost(headers: Mapping[str, str]) -> float | None:
    """Return the US dollars a gateway says this answer cost (:data:`GATEWAY_COST`), or ``None``
    when it says nothing usable (no header, not a finite number >= 0)."""
    text = headers.get(GATEWAY_COST)
    if text is None:
        return None
    try:
        cost = float(text)
    except ValueError:
        return None
    return cost if 0.0 <= cost < float("inf") else None


_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?)(ms|h|m|s)")


def parse_duration(text: str | None) -> float | None:
    """Return seconds for OpenAI's rate-limit durations ("1s", "6m0s", "20ms", "1h2m3.5s", or a
    bare number of seconds); ``None`` for anything else."""
    if not text:
        return None
    text = text.strip()
    try:
        return max(0.0, float(text))
    except ValueError:
        pass
    seconds = 0.0
    end = 0
    for match in _DURATION_PART.finditer(text):
        if match.start() != end:
            return None
        end = match.end()
        value, unit = float(match.group(1)), match.group(2)
        seconds += value * {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}[unit]
    return seconds if end == len(text) and end else None


def _int(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(float(text))
    except ValueError:
        return None


def rate_limits(headers: Mapping[str, str]) -> RateLimits | None:
    """Return what OpenAI's ``x-ratelimit-*`` headers say, or ``None`` when there are none
    (the usual case for local servers, checked first and cheaply)."""
    get = headers.get
    remaining_requests = get("x-ratelimit-remaining-requests")
    remaining_tokens = get("x-ratelimit-remaining-tokens")
    if remaining_requests is None and remaining_tokens is None:
        return None
    return RateLimits(
        remaining_requests=_int(remaining_requests),
        reset_requests=parse_duration(get("x-ratelimit-reset-requests")),
        limit_requests=_int(get("x-ratelimit-limit-requests")),
        remaining_tokens=_int(remaining_tokens),
        reset_tokens=parse_duration(get("x-ratelimit-reset-tokens")),
        limit_tokens=_int(get("x-ratelimit-limit-tokens")),
    )


_TITLE = re.compile(r"<title[^>]*>(.*?)</title>", re.IGNORECASE | re.DOTALL)


_TAG = re.compile(r"<(script|style)\b.*?</\1\s*>|<[^>]*>", re.IGNORECASE | re.DOTALL)


def _first_line(text: str, limit: int = 300) -> str:
    """Return the first line of text in ``text``: an HTML page's title (else its first line of
    text once tags are dropped), or a plain body's first non-blank line; at most ``limit``
    characters."""
    if "<" in text and ">" in text:
        title = _TITLE.search(text)
        text = title.group(1) if title and title.group(1).strip() else _TAG.sub("\n", text)
        text = html.unescape(text)
    for line in text.splitlines():
        line = " ".join(line.split())
        if line:
            return line if len(line) <= limit else line[: limit - 3] + "..."
    return ""


def _detail(value: Any) -> str:
    """Return a FastAPI-style ``detail`` (a string, or a list of ``{"msg": ...}``) as text."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        parts = [str(v.get("msg", v)) if isinstance(v, Mapping) else str(v) for v in value]
        return "; ".join(parts)
    return "" if value is None else json.dumps(value)[:300]


# What answers are read as objects: a dict (what JSON decodes to) is matched before the ABC
# check, which costs several times more on every answer of a 50,000-line batch.
_MAPPING = (dict, Mapping)

# Usage details promoted under their own names (the rest keep their section as a prefix).
_DETAILS = frozenset({"cached_tokens", "reasoning_tokens", "image_tokens"})


def _is_count(value: Any) -> bool:
    """Return whether ``value`` is a token count: an int that is not a bool (``type(value) is
    int``, checked first by the callers, is the usual case and costs less)."""
    return isinstance(value, int) and not isinstance(value, bool)


# How usage_of reads each shape of usage it has seen, by its top-level names in their order
# (the same shape or two come with every answer): the names of the top-level counts, the
# detail sections with their own names in order, and the flat names of them all.
_PLANS: dict[tuple[str, ...], _Plan | None] = {}
_UNPLANNED: Any = object()  # what _PLANS.get gives for a shape not seen yet


class _Plan(NamedTuple):
    values: Callable[[Mapping[str, Any]], tuple[Any, ...]]  # the counts', then the sections'
    split: int  # how many of those values are top-level counts (the rest are sections)
    details: list[tuple[str, ...]]  # each section's names, in order
    names: tuple[str, ...]  # the flat names of the counts, then of each section's
    aliased: bool  # whether the images API's names are also wanted under the chat ones


# The only type of the counts that usage_of's quick path takes as they are, and of sections.
_INTS = frozenset({int})
_DICTS = frozenset({dict})


def usage_of(usage: Any) -> dict[str, int] | None:
    """Return the answer's usage as flat token counts, for the run log and pricing.

    Top-level counts keep their names; ``*_tokens_details`` sections are flattened:
    ``cached_tokens``, ``reasoning_tokens`` and ``image_tokens`` under those names, anything
    else as ``<section>_<name>`` (``prompt_audio_tokens``). The images API's
    ``input_tokens`` / ``output_tokens`` also count as ``prompt_tokens`` /
    ``completion_tokens``. ``None`` when the answer reported no usage.
    """
    if type(usage) is not dict:
        return _usage_of(usage)
    # The usual answer (this runs for every one): a shape seen before, whose values are all
    # ints where they were, read in one go under the flat names worked out for it. Anything
    # else is read item by item (_usage_of), with the same result.
    shape = tuple(usage)
    plan = _PLANS.get(shape, _UNPLANNED)
    if plan is _UNPLANNED:
        plan = _plan(usage, shape)
    if plan is None:
        return _usage_of(usage)
    values = plan.values(usage)
    sections = values[plan.split :]
    if sections:
        if not {*map(type, sections)} <= _DICTS or [*map(tuple, sections)] != plan.details:
            return _usage_of(usage)
        counts = [*values[: plan.split], *chain.from_iterable(map(dict.values, sections))]
    else:
        counts = values
    if not {*map(type, counts)} <= _INTS:
        return _usage_of(usage)
    flat = dict(zip(plan.names, counts, strict=True))
    return _aliased(flat) if plan.aliased else flat or None


def _plan(usage: dict[str, Any], shape: tuple[str, ...]) -> _Plan | None:
    """Return how :func:`usage_of` reads usages of ``usage``'s shape (``shape``: its names),
    remembered for a bounded number of shapes (a server inventing new ones cannot grow the
    memo); None when it is read item by item: values other than ints and detail sections, or
    flat names that meet."""
    counts: list[str] = []
    sections: list[tuple[str, tuple[str, ...]]] = []
    for name, value in usage.items():
        if type(value) is int:
            counts.append(name)
        elif type(value) is dict and name.endswith("_tokens_details"):
            sections.append((name, tuple(value)))
        else:
            return None  # not remembered: the next usage of this shape may hold ints there
    names = list(counts)
    for section, details in sections:
        prefix = section[: -len("_tokens_details")]
        names += (d if d in _DETAILS else f"{prefix}_{d}" for d in details)
    plan = None
    distinct = set(names)
    if len(distinct) == len(names):  # names that meet are summed: item by item
        aliased = bool({"input_tokens", "output_tokens"} & distinct)
        plan = _Plan(
            _getter(counts + [name for name, _ in sections]),
            len(counts),
            [details for _, details in sections],
            tuple(names),
            aliased,
        )
    if len(_PLANS) < 256:
        _PLANS[shape] = plan
    return plan


def _getter(names: list[str]) -> Callable[[Mapping[str, Any]], tuple[Any, ...]]:
    """Return a function of a mapping that returns its values of ``names``, as a tuple."""
    if len(names) > 1:
        return operator.itemgetter(*names)
    if names:
        only = names[0]
        return lambda usage: (usage[only],)
    return lambda usage: ()


def _usage_of(usage: Any) -> dict[str, int] | None:
    """Return :func:`usage_of` of any usage, read item by item."""
    if not isinstance(usage, _MAPPING):
        return None
    flat: dict[str, int] = {}
    sections: list[tuple[str, Mapping[str, Any]]] = []
    for name, value in usage.items():
        if type(value) is int:
            flat[name] = value
        elif isinstance(value, _MAPPING):
            if name.endswith("_tokens_details"):
                sections.append((name[: -len("_tokens_details")], value))
        elif _is_count(value):
            flat[name] = value
    for section, details in sections:
        for detail, count in details.items():
            if type(count) is not int and not _is_count(count):
                continue
            key = detail if detail in _DETAILS and detail not in flat else f"{section}_{detail}"
            flat[key] = flat.get(key, 0) + count
    return _aliased(flat)


def _aliased(flat: dict[str, int]) -> dict[str, int] | None:
    """Return ``flat`` with the images API's names also under the chat ones (None if empty)."""
    if "input_tokens" in flat and "prompt_tokens" not in flat:
        flat["prompt_tokens"] = flat["input_tokens"]
    if "output_tokens" in flat and "completion_tokens" not in flat:
        flat["completion_tokens"] = flat["output_tokens"]
    return flat or None


def _translate_status(
    status: int, body: Any, headers: Mapping[str, str], key: str | None, url: str | None = None
) -> ProviderError:
    """Return the flownb error for an HTTP error answer (the one place statuses are mapped).
    ``url`` is the address asked for, named in a 404's message (a wrong base URL or path)."""
    message = ""
    code = None
    if isinstance(body, Mapping):
        err = body.get("error", body)
        if isinstance(err, Mapping):
            message = str(err.get("message") or "")
            code = err.get("code") or err.get("type")
        elif isinstance(err, str):
            message = err
        if not message and "detail" in body:  # FastAPI-style servers
            message = _detail(body["detail"])
    elif isinstance(body, str):
        message = _first_line(body)
    return status_error(
        "OpenAI",
        status,
        message,
        headers,
        key,
        request_id_header="x-request-id",
        quota_exhausted=code == "insufficient_quota",  # out of credit: retrying cannot help
        limits=rate_limits(headers) if status == 429 else None,
        url=url,
    )


def _bad_answer(what: str, request_id: str | None) -> ProviderError:
    """Return the error for a 200 answer that holds no usable output (not worth a retry)."""
    text = f"OpenAI API answered 200 with {what}"
    if request_id:
        text += f" (request id {request_id})"
    return ProviderError(text, status=200, request_id=request_id, provider="openai")


def _joined(content: Any) -> str:
    """Return a message's ``content`` as text: a string as is, a list of parts joined (the
    ``text`` of each text part, in order)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, Mapping) and isinstance(part.get("text"), str):
                parts.append(part["text"])
        return "".join(parts)
    return str(content)


def _refusal_in(content: Any) -> str | None:
    """Return the text of a refusal part of a list ``content``, if there is one."""
    if isinstance(content, list):
        for part in content:
            if isinstance(part, Mapping) and part.get("type") == "refusal":
                return str(part.get("refusal") or "no reason given")
    return None


def _answer_text(data: Mapping[str, Any], chat: bool, request_id: str | None) -> tuple[str, Any]:
    """Return the first choice's text and its ``finish_reason``.

    Raises:
        ProviderError: no choices; a refusal (the ``refusal`` field, a refusal part, or
            ``finish_reason: content_filter``); a tool call and no text; no message at all.
    """
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        raise _bad_answer("no answer (its 'choices' list is empty or missing)", request_id)
    choice = choices[0]
    if not isinstance(choice, _MAPPING):
        raise _bad_answer("a choice that is not an object", request_id)
    finish = choice.get("finish_reason")
    if chat:
        message = choice.get("message")
        if not isinstance(message, _MAPPING):
            raise _bad_answer("a choice without a message", request_id)
        content = message.get("content")
        if type(content) is str:  # the usual answer: no refusal part, and its own text
            refusal = message.get("refusal")
            text = content
        else:
            refusal = message.get("refusal") or _refusal_in(content)
            text = _joined(content)
        if refusal:
            raise _bad_answer(f"a refusal instead of text: {_first_line(str(refusal))}", request_id)
        calls = message.get("tool_calls") or message.get("function_call")
        if not text and calls:
            names = [
                str((c.get("function") or c).get("name", "?"))
                for c in (calls if isinstance(calls, list) else [calls])
                if isinstance(c, Mapping)
            ]
            raise _bad_answer(
                f"a tool call ({', '.join(names) or '?'}) and no text; a node needs a text answer",
                request_id,
            )
    else:
        text = _joined(choice.get("text"))
    if finish == "content_filter":
        raise _bad_answer(
            "its answer withheld by the provider's content filter (finish_reason "
            "'content_filter', a refusal)",
            request_id,
        )
    return text, finish


# Statuses with which a server may refuse a streamed request it would answer plainly (an
# OpenAI-compatible server without streaming, or without stream_options).
_NO_STREAM = frozenset({400, 404, 415, 422, 501})


def _chunk_of(text: str, status: int, headers: Mapping[str, str], key: str | None) -> Any:
    """Return one streamed chunk decoded.

    Raises:
        ProviderError: it is not JSON, or it is an error event (OpenAI sends ``{"error"}``).
    """
    try:
        chunk = json.loads(text)
    except ValueError:
        raise _not_json(status, text, headers.get("x-request-id")) from None
    if not isinstance(chunk, dict):
        raise _not_json(status, chunk, headers.get("x-request-id"))
    if "error" in chunk and not chunk.get("choices"):
        raise _translate_status(500, chunk, headers, key)
    return chunk


def _as_chunk(data: Mapping[str, Any]) -> dict[str, Any]:
    """Return a whole chat answer (a server that did not stream) as the one chunk it amounts
    to, so it is read as a streamed answer is."""
    choices = []
    for choice in data.get("choices") or ():
        if isinstance(choice, Mapping):
            message = choice.get("message") or {}
            choices.append(
                {
                    "index": choice.get("index", 0),
                    "delta": dict(message) if isinstance(message, Mapping) else {},
                    "finish_reason": choice.get("finish_reason"),
                }
            )
    return {"model": data.get("model"), "choices": choices, "usage": data.get("usage")}


def _not_json(status: int, body: Any, request_id: str | None) -> ProviderError:
    """Return the error for a success answer whose body is not a JSON object (both transports
    word it alike: its first line, never a parser's traceback)."""
    shown = _first_line(body) if isinstance(body, str) else type(body).__name__
    return ProviderError(
        f"OpenAI API answered {status} with a body that is not a JSON object"
        + (f": {shown}" if shown else " (empty)"),
        status=status,
        request_id=request_id,
        provider="openai",
    )
