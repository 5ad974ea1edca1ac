"""Throughput controls shared by every provider call of a run: an adaptive concurrency limit that
also paces by the provider's rate-limit headers, a requests-per-minute pace, and the retry policy
(tenacity) for 429s, 5xx, timeouts and dropped connections.
"""

from __future__ import annotations

import asyncio
import collections
import random
import time
from typing import Any

from tenacity import RetryCallState, wait_random_exponential

from ..errors import ProviderError, ProviderTimeout, RateLimited
from .base import RateLimits

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


class _Quota:
    """One of the provider's rate-limit windows (requests or tokens), as its headers last said:
    what is left, when it is replenished, and how much we spent since that answer."""

    __slots__ = ("left", "limit", "reset_at", "seen")

    def __init__(self) -> None:
        self.left: float | None = None  # None: unknown, do not hold anything back
        self.limit: float | None = None
        self.reset_at = 0.0
        self.seen = -1  # start number of the request whose answer we last read

    def observe(self, remaining: int | None, reset: float | None, limit: int | None,
                seq: int, spent_since: float, now: float) -> None:  # fmt: skip
        """Take in an answer's figures; ``spent_since`` is what we started after its request
        (the provider had not counted it yet). Older answers than one already read are stale."""
        if remaining is None or seq < self.seen:
            return
        self.seen = seq
        self.left = remaining - spent_since
        if limit is not None:
            self.limit = float(limit)
        self.reset_at = now + reset if reset is not None else now + 1.0

    def wait(self, cost: float, now: float) -> float:
        """Return 0.0 and spend ``cost`` if it fits, else the seconds until the window resets."""
        left = self.left
        if left is None:
            return 0.0
        if left <= 0:
            if now < self.reset_at:
                return self.reset_at - now
            left = self.left = self.limit  # replenished (unknown size: stop holding back)
            if left is None:
                return 0.0
        self.left = left - cost
        return 0.0


class AdaptiveLimiter:
    """At most ``limit`` calls in flight; fewer while the provider is limiting us, and paced by
    the provider's own rate-limit headers when it sends them. Use as ``async with limiter:``.

    Three signals, three responses:

    - **Rate-limit headers** (:class:`RateLimits`, given to :meth:`succeeded` / :meth:`rejected`):
      requests and tokens left in the provider's window, less what we started since, are spent
      by each start; when none is left, starts wait until the window resets. So a provider that
      says how much it allows is paced *before* it answers 429.
    - **A 429 while most recent calls were answered, also at its in-flight level and above**:
      a random refusal (a busy replica, a burst on the provider's side). Nothing changes; the
      retry goes out at once (Retry-After) and usually succeeds. Halving here is what cost a
      quarter of the run under 10% random 429s.
    - **A 429 while most recent calls (overall, or at its level and above) were refused, or
      at a level above the highest that worked**: a real concurrency limit. The allowance drops
      to just under that level (not halved: the level estimates the provider's limit), and
      grows past the highest level that worked only slowly (one slot per ``8 x allowed``
      successes), so probing the limit costs about one 429 per probe.

    :meth:`rate_limited` is the blunt signal (halve, at most once per ``cooldown`` seconds), for
    callers with nothing better to go on. Waiters are served first come, first served.
    """

    # Successes without a recent 429 needed for one slot above the highest level that worked.
    probe_every = 8

    def __init__(self, limit: int, pacer: Pacer | None = None, cooldown: float = 1.0) -> None:
        if limit < 1:
            raise ValueError("limit must be at least 1")
        self.limit = limit
        self.allowed = float(limit)
        self.in_flight = 0
        self.started = 0  # requests started so far: a start's number orders the answers
        self.cooldown = cooldown
        self.cuts = 0  # how many times the limit was lowered (observable in tests)
        self.held = 0.0  # seconds starts waited for the provider's window (observable)
        self._pacer = pacer
        self._last_cut = -1e9
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self.ceiling = float(limit)  # the highest in-flight level known to work
        # (level a call started at, whether it was refused) of recent calls
        self._samples: collections.deque[tuple[int, bool]] = collections.deque(
            maxlen=max(32, 4 * limit)
        )
        self._recent: collections.deque[bool] = collections.deque(maxlen=16)  # True: refused
        self._requests = _Quota()
        self._tokens = _Quota()
        self._tokens_per_call = 0.0  # running mean of usage.total_tokens, to spend tokens ahead

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
                elif fut in self._waiters:  # _wake drops cancelled waiters itself
                    self._waiters.remove(fut)
                raise
        try:
            if self._requests.left is not None or self._tokens.left is not None:
                await self._hold()
            if self._pacer is not None and self._pacer.interval:
                await self._pacer.wait()
        except BaseException:
            self._release()
            raise
        self.started += 1

    async def _hold(self) -> None:
        """Wait while the provider's window has nothing left for this start, then spend."""
        while True:
            now = time.monotonic()
            wait = self._requests.wait(1.0, now)
            if not wait:
                wait = self._tokens.wait(self._tokens_per_call, now)
                if wait and self._requests.left is not None:
                    self._requests.left += 1.0  # spent above, but this start waits: give back
            if not wait:
                return
            self.held += wait
            await asyncio.sleep(wait)

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

    def _observe(self, limits: RateLimits, seq: int) -> None:
        now = time.monotonic()
        since = self.started - seq  # started after that request: not counted in its answer
        self._requests.observe(
            limits.remaining_requests, limits.reset_requests, limits.limit_requests,
            seq, float(since), now,
        )  # fmt: skip
        self._tokens.observe(
            limits.remaining_tokens, limits.reset_tokens, limits.limit_tokens,
            seq, since * self._tokens_per_call, now,
        )  # fmt: skip

    def _share_refused(self, level: int) -> tuple[int, int]:
        """Return (429s, answers) among recent calls that started at ``level`` or above."""
        bad = total = 0
        for lvl, refused in self._samples:
            if lvl >= level:
                total += 1
                bad += refused
        return bad, total

    def succeeded(
        self,
        level: int = 0,
        seq: int = 0,
        limits: RateLimits | None = None,
        *,
        tokens: int | None = None,
    ) -> None:
        """Count a successful call that started as number ``seq`` with ``level`` calls in flight
        (itself included): the allowance regrows (one slot per round of calls up to the highest
        level that works, slower beyond), and ``limits`` (the answer's rate-limit headers)
        update the pace."""
        if tokens:
            mean = self._tokens_per_call
            self._tokens_per_call = mean + (tokens - mean) * 0.1 if mean else float(tokens)
        if limits is not None:
            self._observe(limits, seq)
        self._recent.append(False)
        if level:
            self._samples.append((level, False))
            if level > self.ceiling:
                bad, total = self._share_refused(level)
                if total >= 8 and 8 * bad < total:  # hardly ever refused up there: it works
                    self.ceiling = float(level)
        allowed = self.allowed
        if allowed < self.limit:
            step = 1.0 / allowed if allowed < self.ceiling else 1.0 / (self.probe_every * allowed)
            self.allowed = min(float(self.limit), allowed + step)
            self._wake()

    def rejected(self, level: int = 0, seq: int = 0, limits: RateLimits | None = None) -> None:
        """Count a 429 for the call that started as number ``seq`` with ``level`` calls in flight.

        With rate-limit headers the pace takes it from here (starts wait for the window). Without,
        a 429 above the highest level known to work, or while most recent calls were refused,
        lowers the allowance to ``level - 1`` (the estimate of the provider's
        concurrency limit); any other 429 is random and changes nothing.
        """
        if limits is not None and (
            limits.remaining_requests is not None or limits.remaining_tokens is not None
        ):
            self._observe(limits, seq)
            return
        if level < 1:
            self.rate_limited()
            return
        self._samples.append((level, True))
        recent = self._recent
        recent.append(True)
        if level <= self.ceiling and (len(recent) < 4 or 2 * sum(recent) < len(recent)):
            bad, total = self._share_refused(level)
            if total < 4 or 2 * bad < total:
                return  # most recent calls were answered, at this level too: a random refusal
        ceiling = max(1.0, float(level - 1))
        if ceiling < self.allowed:
            self.allowed = ceiling
            self.cuts += 1
        self.ceiling = min(self.ceiling, self.allowed)

    def rate_limited(self) -> None:
        """Count a 429 with nothing to go on: halve the limit, unless it was just cut."""
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
