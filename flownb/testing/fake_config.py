"""How a loopback fake is told to behave: :class:`FakeConfig` (latency, faults and their
markers, rate limits, scripted replies and answers, streaming), changed at run time through
``configure`` or ``POST /_fake/config``. The OpenAI, Anthropic and Gemini fakes share it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

FAULTS = ("429", "500", "hang", "drop")


@dataclass
class FakeConfig:
    """How the fake behaves. ``faults`` maps a fault (``"429"``, ``"500"``, ``"hang"``,
    ``"drop"``) to the share of requests that get it; ``fail_markers`` maps a fault to a substring:
    every request whose prompt contains it gets that fault."""

    latency: float = 0.0
    faults: dict[str, float] = field(default_factory=dict)
    fail_markers: dict[str, str] = field(default_factory=dict)
    # The Retry-After of a 429, in whole seconds as the vendors send it (at least 1); a test
    # that needs speed says so with retry_after="0".
    retry_after: str | None = "1"
    seed: int = 0
    image_format: str = "url"  # what images answer when the request does not say
    max_in_flight: int | None = None  # 429 at once beyond this many requests being served
    rate_limit: int | None = None  # requests per rate_window; 429 (with headers) beyond it
    rate_window: float = 60.0
    # Faults answered at once, before the latency (as a provider's front door refuses), instead
    # of after it (as a busy replica does).
    faults_first: bool = False
    # Scripted text answers: marker -> reply, for every prompt containing the marker (the
    # first marker that matches wins). ``{score}`` in a reply becomes a number in [0, 1] drawn
    # from the prompt's digest, so a fake judge gives different, reproducible grades.
    replies: dict[str, str] = field(default_factory=dict)
    # The Batches API (see fake_batches.py): seconds from creation to completion, the marker of
    # lines that fail, and whether batches expire with half their lines answered.
    batch_seconds: float = 1.0
    batch_fail_marker: str = ""
    batch_expire: bool = False
    batch_create_delay: float = 0.0  # seconds a create is answered after the batch exists
    # Anthropic's batches: replies without their request counts (a reply seen in the wild).
    batch_no_counts: bool = False
    # Scripted HTTP answers: marker -> answer, for every prompt containing the marker (the first
    # marker that matches wins), sent after the latency instead of the usual one. An answer is
    # a dict of: ``status`` (200), ``headers``, and one of ``json`` (the whole body, sent as
    # JSON), ``text`` (a raw body; ``content_type`` defaults to text/html when it starts with
    # "<"), or ``message`` / ``finish_reason`` / ``choices`` / ``data`` (the usual answer with
    # the first choice's message or finish reason replaced, or its choices / image data list).
    answers: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Share of requests answered 429 at once, before any latency (a provider shedding load).
    instant_429: float = 0.0
    # Extra usage sections merged into every text answer's usage (prompt_tokens_details, ...).
    usage_details: dict[str, Any] = field(default_factory=dict)
    # Provider prompt caching: every text answer reports this many of its prompt tokens as read
    # from the provider's cache (at most all of them), in each vendor's own fields: OpenAI's
    # usage.prompt_tokens_details.cached_tokens, Anthropic's cache_read_input_tokens, Gemini's
    # usageMetadata.cachedContentTokenCount. ``cache_write_tokens``: Anthropic's
    # cache_creation_input_tokens (the others do not report writes).
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    # Seconds between two words of a streamed answer (``stream: true``).
    stream_delay: float = 0.0
    # marker -> N: the first streamed answer to a prompt containing the marker is cut off (the
    # connection dropped) after N words; the prompt's next request streams whole.
    stream_cut: dict[str, int] = field(default_factory=dict)
    # Answer every ``stream: true`` request 400, as a compatible server without streaming does.
    refuse_stream: bool = False
    # Prompts containing this marker are held (no answer yet) until it is set back to "": a
    # test keeps a run open until something else has happened, without guessing a duration.
    held: str = ""
    # Headers sent with every successful answer, streamed or not: what a gateway adds, such as
    # LiteLLM's ``x-litellm-response-cost`` (its price of the call, in US dollars).
    headers: dict[str, str] = field(default_factory=dict)

    def update(self, data: Mapping[str, Any]) -> None:
        """Change the fields named in ``data``; raises ValueError on unknown names or faults."""
        for key, value in data.items():
            if key not in self.__dataclass_fields__:
                raise ValueError(f"unknown fake setting {key!r}")
            setattr(self, key, value)
        unknown = (set(self.faults) | set(self.fail_markers)) - set(FAULTS)
        if unknown:
            raise ValueError(f"unknown faults {sorted(unknown)}; choose from {FAULTS}")
