"""Throughput controls shared by every provider call of a run: an adaptive concurrency limit that
also paces by the provider's rate-limit headers, a requests-per-minute pace, and the retry policy
(tenacity) for 429s, 5xx, timeouts and dropped connections.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import threading
import time
from typing import TYPE_CHECKING, Any

from ..error_map import retry_delay
from ..errors import ImageNotFetched, ProviderError, ProviderTimeout, RateLimited, RedirectRefused
from .base import RateLimits

if TYPE_CHECKING:
    from tenacity import RetryCallState

__all__ = ["AdaptiveLimiter", "Pacer", "retryable", "wait_for_retry"]


class Pacer:
    """Spaces request starts at least ``60 / rpm`` seconds apart (``rpm=None``: no pacing).

    Pure arithmetic on a monotonic clock, so one pacer can serve runs on different loops (and
    threads: the next slot is taken under a lock, so two starts never get the same one).
    """

    def __init__(self, rpm: float | None) -> None:
        self.interval = 60.0 / rpm if rpm else 0.0
        self._next = 0.0
        self._lock = threading.Lock()

    def take(self) -> float:
        """Claim the next start slot; return its time on the monotonic clock (now, or later)."""
        with self._lock:
            start = max(time.monotonic(), self._next)
            self._next = start + self.interval
        return start

    async def wait(self) -> None:
        """Return when the next request may start."""
        if not self.interval:
            return
        delay = self.take() - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)

    def __getstate__(self) -> dict[str, Any]:
        return {"interval": self.interval, "_next": self._next}  # a lock does not pickle

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()


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


# States of a start in the limiter's log.
_PENDING, _ANSWERED, _REFUSED = 0, 1, 2


class AdaptiveLimiter:
    """At most ``limit`` calls in flight; fewer while the provider is limiting us, and paced by
    the provider's own rate-limit headers when it sends them. Use as ``async with limiter:``.

    Three signals, three responses:

    - **Rate-limit headers** (:class:`RateLimits`, given to :meth:`succeeded` / :meth:`rejected`):
      requests and tokens left in the provider's window, less what we started since, are spent
      by each start; when none is left, starts wait until the window resets. So a provider that
      says how much it allows is paced *before* it answers 429.
    - **A real concurrency limit**: the limiter keeps a log of the last starts (the in-flight
      level each started at, and whether it was answered, refused or is still out). A limit is
      declared only when, at some level, *most calls started at or above it* were refused (at
      least :attr:`min_refusals` of them). A call still out counts as not refused: 429s answered
      at once cannot outvote the slower successes of the same burst before they arrive. The cut
      lands at the level that best splits refused from answered calls in the whole log (the
      fewest calls on the wrong side), so it does not depend on which refusal came in first.
      A refused call's slot is held back (not handed to the next call, nor to its own retry)
      until the next answer or cut: a burst over the limit costs its own 429s, not also those
      of the calls that would refill the refused slots before the cut.
    - **A steady share of 429s** (over a quarter of the last calls that ended, scattered over
      the levels): a busy client counts more calls in flight than the provider sees (answers
      wait to be read), which smears a real limit over every level; a quarter off, once per
      round, and a limit noted at the refused level. Only a call started since the last cut
      counts as a probe, and a probe refused above the highest level that worked, while a limit
      is known, comes back under at once: the client's lag is not read as room.
    - **Any other 429** is random (a busy replica, a burst on the provider's side): nothing
      changes, above the highest level known to work too; the retry goes out as Retry-After
      says once a slot is free (the refused call's own is free again at the next answer), and
      usually succeeds.

    The allowance regrows by one slot per round of calls up to the highest level known to work
    (:attr:`ceiling`), and probes beyond it slowly (one slot per ``probe_every x allowed``
    successes). A probe refused at the limit found before goes back under it at once (while the
    log still shows that level refused more often than those below it), so a real limit costs
    about one 429 per probe, and such a probe, among calls otherwise answered, doubles the wait
    for the next (a probe at a limit of 8 every 128 successes, not 64). Each
    probe that works speeds the next one up (doubling, up to a slot per round), so a cut that
    turns out wrong is undone in several hundred calls, not thousands.

    :meth:`rate_limited` is the blunt signal (halve, at most once per ``cooldown`` seconds), for
    callers with nothing better to go on. Waiters are served first come, first served.
    """

    # Successes without a recent 429 needed for one slot above the highest level that worked.
    probe_every = 8
    # Refusals at or above a level before it can be called a limit (fewer are chance).
    min_refusals = 6
    # The calls that ended last, read for the refusal share of the moment (see rejected): a
    # probe above the highest level that worked counts only while few of them were refused,
    # and a share above ``steady_share`` of them refused is a limit whatever their levels say.
    recent = 64
    quiet_share = 1.0 / 16
    steady_share = 0.25

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
        self._streak = 0  # probes above the ceiling that worked since the last cut
        self._probe_scale = 1.0  # doubles with each probe refused at a known limit (up to 8)
        self._limit_at: int | None = None  # the lowest level the provider was found to refuse
        # start number -> [level it started at, state], for the last ``_window`` starts.
        # Answers for numbers not logged (callers that never entered) get a number of their own.
        self._log: collections.OrderedDict[int, list[int]] = collections.OrderedDict()
        self._window = max(256, 8 * limit)
        self._unlogged = 0
        self._requests = _Quota()
        self._tokens = _Quota()
        self._tokens_per_call = 0.0  # running mean of usage.total_tokens, to spend tokens ahead
        self._next_share_cut = 0  # start number before which no steady-share cut is made
        self._cut_at = 0  # the start number at the last cut: later starts above it are probes
        # Slots of calls refused (429, no rate-limit headers) since the last answer, held back
        # until the next answer or cut: see rejected.
        self._lent = 0

    @property
    def capacity(self) -> int:
        """How many calls may be in flight right now."""
        return max(1, int(self.allowed) - self._lent)

    async def __aenter__(self) -> None:
        # The capacity written out (here and in _wake): these run twice for every call.
        if self.in_flight < max(1, int(self.allowed) - self._lent) and not self._waiters:
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
        # _record of a new start, written out (it runs for every call): its number is new.
        log = self._log
        log[self.started] = [self.in_flight, _PENDING]
        if len(log) > self._window:
            log.popitem(last=False)

    def _record(self, seq: int, level: int, state: int) -> None:
        log = self._log
        entry = log.get(seq) if seq > 0 else None
        if entry is not None and entry[1] == _PENDING:
            entry[1] = state
            return
        if entry is not None or seq <= 0:  # answered twice, or never logged: a sample of its own
            self._unlogged -= 1
            seq = self._unlogged
        log[seq] = [level, state]
        if len(log) > self._window:
            log.popitem(last=False)

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
        self.in_flight -= 1  # _release, written out: it runs for every call
        if self._waiters:
            self._wake()

    def _release(self) -> None:
        self.in_flight -= 1
        self._wake()

    def _wake(self) -> None:
        waiters = self._waiters
        capacity = max(1, int(self.allowed) - self._lent)
        while waiters and self.in_flight < capacity:
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

    def _counts(self) -> tuple[list[int], list[int]]:
        """Return (starts, refusals) in the log per level, 1 to ``limit`` (index 0 unused)."""
        top = self.limit
        starts = [0] * (top + 1)
        refused = [0] * (top + 1)
        for level, state in self._log.values():
            lvl = min(max(level, 1), top)
            starts[lvl] += 1
            if state == _REFUSED:
                refused[lvl] += 1
        return starts, refused

    def limit_level(self) -> int | None:
        """Return the lowest in-flight level the log says the provider refuses, or ``None``
        when it says no such thing (the 429s in it are random).

        A level qualifies when most calls started at or above it were refused, and at least
        :attr:`min_refusals` were; of those, the one with the fewest calls on the wrong side of
        it (refused below, or answered or still out at or above) wins, the highest on a tie.
        """
        starts, refused = self._counts()
        total_refused = sum(refused)
        if total_refused < self.min_refusals:
            return None
        best: int | None = None
        best_wrong = total_refused  # "no limit": every refusal is on the wrong side
        above_starts = above_refused = 0
        for level in range(self.limit, 0, -1):
            above_starts += starts[level]
            above_refused += refused[level]
            if above_refused < self.min_refusals or 2 * above_refused <= above_starts:
                continue
            wrong = (total_refused - above_refused) + (above_starts - above_refused)
            if wrong < best_wrong:
                best, best_wrong = level, wrong
        return best

    def _recent(self) -> tuple[int, int]:
        """Return (ended, refused) among the last :attr:`recent` calls that started before the
        oldest call still out: of later ones, the 429s answered at once have ended while their
        answered peers have not, and would count as a share they are not."""
        newest = list(itertools.islice(reversed(self._log.values()), 2 * self.recent + self.limit))
        oldest_out = max(
            (i for i, (_, state) in enumerate(newest) if state == _PENDING), default=-1
        )
        older = newest[oldest_out + 1 : oldest_out + 1 + self.recent]
        return len(older), sum(state == _REFUSED for _, state in older)

    def _refused_more_at(self, level: int) -> tuple[bool, int]:
        """Return whether answered calls started at ``level`` or above were refused markedly
        more often than those below it (over twice the share, plus 1/16), and how many of them
        were answered. Random 429s fall on every level alike; a limit's only above it."""
        good_above = bad_above = good_below = bad_below = 0
        for lvl, state in self._log.values():
            if state == _PENDING:
                continue
            refused = state == _REFUSED
            if lvl >= level:
                bad_above += refused
                good_above += not refused
            else:
                bad_below += refused
                good_below += not refused
        above = good_above + bad_above
        if not above:
            return False, 0
        below = good_below + bad_below
        share_below = bad_below / below if below else 0.0
        return bad_above / above > 2.0 * share_below + 1.0 / 16, good_above

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
        if self._lent:  # an answer: the slots held back for refused calls are free again
            self._lent = 0
            self._wake()
        if tokens:
            mean = self._tokens_per_call
            self._tokens_per_call = mean + (tokens - mean) * 0.1 if mean else float(tokens)
        if limits is not None:
            self._observe(limits, seq)
        if level:
            entry = self._log.get(seq)
            if entry is not None and entry[1] == _PENDING:
                entry[1] = _ANSWERED  # _record's usual case, written out: it runs for every call
            else:
                self._record(seq, level, _ANSWERED)
            # Only a call started since the last cut is a probe: one from before it (a burst
            # whose calls reached the provider out of order) says nothing about the new level.
            if level > self.ceiling and seq > self._cut_at:
                worse, answered = self._refused_more_at(level)
                if answered >= self.min_refusals and not worse:  # a probe that worked
                    self.ceiling = float(level)
                    self._streak += 1  # the next may come sooner
                    self._probe_scale = 1.0
                    if self._limit_at is not None and level >= self._limit_at:
                        self._limit_at = None  # the provider's limit moved up
        allowed = self.allowed
        if allowed < self.limit:
            if allowed < self.ceiling:
                step = 1.0 / allowed
            else:
                rounds = self.probe_every * self._probe_scale
                step = min(2.0**self._streak, self.probe_every) / (rounds * allowed)
            self.allowed = min(float(self.limit), allowed + step)
            self._wake()

    def rejected(self, level: int = 0, seq: int = 0, limits: RateLimits | None = None) -> None:
        """Count a 429 for the call that started as number ``seq`` with ``level`` calls in flight.

        With rate-limit headers the pace takes it from here (starts wait for the window). Without,
        when the log shows a level most calls at or above which were refused (see
        :meth:`limit_level`), the allowance drops to just under it (the estimate of the
        provider's concurrency limit); any other 429 is random and changes nothing.
        """
        if limits is not None and (
            limits.remaining_requests is not None or limits.remaining_tokens is not None
        ):
            self._observe(limits, seq)
            if level:  # paced by the window: not evidence about concurrency
                self._record(seq, level, _ANSWERED)
            return
        if level < 1:
            self.rate_limited()
            return
        self._record(seq, level, _REFUSED)
        # Its slot is not handed to the next call (often this one's retry, sent at once on
        # Retry-After: 0) until an answer comes or the log says where the limit is: a burst
        # over a concurrency limit otherwise refills each refused slot with another call the
        # provider refuses too, before the refusals add up to a cut (a quarter of the 429s a
        # limit of 8 cost a 1,000-call run at C=32). A random 429 holds its slot only until
        # the next answer, a few milliseconds at C=32.
        self._lent += 1
        known = self._limit_at
        if known is not None and self._probe_refused(level, known):
            return
        found = self.limit_level()
        if found is not None:
            # A limit found lower before stands until a probe above it works (succeeded): the
            # log's older refusals must not move it up.
            self._limit_at = found if known is None else min(known, found)
            self._cut(self._limit_at)
        self._cut_on_steady_share(level)

    def _probe_refused(self, level: int, known: int) -> bool:
        """Take a 429 at ``level`` while the limit ``known`` is known: when it refused a probe
        the log says is over the limit, cut back under at once; return whether it cut."""
        # A probe above the highest level that worked, refused while the log shows the level
        # above it refused more than those below: back under at once (on a busy machine the
        # levels are smeared, and the known limit may sit above the real one).
        if (
            level > self.ceiling
            and self.allowed > self.ceiling
            and self._refused_more_at(int(self.ceiling) + 1)[0]
        ):
            if level >= known and self._quiet():
                # A probe refused at the limit found before, by a provider that refuses
                # nothing else: the next waits twice as long (twice at most: a limit that goes
                # away is found again within several hundred calls, random 429s or not).
                self._probe_scale = max(self._probe_scale, 2.0)
            self._cut(int(self.ceiling) + 1)
            return True
        # A probe at the limit found before goes back under it at the first 429, while the log
        # still shows that level refused more than the ones below (else the 429 is chance).
        if level >= known and self.allowed >= known and self._refused_more_at(known)[0]:
            self._probe_scale = min(2 * self._probe_scale, 8.0)  # probe less often
            self._cut(known)
            return True
        return False

    def _cut_on_steady_share(self, level: int) -> None:
        """After a 429 at ``level``: a quarter off, once per round, when a steady share of the
        calls that ended last were refused."""
        # Scattered refusals are random, unless there are too many of them. On a busy machine
        # the client's count of calls in flight runs ahead of the provider's (answers wait to
        # be read), which smears a real limit over every level, under the one found too: a
        # steady share of refusals is then the evidence.
        ended, refused = self._recent()
        steady = ended >= self.recent // 2 and refused > self.steady_share * ended
        if steady and self.started >= self._next_share_cut:
            self._next_share_cut = self.started + self.capacity
            under = max(1, int(min(self.allowed, level) * 0.75))
            self._cut(under + 1)
            # The client counts at least as many calls in flight as the provider sees: a call
            # refused at this level says the provider's limit is below it.
            self._limit_at = level if self._limit_at is None else min(self._limit_at, level)

    def _quiet(self) -> bool:
        """Return whether few of the calls that ended last were refused (room may be probed)."""
        ended, refused = self._recent()
        return refused <= self.quiet_share * ended

    def _cut(self, level: int) -> None:
        """Lower the allowance (and the ceiling) to just under ``level``."""
        ceiling = max(1.0, float(level - 1))
        self._lent = 0  # the allowance now says where the limit is
        if ceiling < self.allowed:
            self.allowed = ceiling
            self.cuts += 1
            self._streak = 0
            self._cut_at = self.started
        self.ceiling = min(self.ceiling, ceiling)

    def rate_limited(self) -> None:
        """Count a 429 with nothing to go on: halve the limit, unless it was just cut."""
        now = time.monotonic()
        if now - self._last_cut >= self.cooldown:
            self._last_cut = now
            self.allowed = max(1.0, self.allowed / 2)
            self.cuts += 1


def retryable(exc: BaseException) -> bool:
    """Return whether a failed call is worth another attempt: rate limits, timeouts, server
    errors (5xx, 408, 409) and calls that never got an answer (no status), except those whose
    endpoint cannot be reached at all (code ``provider_unreachable``: a host name that does
    not resolve, nothing listening on a local address, a TLS failure)."""
    if isinstance(exc, RateLimited | ProviderTimeout):
        return True
    if isinstance(exc, RedirectRefused | ImageNotFetched):
        # A redirect elsewhere stays refused; an image bought but not fetched is not bought
        # again (its download had its own retries).
        return False
    if isinstance(exc, ProviderError):
        if exc.code == "provider_unreachable":  # bad host, nothing listening, TLS: setup
            return False
        return exc.status is None or exc.status >= 500 or exc.status in (408, 409)
    return False


def wait_for_retry(state: RetryCallState) -> float:
    """Return seconds to wait before the next attempt, by flownb's one retry policy
    (:func:`flownb.error_map.retry_delay`): the provider's Retry-After when it gave one, else
    exponential backoff with full jitter (0.5 s, 1 s, ... up to 20 s)."""
    exc: Any = state.outcome.exception() if state.outcome is not None else None
    return retry_delay(state.attempt_number - 1, getattr(exc, "retry_after", None))
