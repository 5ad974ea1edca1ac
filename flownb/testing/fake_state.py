"""What a loopback fake keeps between requests: its counters and records (requests received,
answers sent, peak in flight, faults sent, rate-limit windows, streams), shared by the OpenAI,
Anthropic and Gemini fakes.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Mapping
from typing import Any

from .fake_batches import BatchBackend
from .fake_config import FAULTS, FakeConfig
from .fake_message_batches import MessageBatches
from .fake_replies import _answer, _prompt_of


class _State:
    def __init__(self, config: FakeConfig) -> None:
        self.config = config
        self.rng = random.Random(config.seed)
        self.requests: list[dict[str, Any]] = []  # every body received, in arrival order
        self.paths: list[str] = []
        self.queries: list[dict[str, str]] = []
        self.headers: list[dict[str, str]] = []
        self.images: dict[str, str] = {}  # image id -> prompt, for the URLs answered
        self.image_headers: list[dict[str, str]] = []  # headers of every image download
        self.in_flight = 0  # every request being served (what max_in_flight counts)
        # When the first request since the last reset arrived (time.time(): comparable with
        # another process's clock, for a client's time from its call to its first request).
        self.first_request_at: float | None = None
        # The peak counts only requests that arrived since the last reset: one a previous test
        # left hanging (the client gave up; the fake notices within 0.1 s) is not this test's.
        self.peak_in_flight = 0
        self._epoch = 0
        self._epoch_in_flight = 0
        self.answered = 0  # 200s sent
        self.answered_prompts: list[str] = []  # the prompt of every 200 sent, in order
        # Client port -> the prompt of the 200 last sent on that connection, until the client
        # sends its next request on it (None: its last answer was no 200, or is not sent yet).
        self.last_answer: dict[int, str | None] = {}
        self.faults_sent: dict[str, int] = dict.fromkeys(FAULTS, 0)
        self.limited = 0  # 429s sent by the rate limit (max_in_flight / rate_limit)
        self.window_start = 0.0
        self.window_used = 0
        self.batches = BatchBackend(config, self.answer_live)
        # Anthropic's Message Batches (the Anthropic fake mounts them and says how to answer).
        self.message_batches = MessageBatches(config)
        # Per streamed answer: (perf_counter time, word) for every word, as it was sent.
        self.streams: list[list[tuple[float, str]]] = []
        self.cut_prompts: set[str] = set()  # prompts whose stream was cut once (stream_cut)

    def sent(self, prompt: str, port: int | None = None) -> None:
        """Count a 200 answer to ``prompt`` as sent and, given the client's ``port``, as the
        answer that connection may not have read yet (see ``last_answer``)."""
        self.answered += 1
        self.answered_prompts.append(prompt)
        if port is not None:
            self.last_answer[port] = prompt

    def answer_live(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """Return the body the fake answers ``body`` with on ``path`` (for batch lines)."""
        return _answer(path, body, _prompt_of(path, body), self.config, images=self.images)

    def reset(self) -> None:
        self.rng = random.Random(self.config.seed)
        self.batches.reset()
        self.message_batches.reset()
        self.requests.clear()
        self.paths.clear()
        self.queries.clear()
        self.headers.clear()
        self.image_headers.clear()
        self._epoch += 1
        self._epoch_in_flight = 0
        self.first_request_at = None
        self.peak_in_flight = 0
        self.answered = 0
        self.answered_prompts.clear()
        self.last_answer.clear()
        self.streams.clear()
        self.cut_prompts.clear()
        self.faults_sent = dict.fromkeys(FAULTS, 0)
        self.limited = 0
        self.window_start = 0.0
        self.window_used = 0

    def enter(self) -> int:
        """Count a request in flight; return the token :meth:`leave` takes back."""
        if self.first_request_at is None:
            self.first_request_at = time.time()
        self.in_flight += 1
        self._epoch_in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self._epoch_in_flight)
        return self._epoch

    def leave(self, token: int) -> None:
        """Count a request out of flight (``token``: what :meth:`enter` returned)."""
        self.in_flight -= 1
        if token == self._epoch:
            self._epoch_in_flight -= 1

    def stats(self) -> dict[str, Any]:
        return {
            "requests": len(self.requests),
            "answered": self.answered,
            "peak_in_flight": self.peak_in_flight,
            "in_flight": self.in_flight,
            "faults": dict(self.faults_sent),
            "limited": self.limited,
            "first_request_at": self.first_request_at,
        }

    def take_quota(self) -> tuple[bool, dict[str, str]]:
        """Count a request against ``rate_limit``: return whether it is within the limit, and
        the rate-limit headers to answer with (none when no rate limit is set)."""
        limit = self.config.rate_limit
        if limit is None:
            return True, {}
        window = self.config.rate_window
        now = time.monotonic()
        if now - self.window_start >= window:
            self.window_start, self.window_used = now, 0
        allowed = self.window_used < limit
        if allowed:
            self.window_used += 1
        reset = max(0.0, self.window_start + window - now)
        headers = {
            "x-ratelimit-limit-requests": str(limit),
            "x-ratelimit-remaining-requests": str(limit - self.window_used),
            "x-ratelimit-reset-requests": duration(reset),
        }
        if not allowed:
            # Whole seconds, at least 1, as the vendors send it; a test that opted into speed
            # (retry_after="0") hears the exact wait.
            fast = self.config.retry_after == "0"
            headers["Retry-After"] = f"{reset:.3f}" if fast else str(max(1, math.ceil(reset)))
        return allowed, headers

    def pick_fault(self, prompt: str) -> str | None:
        for fault, marker in self.config.fail_markers.items():
            if marker and marker in prompt:
                return fault
        roll = self.rng.random()
        for fault in FAULTS:
            share = self.config.faults.get(fault, 0.0)
            if roll < share:
                return fault
            roll -= share
        return None


def duration(seconds: float) -> str:
    """Return ``seconds`` in OpenAI's rate-limit duration format: "6m0s", "1.5s", "20ms"."""
    if seconds < 1:
        return f"{max(1, round(seconds * 1000))}ms"
    minutes, rest = divmod(seconds, 60)
    if minutes:
        return f"{int(minutes)}m{rest:.0f}s"
    return f"{rest:.3g}s"
