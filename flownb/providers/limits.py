"""Throughput controls shared by every provider call of a run: an adaptive concurrency limit, a
requests-per-minute pace, and the retry policy (tenacity) for 429s, 5xx, timeouts and dropped
connections.
"""

from __future__ import annotations

import asyncio
import collections
import random
import time
from typing import Any

from tenacity import RetryCallState, wait_random_exponential

from ..errors import ProviderError, ProviderTimeout, RateLimited

__all__ = ["AdaptiveLimiter", "Pacer", "retryable", "wait_for_retry"]


class Pacer:
    """Spaces request starts at least ``60 / rpm`` seconds apart (``rpm=None``: no pacing).

    Pure arithmetic on a monotonic clock, so one pacer can serve runs on different loops.
    """

    def __init__(self, rpm: float | None) -> None:
        self.interval = 60.0 / rpm if rpm else 0.0
        self._next = 0.0

    async def wait(self) -> None:
        """Return when the next request may start."""
        if not self.interval:
            return
        now = time.monotonic()
        start = max(now, self._next)
        self._next = start + self.interval
        if start > now:
            await asyncio.sleep(start - now)


class AdaptiveLimiter:
    """At most ``limit`` calls in flight; fewer while the provider is rate-limiting us.

    Additive increase, multiplicative decrease: each 429 halves the allowed number of calls (at
    most once per ``cooldown`` seconds, so one burst of 429s is one cut), and each success adds
    ``1/allowed``, regrowing by about one slot per round of successful calls up to ``limit``.
    Waiters are served first come, first served. Use as ``async with limiter:``.
    """

    def __init__(self, limit: int, pacer: Pacer | None = None, cooldown: float = 1.0) -> None:
        if limit < 1:
            raise ValueError("limit must be at least 1")
        self.limit = limit
        self.allowed = float(limit)
        self.in_flight = 0
        self.cooldown = cooldown
        self.cuts = 0  # how many times the limit was lowered (observable in tests)
        self._pacer = pacer
        self._last_cut = -1e9
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()

    @property
    def capacity(self) -> int:
        """How many calls may be in flight right now."""
        return max(1, int(self.allowed))

    async def __aenter__(self) -> None:
        if self.in_flight < self.capacity and not self._waiters:
            self.in_flight += 1
        else:
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(fut)
            try:
                await fut  # the releaser counted us in before waking us
            except asyncio.CancelledError:
                if fut.done() and not fut.cancelled():
                    self._release()  # woken and cancelled at once: hand the slot on
                else:
                    self._waiters.remove(fut)
                raise
        if self._pacer is not None and self._pacer.interval:
            try:
                await self._pacer.wait()
            except BaseException:
                self._release()
                raise

    async def __aexit__(self, *exc: object) -> None:
        self._release()

    def _release(self) -> None:
        self.in_flight -= 1
        self._wake()

    def _wake(self) -> None:
        waiters = self._waiters
        while waiters and self.in_flight < self.capacity:
            fut = waiters.popleft()
            if not fut.done():
                self.in_flight += 1
                fut.set_result(None)

    def succeeded(self) -> None:
        """Count a successful call: regrow the limit slowly."""
        if self.allowed < self.limit:
            self.allowed = min(float(self.limit), self.allowed + 1.0 / self.allowed)
            self._wake()

    def rate_limited(self) -> None:
        """Count a 429: halve the limit, unless it was just cut."""
        now = time.monotonic()
        if now - self._last_cut >= self.cooldown:
            self._last_cut = now
            self.allowed = max(1.0, self.allowed / 2)
            self.cuts += 1


def retryable(exc: BaseException) -> bool:
    """Return whether a failed call is worth another attempt: rate limits, timeouts, server
    errors (5xx, 408, 409) and calls that never got an answer (no status)."""
    if isinstance(exc, RateLimited | ProviderTimeout):
        return True
    if isinstance(exc, ProviderError):
        return exc.status is None or exc.status >= 500 or exc.status in (408, 409)
    return False


_backoff = wait_random_exponential(multiplier=0.25, max=20.0)  # full jitter, 0.5 s, 1 s, ...


def wait_for_retry(state: RetryCallState) -> float:
    """Return seconds to wait before the next attempt: the provider's Retry-After when it gave
    one (``0`` means at once, plus a few ms of jitter so a burst does not come back in lockstep),
    else exponential backoff with full jitter."""
    exc: Any = state.outcome.exception() if state.outcome is not None else None
    hint = getattr(exc, "retry_after", None)
    if hint is not None:
        return min(float(hint), 60.0) + random.uniform(0.0, 0.005 + 0.1 * min(float(hint), 1.0))
    return _backoff(state)
