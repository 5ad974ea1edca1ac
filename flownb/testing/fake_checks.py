"""What the fakes refuse, as their vendors do: every request body is checked against the
vendor's own published request types, strictly (an unknown field anywhere, a wrong type, a
missing required field), and against the model rules of
:mod:`flownb.providers.model_rules`; a refusal carries the vendor's own message.

The types are the official SDKs' request parameter types (``openai``'s
``CompletionCreateParams`` for chat and ``/completions`` and ``ImageGenerateParams``;
``anthropic``'s ``MessageCreateParams``), read with pydantic as strict validators (every typed
dict forbids extra keys, every iterable is read whole), and ``google-genai``'s ``Content`` and
``GenerationConfig`` models (which forbid extra keys themselves) under the REST request's own
top-level fields. An SDK that is not installed leaves its vendor's bodies unchecked by type
(the model rules still apply). Validators are built once per process.
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..providers.model_rules import rule_for

__all__ = ["Refusal", "anthropic_refusal", "gemini_refusal", "openai_refusal", "warm"]


@dataclass(frozen=True)
class Refusal:
    """Why a vendor refuses a request: its message, the field at fault (``param``, OpenAI's)
    and OpenAI's error ``code`` (``None`` where it sends none)."""

    message: str
    param: str | None = None
    code: str | None = None


def _strict(schema: Any) -> Any:
    """Return a pydantic core schema made strict in place: typed dicts forbid extra keys, and
    iterables (validated lazily by pydantic) are read as lists, so every item is checked."""
    if isinstance(schema, dict):
        if schema.get("type") == "typed-dict":
            schema["extra_behavior"] = "forbid"
        if schema.get("type") == "generator":
            schema["type"] = "list"
        for value in schema.values():
            _strict(value)
    elif isinstance(schema, list):
        for value in schema:
            _strict(value)
    return schema


@functools.cache
def _validator(module: str, name: str) -> Any:
    """Return the strict validator of the SDK type ``module.name``, or None when the SDK is not
    installed."""
    import importlib

    from pydantic import TypeAdapter
    from pydantic_core import SchemaValidator

    try:
        kind = getattr(importlib.import_module(module), name)
    except ImportError:
        return None
    return SchemaValidator(_strict(copy.deepcopy(TypeAdapter(kind).core_schema)))


def _first_error(validator: Any, body: Mapping[str, Any]) -> dict[str, Any] | None:
    """Return the first error of ``body`` under ``validator`` (None when it passes), preferring
    the error of a union's member whose discriminating literal matched."""
    from pydantic_core import ValidationError

    try:
        validator.validate_python(dict(body), strict=True)
    except ValidationError as exc:
        errors = exc.errors()
        # A union's members each report; the telling one is not a literal mismatch.
        telling = [e for e in errors if e["type"] != "literal_error"] or errors
        return dict(telling[0])
    return None


def _path(loc: tuple[Any, ...], drop_types: bool = True) -> str:
    """Return a location as a dotted path, without the union members' type names."""
    parts = [str(p) for p in loc if not (drop_types and isinstance(p, str) and p[:1].isupper())]
    return ".".join(parts)


_CHAT = "openai.types.chat.completion_create_params"
_COMPLETIONS = "openai.types.completion_create_params"
_IMAGES = "openai.types.image_generate_params"
_OPENAI_TYPES = {
    ("chat", False): (_CHAT, "CompletionCreateParamsNonStreaming"),
    ("chat", True): (_CHAT, "CompletionCreateParamsStreaming"),
    ("completions", False): (_COMPLETIONS, "CompletionCreateParamsNonStreaming"),
    ("completions", True): (_COMPLETIONS, "CompletionCreateParamsStreaming"),
    ("images", False): (_IMAGES, "ImageGenerateParamsNonStreaming"),
    ("images", True): (_IMAGES, "ImageGenerateParamsStreaming"),
}
_ANTHROPIC_TYPES = {
    False: ("anthropic.types.message_create_params", "MessageCreateParamsNonStreaming"),
    True: ("anthropic.types.message_create_params", "MessageCreateParamsStreaming"),
}


def warm(vendor: str) -> None:
    """Build ``vendor``'s validators now (``"openai"``, ``"anthropic"``, ``"gemini"``): imports
    of the SDKs' types take seconds on a busy machine, paid when a fake starts, not inside a
    request whose client is waiting."""
    if vendor == "openai":
        for module, name in _OPENAI_TYPES.values():
            _validator(module, name)
    elif vendor == "anthropic":
        for module, name in _ANTHROPIC_TYPES.values():
            _validator(module, name)
    elif vendor == "gemini":
        try:
            from google.genai import types
        except ImportError:
            return
        types.Content.model_validate_json('{"parts": [{"text": ""}]}')
        types.GenerationConfig.model_validate_json("{}")


def _kind(path: str) -> str:
    if path.endswith("/chat/completions"):
        return "chat"
    if path.endswith("/images/generations"):
        return "images"
    return "completions"


def openai_refusal(path: str, body: Mapping[str, Any]) -> Refusal | None:
    """Return why OpenAI refuses ``body`` posted to ``path`` (chat, ``/completions`` or
    images, OpenAI's or Azure's form), or None when it accepts it."""
    if "model" not in body and "/deployments/" not in path:
        return Refusal("you must provide a model parameter", None, None)
    kind = _kind(path)
    module, name = _OPENAI_TYPES[kind, body.get("stream") is True]
    validator = _validator(module, name)
    if "/deployments/" in path and "model" not in body:
        body = {**body, "model": "deployment"}  # Azure names the model in the path
    error = _first_error(validator, body) if validator is not None else None
    if error is not None:
        loc = _path(tuple(error["loc"]))
        if error["type"] == "extra_forbidden":
            return Refusal(f"Unrecognized request argument supplied: {loc}", None, None)
        if error["type"] == "missing":
            return Refusal(
                f"Missing required parameter: '{loc}'.", loc, "missing_required_parameter"
            )
        return Refusal(
            f"Invalid type for '{loc}': {error['msg']}, but got {error['input']!r} instead.",
            loc,
            "invalid_type",
        )
    if kind == "images" and body.get("response_format") is not None:
        model = str(body.get("model") or "")
        if model.startswith("gpt-image"):
            return Refusal(
                "Unknown parameter: 'response_format'.", "response_format", "unknown_parameter"
            )
    return _openai_rule(body) if kind == "chat" else None


def _openai_rule(body: Mapping[str, Any]) -> Refusal | None:
    """Return OpenAI's refusal of a knob the model's rule says it does not take."""
    rule = rule_for(str(body.get("model") or ""))
    if rule is None:
        return None
    for knob in rule.takes_none:
        if knob in body:
            return Refusal(
                f"Unsupported parameter: '{knob}' is not supported with this model.",
                knob,
                "unsupported_parameter",
            )
    if "max_tokens" in body:
        return Refusal(
            "Unsupported parameter: 'max_tokens' is not supported with this model. Use "
            "'max_completion_tokens' instead.",
            "max_tokens",
            "unsupported_parameter",
        )
    return None


# The sampling knobs Anthropic's API takes though the SDK's types no longer list them (the SDK
# sends them as extra body fields): each a number, bounded as the API documents.
_CLAUDE_KNOBS = {"temperature": (0.0, 1.0), "top_p": (0.0, 1.0), "top_k": (0.0, None)}


def anthropic_refusal(body: Mapping[str, Any]) -> str | None:
    """Return the message Anthropic refuses ``body`` with (400 ``invalid_request_error``), or
    None when it accepts it."""
    model = str(body.get("model") or "")
    rule = rule_for(model)
    rest = dict(body)
    knobs = {k: rest.pop(k) for k in _CLAUDE_KNOBS if k in rest}
    validator = _validator(*_ANTHROPIC_TYPES[body.get("stream") is True])
    error = _first_error(validator, rest) if validator is not None else None
    if error is not None:
        return f"{_path(tuple(error['loc']))}: {error['msg']}"
    for knob, value in knobs.items():
        low, high = _CLAUDE_KNOBS[knob]
        if isinstance(value, bool) or not isinstance(value, int | float):
            return f"{knob}: Input should be a valid number"
        if value < low:
            return f"{knob}: Input should be greater than or equal to {low:g}"
        if high is not None and value > high:
            return f"{knob}: Input should be less than or equal to {high:g}"
    if rule is None:
        return None
    for knob in rule.takes_none:
        if knob in knobs:
            return f"`{knob}` is deprecated for this model."
    if rule.one_of is not None and all(k in knobs for k in rule.one_of):
        return rule.vendor_says
    return None


# The REST GenerateContentRequest's fields (https://ai.google.dev/api/generate-content).
_GEMINI_FIELDS = frozenset(
    {
        "contents",
        "tools",
        "toolConfig",
        "safetySettings",
        "systemInstruction",
        "generationConfig",
        "cachedContent",
    }
)


def gemini_refusal(model: str, body: Mapping[str, Any]) -> str | None:
    """Return the message Gemini refuses ``body`` for ``model`` with (400 INVALID_ARGUMENT),
    or None when it accepts it."""
    for name in body:
        if name not in _GEMINI_FIELDS:
            return f'Invalid JSON payload received. Unknown name "{name}": Cannot find field.'
    contents = body.get("contents")
    if not isinstance(contents, list) or not contents:
        return "* GenerateContentRequest.contents: contents is not specified"
    problem = _gemini_types(body, contents)
    if problem is not None:
        return problem
    config = body.get("generationConfig") or {}
    rule = rule_for(model)
    if rule is not None:
        for knob in rule.no_nonzero:
            camel = "".join(w.capitalize() if i else w for i, w in enumerate(knob.split("_")))
            if config.get(camel):
                return rule.vendor_says.format(model=model)
    return None


def _gemini_types(body: Mapping[str, Any], contents: list[Any]) -> str | None:
    """Return Google's message for the first part of ``body`` google-genai's types refuse
    (None when all pass, or when google-genai is not installed)."""
    try:
        from google.genai import types
    except ImportError:
        return None
    checked: list[tuple[str, Any, Any]] = [
        (f"contents[{i}]", types.Content, c) for i, c in enumerate(contents)
    ]
    if "systemInstruction" in body:
        checked.append(("system_instruction", types.Content, body["systemInstruction"]))
    if "generationConfig" in body:
        checked.append(("generation_config", types.GenerationConfig, body["generationConfig"]))
    for where, kind, value in checked:
        problem = _gemini_field(where, kind, value)
        if problem is not None:
            return problem
    return None


def _gemini_field(where: str, kind: Any, value: Any) -> str | None:
    """Return Google's message for a part of the body its type refuses, or None."""
    from pydantic import ValidationError

    try:
        kind.model_validate_json(json.dumps(value), strict=True)
    except ValidationError as exc:
        error = exc.errors()[0]
        loc = _path(tuple(error["loc"]), drop_types=False)
        if error["type"] == "extra_forbidden":
            name = loc.rsplit(".", 1)[-1]
            return (
                f"Invalid JSON payload received. Unknown name \"{name}\" at '{where}': "
                "Cannot find field."
            )
        return f"Invalid value at '{where}.{loc}' ({error['msg']}), {json.dumps(error['input'])}"
    return None
