"""What the loopback fakes answer, decided from the request alone: ``echo: <prompt>`` texts,
images (a PNG drawn from the prompt), verdicts to flownb's judge and pick-best prompts (see
:func:`judge_score`), scripted replies for a marker, and the words a stream sends.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import re
import time
from collections.abc import Mapping
from typing import Any

from .fake_config import FakeConfig


def echo(prompt: str, choice: int = 0) -> str:
    """Return the text the fake answers for ``prompt`` (choice 0 is the plain echo)."""
    return f"echo: {prompt}" if choice == 0 else f"echo[{choice}]: {prompt}"


def image_bytes(prompt: str) -> bytes:
    """Return the small PNG the fake answers for ``prompt`` (same prompt, same bytes)."""
    from PIL import Image

    digest = hashlib.sha256(prompt.encode("utf-8")).digest()
    img = Image.new("RGB", (8, 8), tuple(digest[:3]))
    out = io.BytesIO()
    img.save(out, format="PNG")
    return out.getvalue()


def image_url(prompt: str, base: str = "https://images.invalid") -> str:
    """Return the URL the fake answers for ``prompt`` when asked for ``response_format=url``:
    under ``base`` (the fake's own address, which serves it as :func:`image_bytes` until the
    fake stops, as a provider's expiring URL would)."""
    return f"{base}/_fake/images/{image_id(prompt)}.png"


def image_id(prompt: str) -> str:
    """Return the name part of the image URL for ``prompt``."""
    return hashlib.sha256(prompt.encode()).hexdigest()[:32]


def seen_image(data: bytes | None, url: str = "") -> str:
    """Return how the fakes read an image a request shows the model, in the prompt text they
    answer: ``[image sha256:<hex>]`` of its bytes (``[image url:<url>]`` when it came as an
    http(s) URL), so a judge's verdict on it follows the image."""
    if data is None:
        return f"[image url:{url}]"
    return f"[image sha256:{hashlib.sha256(data).hexdigest()}]"


def data_url_bytes(url: str) -> bytes | None:
    """Return the bytes of a base64 ``data:`` URL, None for any other URL."""
    header, sep, payload = url.partition(",")
    if not (url.startswith("data:") and sep and header.endswith(";base64")):
        return None
    return base64.b64decode(payload)


def _chat_text(content: Any) -> str:
    """Return a chat message's content as the fake reads it: the text parts, and each
    ``image_url`` part as :func:`seen_image` says."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list) or not all(isinstance(p, dict) for p in content):
        return json.dumps(content)
    out = []
    for part in content:
        if part.get("type") == "text":
            out.append(str(part.get("text", "")))
        elif part.get("type") == "image_url":
            url = str((part.get("image_url") or {}).get("url", ""))
            out.append(seen_image(data_url_bytes(url), url))
        else:
            out.append(json.dumps(part))
    return "".join(out)


def _prompt_of(path: str, body: Mapping[str, Any]) -> str:
    if path.endswith("/chat/completions"):
        messages = body.get("messages") or [{}]
        return _chat_text(messages[-1].get("content", ""))
    prompt = body.get("prompt", "")
    return prompt if isinstance(prompt, str) else json.dumps(prompt)


def _usage(prompt: str, text: str, config: FakeConfig | None = None) -> dict[str, Any]:
    """Return a text answer's usage (words as tokens), with ``prompt_tokens_details`` when the
    fake reports cached prompt tokens (``config.cached_tokens``)."""
    p, c = len(prompt.split()), len(text.split())
    usage: dict[str, Any] = {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}
    cached = cache_split(p, config)[0] if config is not None else 0
    if cached:
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    return usage


def _chat_usage(usage: Mapping[str, Any]) -> dict[str, Any]:
    """Return a chat answer's usage with the detail sections OpenAI always sends."""
    prompt = {"cached_tokens": 0, "audio_tokens": 0, **usage.get("prompt_tokens_details", {})}
    completion = {
        "reasoning_tokens": 0,
        "audio_tokens": 0,
        "accepted_prediction_tokens": 0,
        "rejected_prediction_tokens": 0,
    }
    return {**usage, "prompt_tokens_details": prompt, "completion_tokens_details": completion}


def cache_split(prompt_tokens: int, config: FakeConfig) -> tuple[int, int]:
    """Return ``(read, written)``: how many of a prompt's tokens the fake reports as read from
    and written to the provider's prompt cache (``cached_tokens``, ``cache_write_tokens``), at
    most the prompt's tokens between them."""
    read = max(0, min(int(config.cached_tokens), prompt_tokens))
    written = max(0, min(int(config.cache_write_tokens), prompt_tokens - read))
    return read, written


def scripted_reply(prompt: str, replies: Mapping[str, str]) -> str | None:
    """Return the scripted reply for ``prompt`` (see ``FakeConfig.replies``), or None."""
    for marker, reply in replies.items():
        if marker and marker in prompt:
            score = hashlib.sha256(prompt.encode("utf-8")).digest()[0] / 255
            return reply.replace("{score}", f"{score:.2f}")
    return None


_GRADED = re.compile(r"\nOutput to grade:\n<<<\n(.*)\n>>>", re.DOTALL)


_CANDIDATE = re.compile(r"^Candidate (\d+):\n<<<\n(.*?)\n>>>$", re.DOTALL | re.MULTILINE)


def judge_score(text: str) -> float:
    """Return the fake judge's score for a graded ``text``: the first two bytes of its SHA-256
    read as a number over 65535, rounded to two decimals (in 0..1)."""
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return round(int.from_bytes(digest[:2], "big") / 65535, 2)


def judge_reply(prompt: str) -> str | None:
    """Return the fake's verdict for a flownb judge or pick_best prompt (JSON text), or None
    when ``prompt`` is neither."""
    from ..scorers import JUDGE_MARKER, PICK_MARKER

    if prompt.startswith(JUDGE_MARKER):
        graded = _GRADED.search(prompt)
        if graded is None:
            return None
        score = judge_score(graded.group(1))
        reason = f"fake verdict: {score:.2f} drawn from the graded text's digest"
        return json.dumps({"score": score, "reason": reason})
    if prompt.startswith(PICK_MARKER):
        candidates = [(int(k), judge_score(t)) for k, t in _CANDIDATE.findall(prompt)]
        if not candidates:
            return None
        best = max(candidates, key=lambda c: (c[1], -c[0]))[0]
        return json.dumps({"best": best, "reason": "fake verdict: the highest digest score"})
    return None


def scripted_answer(prompt: str, answers: Mapping[str, Mapping[str, Any]]) -> Any:
    """Return the scripted answer for ``prompt`` (see ``FakeConfig.answers``), or None."""
    for marker, answer in answers.items():
        if marker and marker in prompt:
            return answer
    return None


def _answer(
    path: str,
    body: Mapping[str, Any],
    prompt: str,
    config: FakeConfig,
    base: str = "https://images.invalid",
    images: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Return the OpenAI fake's usual answer to a request on ``path``: a chat completion, a
    completion, else images (each image URL's prompt put into ``images``)."""
    n = int(body.get("n") or 1)
    if not path.endswith("/completions"):
        return _images_answer(body, prompt, config, n, base, images)
    scripted = scripted_reply(prompt, config.replies)
    if scripted is None:
        scripted = judge_reply(prompt)
    texts = [scripted if scripted is not None else echo(prompt, i) for i in range(n)]
    if path.endswith("/chat/completions"):
        return _chat_answer(body, prompt, config, texts)
    return {
        "id": "cmpl-fake",
        "object": "text_completion",
        "created": int(time.time()),
        "model": body.get("model", ""),
        "choices": [
            {"index": i, "text": text, "finish_reason": "stop", "logprobs": None}
            for i, text in enumerate(texts)
        ],
        "usage": _usage(prompt, echo(prompt), config),
    }


def _chat_answer(
    body: Mapping[str, Any], prompt: str, config: FakeConfig, texts: list[str]
) -> dict[str, Any]:
    """Return a chat completion whose choices say ``texts``."""
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", ""),
        "choices": [
            {
                "index": i,
                "message": {
                    "role": "assistant",
                    "content": text,
                    "refusal": None,
                    "annotations": [],
                },
                "logprobs": None,
                "finish_reason": "stop",
            }
            for i, text in enumerate(texts)
        ],
        "usage": {**_chat_usage(_usage(prompt, echo(prompt), config)), **config.usage_details},
        "service_tier": "default",
        "system_fingerprint": "fp_fake",
    }


def _images_answer(
    body: Mapping[str, Any],
    prompt: str,
    config: FakeConfig,
    n: int,
    base: str,
    images: dict[str, str] | None,
) -> dict[str, Any]:
    """Return an images answer of ``n`` images of ``prompt``: base64, or URLs under ``base``
    (each URL's prompt put into ``images``)."""
    model = body.get("model", "")
    # GPT image models always answer base64 (they take no response_format); dall-e a URL
    # unless asked otherwise.
    gpt_image = str(model).startswith("gpt-image")
    fmt = "b64_json" if gpt_image else body.get("response_format") or config.image_format
    items: list[dict[str, str]] = []
    for i in range(n):
        p = prompt if i == 0 else f"{prompt} #{i}"
        if fmt == "b64_json":
            items.append({"b64_json": base64.b64encode(image_bytes(p)).decode("ascii")})
        else:
            items.append({"url": image_url(p, base)})
            if images is not None:
                images[image_id(p)] = p
    tokens = len(prompt.split())
    usage = {
        "input_tokens": tokens,
        "output_tokens": 272 * n,
        "total_tokens": tokens + 272 * n,
        "input_tokens_details": {"text_tokens": tokens, "image_tokens": 0},
    }
    answer: dict[str, Any] = {"created": int(time.time()), "data": items, "usage": usage}
    if gpt_image:  # what a GPT image model says of what it drew
        answer["background"] = body.get("background") or "opaque"
        answer["output_format"] = body.get("output_format") or "png"
        answer["quality"] = body.get("quality") or "high"
        answer["size"] = body.get("size") or "1024x1024"
    return answer


_WORDS = re.compile(r"\s+|\S+\s*")


def split_words(text: str) -> list[str]:
    """Return ``text`` as the pieces a fake streams: each word with the spaces after it."""
    return _WORDS.findall(text)
