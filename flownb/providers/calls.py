"""Making provider calls for one run: cache, de-duplication, concurrency limit, pace, timeout
and retries, in that order.

1. A call whose key is in the cache is answered from it (``cached=True``), no slot taken.
2. A call identical to one already in flight waits for that one instead of paying twice.
3. Otherwise each attempt takes a slot of the run's :class:`AdaptiveLimiter` (shared by batch
   elements and independent nodes), waits for the requests-per-minute pace, and gets
   ``timeout`` seconds. 429s, 5xx, timeouts and dropped connections are retried by tenacity
   with the provider's Retry-After or exponential backoff with jitter, holding no slot while
   waiting. Each answer tells the limiter the in-flight level its call started at and the
   provider's rate-limit headers: a 429 at a level that did not work lowers the concurrency to
   just under it, headers pace starts before the provider refuses (see AdaptiveLimiter).
4. The success is put in the cache (errors never are).

A request sent is billed, so a run that is stopped (:meth:`CallRunner.stop`: Ctrl-C, a client
that went away) sends nothing more, ends what waits to be sent (a slot, the pace, a retry's
backoff), and lets every attempt already sent run to its end, where its answer is cached as
usual. :func:`~flownb.providers.inflight.calls_in_flight` says how many requests this process
is waiting for.

An optional ``gate`` (see :data:`Gate`) is entered around each attempt, after the local limiter:
the tokens-per-minute limit and the cluster-wide limits of a Dask run plug in there.

:meth:`CallRunner.stream` is the same call with its text handed to a :data:`TextSink` as the
provider streams it (:meth:`~flownb.providers.base.Provider.stream`): same cache key, same
de-duplication, limits, timeout and retries, and the same generation cached and returned. A
cache hit or a twin's answer is handed over in one piece.
"""

from __future__ import annotations

import asyncio
import dataclasses
import sys
import time
from collections.abc import Callable, Coroutine, Iterable, Iterator
from contextlib import AbstractAsyncContextManager, AbstractContextManager, contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from ..config import pricing
from ..errors import ImageNotFetched, ProviderError, ProviderTimeout, RateLimited, one_line
from ..infra import tracing
from ..infra.unicode import replace_lone_surrogates
from .base import Call, Generation, Provider
from .callplan import NodeCalls, node_calls
from .deadlines import Deadlines
from .inflight import SENT
from .limits import AdaptiveLimiter, Pacer, retryable, wait_for_retry
from .wire import WIRE, Wire

if TYPE_CHECKING:
    from tenacity import RetryCallState

__all__ = [
    "NOTICE_AFTER",
    "SHARED_TWINS",
    "TRUST_MISS",
    "CallRunner",
    "Gate",
    "Notice",
    "Settle",
    "TextSink",
    "announce",
    "notices_to",
    "retries_to",
]

# Told the generation of an attempt that succeeded (a token limit corrects its estimate by the
# usage the provider reported).
Settle = Callable[[Generation], None]
# An extra admission step around each provider attempt: called with the call, it returns an
# async context manager that is held while the attempt runs and yields a Settle.
Gate = Callable[[Call], AbstractAsyncContextManager[Settle]]
# Where a streamed call's text goes as it arrives: each new piece, or None when the text handed
# over so far is void (an attempt failed part-way and is being retried from the start).
TextSink = Callable[[str | None], None]


# A retry that waits longer than this many seconds is announced, once per run and kind of
# failure, so a slow endpoint is never silence.
NOTICE_AFTER = 2.0
# Where announcements go: a callable taking one line (a progress bar's postfix, ...).
Notice = Callable[[str], None]
# The channels of the run being made in this context: the open notices_to blocks' sinks (the
# innermost last) and the open retries_to blocks' counters. Context variables, not module
# lists: a run's event-loop tasks (and a thread started with a copy of its context) inherit
# them, while another thread's run (a form's worker beside a cell's run) has its own, so two
# runs at once in one process never announce into each other's bar.
_NOTICES: ContextVar[tuple[Notice, ...]] = ContextVar("flownb_notices", default=())
_RETRIES: ContextVar[tuple[Callable[[], None], ...]] = ContextVar("flownb_retries", default=())


@contextmanager
def _opened(var: ContextVar[tuple[Any, ...]], item: Any) -> Iterator[None]:
    token = var.set((*var.get(), item))
    try:
        yield
    finally:
        try:
            var.reset(token)
        except ValueError:  # closed from another context (a view closed by another thread)
            var.set(tuple(x for x in var.get() if x is not item))


def notices_to(sink: Notice) -> AbstractContextManager[None]:
    """Send the announcements of runs started inside this block, in this thread (and the tasks
    and threads that inherit its context), to ``sink`` (else: stderr). Runs of other threads
    keep their own sinks."""
    return _opened(_NOTICES, sink)


def retries_to(counter: Callable[[], None]) -> AbstractContextManager[None]:
    """Call ``counter()`` once per retry of a provider call of the runs started while this block
    is open in this thread (and the tasks and threads that inherit its context; a live view
    counts them); other threads' runs are not counted. ``counter`` must not raise."""
    return _opened(_RETRIES, counter)


def announce(line: str) -> None:
    """Say ``line`` where the user looks: the sink of the innermost :func:`notices_to` block
    open in this context, else one ``flownb: ...`` line on stderr."""
    _say(_NOTICES.get(), line)


def _say(sinks: tuple[Notice, ...], line: str) -> None:
    if sinks:
        sinks[-1](line)
    else:
        print(f"flownb: {line}", file=sys.stderr, flush=True)


class _Open:
    """The gate of a run without one: admits at once (one shared instance, no allocation)."""

    async def __aenter__(self) -> Settle:
        return _settled

    async def __aexit__(self, *exc: object) -> None:
        return None


def _settled(gen: Generation) -> None:
    return None


_OPEN = _Open()


# Calls in flight shared by several runs: set (to a fresh dict) by a caller around runs that
# should not pay twice for one call made by two of them at once (flownb.evaluate's variants and
# judges); each run keeps its own otherwise. Keys are cache keys (provider, params, prompt).
SHARED_TWINS: ContextVar[dict[str, asyncio.Future[Generation]] | None] = ContextVar(
    "flownb_shared_twins", default=None
)


# The calls in flight of stopped runs, by cache key: a run started meanwhile (the cell run
# again at once) waits for such a call's answer instead of buying it a second time.
_finishing: dict[str, asyncio.Future[Generation]] = {}
# Answers this process has stored in a cache so far, and the count at which each key of the
# recent ones was stored: a miss seen at count c may have been bought meanwhile by a twin call
# that already ended only when its key was stored after c (see CallRunner._missed). Keys are
# forgotten in bulk past _STORED_KEPT; a miss seen before _forgotten is then queried again.
_stored = 0
_stored_at: dict[str, int] = {}
_forgotten = 0
_STORED_KEPT = 65536


# Seconds a miss found by a bulk lookup is trusted: the call made within it does not query the
# cache again (see flownb.runtime.cache's docstring: what another process stored meanwhile is
# then bought again, as a twin call in flight in another process always was).
TRUST_MISS = 10.0

# A miss: the call's cache key, the count of answers stored (_stored) when it was seen and when
# (time.monotonic()).
Missed = tuple[str, int, float]


def _trusted(missed: Missed) -> bool:
    """Return whether a miss still holds without a query: its key was not stored in this
    process since (by a twin that was in flight then and has ended; a miss seen before
    ``_forgotten`` counts as stored), and it is younger than :data:`TRUST_MISS`."""
    key, seen, when = missed
    return (
        seen >= _forgotten
        and _stored_at.get(key, 0) <= seen
        and time.monotonic() - when < TRUST_MISS
    )


def _no_gate(call: Call) -> _Open:
    return _OPEN


class CallRunner:
    """Calls ``provider`` for one run (create one per run, on the loop that runs it)."""

    def __init__(
        self,
        provider: Provider,
        *,
        concurrency: int,
        cache: Any = None,
        pacer: Pacer | None = None,
        timeout: float | None = None,
        retries: int,
        limiter: AdaptiveLimiter | None = None,
        gate: Gate | None = None,
    ) -> None:
        self.provider = provider
        self.gate: Gate = gate or _no_gate
        self.cache = cache if provider.cacheable else None
        # A limiter given by the caller is shared with other runs (an evaluation's variants and
        # judges hold one limit together); else this run has its own.
        self.limiter = limiter if limiter is not None else AdaptiveLimiter(concurrency, pacer)
        self.timeout = timeout
        self.retries = retries
        shared = SHARED_TWINS.get()
        self._in_flight: dict[str, asyncio.Future[Generation]] = (
            shared if shared is not None else {}
        )
        self._announced: set[tuple[str, int | None]] = set()  # kinds of failure said so
        # This run's channels, as its caller opened them (see notices_to and retries_to).
        self._notices = _NOTICES.get()
        self._counters = _RETRIES.get()
        self._nodes: dict[int, NodeCalls] = {}  # see _node
        # Hits looked up in bulk ahead of their calls (see prefetch), by (params, prompt): one
        # key per params object, as _node has it, so a hit costs no hashing. Each used once.
        self._hits: dict[tuple[int, str], Generation] = {}
        # Calls the cache was found not to hold (by hit(), or by a bulk lookup: see missing),
        # by (params, prompt) as _hits: their key, the count of answers stored then and when
        # (time.monotonic()). The call that follows neither hashes its prompt again nor
        # queries, unless the miss is no longer trusted (see _trusted).
        self._missed: dict[tuple[int, str], Missed] = {}
        self._table: asyncio.Future[None] | None = None  # see _price_table
        self._table_ready = False  # the table is imported, or not needed: see _price_table
        # Set by stop(): no attempt starts any more. The tasks waiting to send (for a slot, the
        # pace, a gate or a retry's backoff) are kept, so stop() can end them.
        self.stopping = False
        # Set by abandon(): the calls in flight are given up too (see Engine's _side_by_side:
        # a stopped row still waits for its calls in flight, an abandoned one does not).
        self.abandoned = False
        self._waiting: set[asyncio.Task[Any]] = set()
        # Looked up once a run, not once a call: finding the tracer provider reads the
        # environment, a few microseconds that a run of cache hits pays 50,000 times.
        self._traced = tracing.tracer() is not None
        # Every attempt's time limit, on one timer for the run (see deadlines).
        self._deadlines = Deadlines(timeout) if timeout is not None else None
        # The endpoint's address and port, for the spans (server.address, server.port).
        self._server = (
            tracing.server_of(provider.identity().get("base_url")) if self._traced else None
        )

    def stop(self) -> None:
        """Stop this run's calls: none is sent from now on, and those waiting to be sent end
        (their tasks are cancelled); attempts already sent go on to their answer, cached as
        usual. Call it on the loop that runs the calls."""
        self.stopping = True
        for task in tuple(self._waiting):
            task.cancel()
        _finishing.update(self._in_flight)

    def abandon(self) -> None:
        """Give up this run's calls in flight too (after :meth:`stop`; their tasks are being
        cancelled): a row no longer waits for its other calls once one of its own ends."""
        self.abandoned = True

    def _node(self, call: Call) -> NodeCalls:
        """Return what ``call``'s node's calls are (their key; see
        :mod:`flownb.providers.callplan`), made once per node."""
        params = call.params
        node = self._nodes.get(id(params))
        if node is None:
            # Keyed by the params object: one per node for the plan's life.
            node = node_calls(self.provider, call.kind, params, call.system, call.node_id)
            self._nodes[id(params)] = node
        return node

    def prefetch(self, calls: Iterable[Call]) -> None:
        """Look the cache up for ``calls`` (about to be made) in one bulk query, so that each of
        their hits is answered without a query of its own; a miss is looked up again when its
        call is made (another process may have stored it meanwhile). Nothing without a cache."""
        cache = self.cache
        if cache is None:
            return
        keys = {self._node(call).key(call.prompt): (id(call.params), call.prompt) for call in calls}
        if keys:
            hits = self._hits
            for key, gen in cache.get_many(keys).items():
                hits[keys[key]] = gen

    def missing(self, params: Any, calls: Iterable[tuple[str, str]]) -> None:
        """Note that the cache does not hold ``calls`` (each a prompt and its key) of the node
        whose model parameters are ``params``, as a bulk lookup found just now: their calls
        then neither hash their prompts nor query again while the miss is trusted (see
        :func:`_trusted`). Nothing without a cache, or for a traced run."""
        if self.cache is None or self._traced:
            return
        seen = _stored
        now = time.monotonic()
        pid = id(params)
        missed = self._missed
        for prompt, key in calls:
            missed[(pid, prompt)] = (key, seen, now)

    def hit(self, call: Call) -> Generation | None:
        """Return ``call``'s answer when the cache holds it (looked up without waiting: the
        bulk lookup's, else one query unless a bulk lookup found it missing and that is still
        trusted), else ``None``, and the call is then to be made with this runner. Always
        ``None`` for an uncached or traced run (whose hits are spans)."""
        cache = self.cache
        if cache is None or self._traced:
            return None
        slot = (id(call.params), call.prompt)
        hit = self._hits.pop(slot, None) if self._hits else None
        if hit is None:
            missed = self._missed.get(slot)
            if missed is not None:
                if _trusted(missed):
                    return None
                key = missed[0]
            else:
                key = self._node(call).key(call.prompt)
            hit = cache.get(key)
            if hit is None:
                self._missed[slot] = (key, _stored, time.monotonic())
        if hit is not None and _unpriced(hit):
            # Priced from its usage on the loop (the price table may still be loading): the
            # call goes through :meth:`_answer`, which finds the hit here.
            self._hits[slot] = hit
            return None
        return hit

    def __call__(self, call: Call) -> Coroutine[Any, Any, Generation]:
        """Return (to await) the generation for ``call`` (from the cache, a twin call, or the
        provider), as an OpenTelemetry span when a tracer provider is configured (see
        flownb.infra.tracing).

        Raises:
            ProviderError (or a subclass): the provider failed for good.
        """
        # Not a coroutine itself: an untraced call (the usual one) is _answer's coroutine, one
        # frame less for every resumption of every call.
        if self._traced:
            return self._spanned(call, None)
        return self._answer(call)

    def stream(self, call: Call, sink: TextSink | None) -> Coroutine[Any, Any, Generation]:
        """Return (to await) the generation for ``call`` as :meth:`__call__` does, handing its
        text to ``sink`` as the provider streams it (``None``: not streamed). A text answer
        served by the cache or by an identical call in flight reaches ``sink`` in one piece.

        Raises:
            ProviderError (or a subclass): the provider failed for good.
        """
        if self._traced:
            return self._spanned(call, sink)
        return self._answer(call, sink)

    async def _spanned(self, call: Call, sink: TextSink | None) -> Generation:
        """Return :meth:`_answer`'s generation for ``call``, inside its span (if one is made)."""
        span = tracing.call_span(self.provider.name, call, self._server)
        if span is None:
            return await self._answer(call, sink)
        try:
            gen = await self._answer(call, sink)
        except BaseException as exc:
            tracing.end_call(span, None, exc)
            raise
        tracing.end_call(span, gen)
        return gen

    async def _answer(self, call: Call, sink: TextSink | None = None) -> Generation:
        global _stored, _forgotten
        cache = self.cache
        if cache is None:
            return await self._attempts(call, sink)
        slot = (id(call.params), call.prompt)
        missed = self._missed.pop(slot, None) if self._missed else None
        key = missed[0] if missed is not None else self._node(call).key(call.prompt)
        hit = self._cached(slot, key, missed, cache)
        if hit is not None:
            if _unpriced(hit):
                await self._price(hit)
            _hand_over(sink, hit)
            return hit
        twin = self._in_flight.get(key)
        if twin is not None:
            gen = await asyncio.shield(twin)
            _hand_over(sink, gen)
            return dataclasses.replace(gen, cached=True)  # no provider call was made for this one
        if _finishing:  # some stopped run still ends calls in flight: one may be this one
            paid = await self._from_stopped_run(key, sink)
            if paid is not None:
                return paid
        fut: asyncio.Future[Generation] = asyncio.get_running_loop().create_future()
        self._in_flight[key] = fut
        try:
            # _attempts, written out: one frame less for every resumption of every call.
            if sink is not None:
                sink = _Restartable(sink)
            failed: Exception | None = None
            try:
                gen = await self._attempt(call, sink)
            except Exception as exc:
                if not self.retries or not retryable(exc):
                    raise
                failed = exc
            if failed is not None:
                gen = await self._retried(call, sink, failed)
        except Exception as exc:
            fut.set_exception(exc)
            # Marked retrieved (twins awaiting it still get it): with no twin, asyncio would
            # log it as never retrieved. Here, not in a done callback: that is a loop handle
            # for every call.
            fut.exception()
            raise
        except BaseException:
            fut.cancel()
            raise
        finally:
            del self._in_flight[key]
            if _finishing.get(key) is fut:
                del _finishing[key]
        # Queued (lookups see it at once) and committed by the cache's writer thread.
        cache.put_soon(key, gen)
        if len(_stored_at) >= _STORED_KEPT:
            _forgotten = _stored + 1  # every key stored so far is forgotten
            _stored_at.clear()
        _stored += 1
        _stored_at[key] = _stored
        fut.set_result(gen)
        return gen

    def _cached(
        self, slot: tuple[int, str], key: str, missed: Missed | None, cache: Any
    ) -> Generation | None:
        """Return the answer of the call with ``slot`` and ``key`` from the cache, or ``None``:
        the bulk lookup's hit, else one query, unless the call was seen ``missed`` and that
        is still trusted. A plain function, not a coroutine: it runs for every call."""
        hit = self._hits.pop(slot, None) if self._hits else None
        if hit is None and (missed is None or not _trusted(missed)):
            hit = cache.get(key)
        return hit

    async def _price(self, hit: Generation) -> None:
        """Price a cached answer stored before prices were kept, or when the model had none,
        from the usage it was bought with, so the row's price does not depend on the cache."""
        table = None if self._table_ready else self._price_table()
        if table is not None:
            await table
        hit.cost = self.provider.cost(hit)
        hit.prompt_cache_saved = self.provider.prompt_cache_saving(hit)

    async def _from_stopped_run(self, key: str, sink: TextSink | None) -> Generation | None:
        """Return the answer of a stopped run's call in flight with this key (on this loop),
        as a cache hit (``cached=True``: this run paid nothing for it); None when there is no
        such call, or it failed or was abandoned (this run then makes its own)."""
        other = _finishing.get(key)
        if other is None or other.get_loop() is not asyncio.get_running_loop():
            return None
        try:
            gen = await asyncio.shield(other)
        except asyncio.CancelledError:
            if not other.cancelled():
                raise  # this run is cancelled, not the other one
            return None
        except Exception:
            return None
        _hand_over(sink, gen)
        return dataclasses.replace(gen, cached=True)

    async def _attempt(self, call: Call, sink: TextSink | None = None) -> Generation:
        if self.stopping:  # a stopped run sends nothing more
            raise asyncio.CancelledError
        limiter = self.limiter
        table = None if self._table_ready else self._price_table()
        task = asyncio.current_task()
        waiting = self._waiting
        if task is not None:
            waiting.add(task)
        try:
            async with limiter:
                # What this call's answer speaks to, read as the limiter logged the start (a
                # gate may wait, and others start meanwhile).
                level, seq = limiter.in_flight, limiter.started
                async with self.gate(call) as settle:
                    # Admitted: from here the request is sent and paid for, so stop() lets it
                    # end (no await between this and the send: it cannot be cancelled before).
                    waiting.discard(task)
                    SENT.append(None)
                    wire = Wire()
                    mark = WIRE.set(wire)
                    began = time.perf_counter()
                    # The provider's answer, in this frame (not a coroutine of its own: one
                    # frame less for every resumption of every call), within the time limit.
                    deadlines = self._deadlines
                    limit = None if deadlines is None or task is None else deadlines.enter(task)
                    try:
                        try:
                            if sink is None:
                                gen = await self.provider.generate(call)
                            else:
                                gen = await _streamed(self.provider, call, sink)
                        finally:
                            # Whether the time limit, alone, cancelled the attempt.
                            expired = deadlines.leave(limit) if deadlines and limit else False
                    except asyncio.CancelledError as exc:
                        if not expired:
                            raise
                        raise self._timed_out() from _timeout_of(exc)
                    except TimeoutError as exc:  # the provider's own time limit
                        raise self._timed_out() from exc
                    except RateLimited as exc:
                        limiter.rejected(level, seq, exc.rate_limits)
                        raise
                    finally:
                        WIRE.reset(mark)
                        SENT.pop()
                    # The provider's own time, apart from waits for a slot, retries and (where
                    # the HTTP client says when the request left and the answer came) the other
                    # calls on this loop: the speed an evaluation reports, kept with the cache.
                    ended = time.perf_counter()
                    gen.provider_s = wire.elapsed(began, ended, streamed=sink is not None)
                    settle(gen)  # before the slot is freed, so the next call sees the correction
                    if gen.pending is not None:
                        # The paid call has ended: what its answer named is fetched now,
                        # outside its time limit, so a slow or failed download (retried on its
                        # own) never buys the call again.
                        fetch, gen.pending = gen.pending, None
                        gen = await fetch()
        except ImageNotFetched as exc:
            priced = await self._priced(exc, table)
            if priced is exc:
                raise
            raise priced from exc
        finally:
            waiting.discard(task)
        if gen.cost is None:
            if table is not None:
                await table
            gen.cost = self.provider.cost(gen)
            gen.prompt_cache_saved = self.provider.prompt_cache_saving(gen)
        usage = gen.usage
        limiter.succeeded(
            level, seq, gen.limits, tokens=usage.get("total_tokens") if usage else None
        )
        return gen

    async def _priced(
        self, exc: ImageNotFetched, table: asyncio.Future[None] | None
    ) -> ImageNotFetched:
        """Return ``exc`` (an image paid for though not fetched) priced, so the run records
        what it spent: a copy with the price of what was paid (the table imported first), or
        ``exc`` itself when it has no payment to price or is priced already."""
        if exc.paid is None or exc.paid_usd is not None:
            return exc
        if table is not None:
            await table
        return exc.priced(self.provider.cost(exc.paid))

    def _price_table(self) -> asyncio.Future[None] | None:
        """Return the price table's import, started in a thread beside this run's first calls
        (None when it is done, or when this provider's calls are not priced from it): imported
        on the loop, it would stall every call in flight, and streamed text, for a second."""
        if pricing.table_loaded():
            self._table_ready = True  # for good: the calls after this one ask no more
            return None
        provider = self.provider
        if provider.price_as is None and not pricing.uses_table(
            provider.price_kind or provider.name, provider.prices
        ):
            self._table_ready = True
            return None
        if self._table is None:
            self._table = asyncio.get_running_loop().run_in_executor(None, pricing.load_table)
        return self._table

    def _timed_out(self) -> ProviderTimeout:
        """Return the error of an attempt that did not answer within the time limit (the run's,
        or, when the run set none, the provider's own)."""
        within = f"within {self.timeout:g} s" if self.timeout is not None else "in time"
        return ProviderTimeout(
            f"{self.provider.name} did not answer {within}", provider=self.provider.name
        )

    def _before_sleep(self, state: RetryCallState) -> None:
        """Count the retry (see :func:`retries_to`) and announce one that waits over
        :data:`NOTICE_AFTER` seconds: what failed, which attempt comes next of how many, and the
        wait (once per run and kind of failure)."""
        for count in self._counters:
            count()
        wait = state.next_action.sleep if state.next_action is not None else 0.0
        exc = state.outcome.exception() if state.outcome is not None else None
        if wait <= NOTICE_AFTER or exc is None:
            return
        kind = (type(exc).__name__, getattr(exc, "status", None))
        if kind in self._announced:
            return
        self._announced.add(kind)
        _say(
            self._notices,
            f"{one_line(exc)}; retrying in {wait:.1f} s "
            f"(attempt {state.attempt_number + 1} of {self.retries + 1})",
        )

    async def _backoff(self, seconds: float) -> None:
        """Wait ``seconds`` before a retry, as a call waiting to be sent (stop() ends it)."""
        task = asyncio.current_task()
        if task is not None:
            self._waiting.add(task)
        try:
            await asyncio.sleep(seconds)
        finally:
            self._waiting.discard(task)

    async def _attempts(self, call: Call, sink: TextSink | None = None) -> Generation:
        """Return the generation of the first attempt that succeeds (the first, usually)."""
        if sink is not None:
            sink = _Restartable(sink)
        try:
            return await self._attempt(call, sink)  # the common case: no tenacity bookkeeping
        except Exception as exc:
            if not self.retries or not retryable(exc):
                raise
            failed = exc
        return await self._retried(call, sink, failed)

    async def _retried(self, call: Call, sink: TextSink | None, failed: Exception) -> Generation:
        """Return the generation of the first retry that succeeds, the first attempt having
        ``failed`` (retryable).

        Raises:
            ProviderError (or a subclass): the last attempt's failure.
        """
        # Tenacity takes over from the failed first attempt: it is replayed as tenacity's
        # attempt 1 so its wait (Retry-After or backoff) and the attempt count stay exact.
        # Imported at the first retry, not with flownb (a provider's warm-up imports it early).
        from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt

        retrying = AsyncRetrying(
            sleep=self._backoff,
            stop=stop_after_attempt(self.retries + 1),
            wait=wait_for_retry,
            retry=retry_if_exception(retryable),
            before_sleep=self._before_sleep,
            reraise=True,
        )
        replay: Exception | None = failed
        async for attempt in retrying:
            with attempt:
                if replay is not None:
                    first, replay = replay, None
                    raise first
                return await self._attempt(call, sink)
        raise AssertionError("unreachable")  # pragma: no cover - reraise=True raises above


class _Restartable:
    """A sink that tells its sink ``None`` (start over) before the first text of an attempt
    that follows one which had handed text over already."""

    __slots__ = ("sent", "sink")

    def __init__(self, sink: TextSink) -> None:
        self.sink = sink
        self.sent = False

    def __call__(self, piece: str | None) -> None:
        self.sent = True
        self.sink(piece)

    def restart(self) -> None:
        if self.sent:
            self.sent = False
            self.sink(None)


async def _streamed(provider: Provider, call: Call, sink: TextSink) -> Generation:
    """Return the generation of one streamed attempt, handing each piece of text to ``sink``.

    Raises:
        ProviderError: the provider failed, or its stream ended without a generation.
    """
    if isinstance(sink, _Restartable):
        sink.restart()  # a retry: what an earlier attempt handed over is void
    gen: Generation | None = None
    async for piece in provider.stream(call):
        if isinstance(piece, Generation):
            gen = piece
        elif piece:
            # As the generation will hold it (see Generation): what is shown as it streams
            # is what is stored.
            sink(replace_lone_surrogates(piece)[0])
    if gen is None:
        raise ProviderError(
            f"{provider.name}: the streamed answer ended without its generation",
            provider=provider.name,
        )
    return gen


def _timeout_of(cancelled: asyncio.CancelledError) -> TimeoutError:
    """Return the ``TimeoutError`` an attempt cancelled by its time limit ends in, as
    ``asyncio.timeout`` raises it (from the cancellation)."""
    timeout = TimeoutError()
    timeout.__cause__ = cancelled
    return timeout


def _hand_over(sink: TextSink | None, gen: Generation) -> None:
    """Hand a text answer not streamed by this call (a cache hit, a twin's) to ``sink`` in one
    piece."""
    if sink is not None and gen.media is None and gen.output:
        sink(gen.output)


def _unpriced(gen: Generation) -> bool:
    """Whether a cached answer has no price but the usage to work one out (it was stored before
    prices were kept, or when its model had none)."""
    cost = gen.cost
    return (cost is None or cost != cost) and bool(gen.usage)
