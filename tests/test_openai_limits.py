# ruff: noqa: F811  (pytest fixtures imported from openai_fake are parameters here)
"""Back-off that fits the signal, against the loopback fake enforcing real limits: random 429s
leave the concurrency alone, a concurrency limit is found with few 429s, OpenAI's rate-limit
headers are read by both transports and pace starts before the provider refuses."""

from __future__ import annotations

import asyncio
import collections
import random
import sys
import threading
from pathlib import Path

import pytest

import flownb
from flownb.infra.media import MediaStore
from flownb.providers.base import Call, RateLimits
from flownb.providers.limits import AdaptiveLimiter, Pacer
from flownb.providers.openai.answers import parse_duration, rate_limits
from flownb.providers.openai.provider import OpenAIProvider
from flownb.providers.tokens import Meter
from flownb.testing.fake_openai import FakeOpenAI, echo
from flownb.testing.fake_state import duration
from tests.conftest import make_flow
from tests.openai_fake import fake, fake_server  # noqa: F401 (fixtures)

PROMPTS = {"intro": "Intro about {topic}.", "title": "Title about {topic}."}


def rows(n: int) -> list[dict[str, str]]:
    return [{"topic": f"t{i}"} for i in range(n)]


def assert_all_correct(results: list, n: int) -> None:
    assert [dict(r) for r in results] == [
        {"intro": echo(f"Intro about t{i}."), "title": echo(f"Title about t{i}.")} for i in range(n)
    ]


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("1s", 1.0), ("6m0s", 360.0), ("20ms", 0.02), ("1h2m3.5s", 3723.5), ("0.25", 0.25)],
)
def test_openai_durations_are_read(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)
    assert parse_duration(duration(seconds)) == pytest.approx(seconds, rel=0.01)


@pytest.mark.parametrize("text", ["", "soon", "5 s", "1s2", "ms"])
def test_other_durations_are_unknown(text: str) -> None:
    assert parse_duration(text) is None


def test_rate_limit_headers_are_read_and_absent_ones_cost_nothing() -> None:
    headers = {
        "x-ratelimit-limit-requests": "500",
        "x-ratelimit-remaining-requests": "499",
        "x-ratelimit-reset-requests": "120ms",
        "x-ratelimit-remaining-tokens": "149984",
        "x-ratelimit-reset-tokens": "6m0s",
    }
    assert rate_limits(headers) == RateLimits(
        remaining_requests=499,
        reset_requests=0.12,
        limit_requests=500,
        remaining_tokens=149984,
        reset_tokens=360.0,
    )
    assert rate_limits({"x-request-id": "r"}) is None


@pytest.mark.parametrize("transport", ["aiohttp", "sdk"])
def test_both_transports_surface_the_rate_limit_headers(fake: FakeOpenAI, transport: str) -> None:
    fake.configure(rate_limit=10, rate_window=60.0)
    provider = OpenAIProvider(
        media=MediaStore(Path("unused")), base_url=fake.url, transport=transport
    )

    async def go() -> list[RateLimits | None]:
        try:
            gens = [
                await provider.generate(Call("text", f"p{i}", {"model": "m"})) for i in range(3)
            ]
        finally:
            await provider.aclose()
        return [g.limits for g in gens]

    limits = asyncio.run(go())
    assert [lim.remaining_requests for lim in limits] == [9, 8, 7]  # type: ignore[union-attr]
    assert all(lim.limit_requests == 10 for lim in limits)  # type: ignore[union-attr]
    assert all(0 < lim.reset_requests <= 60 for lim in limits)  # type: ignore[union-attr,operator]


def test_random_429s_leave_the_concurrency_alone() -> None:
    """1,000 answers at full concurrency, one in ten refused at random: no cut at all."""
    limiter = AdaptiveLimiter(32)
    rng = random.Random(3)
    for seq in range(1000):
        level = rng.randint(1, 32)
        if rng.random() < 0.1:
            limiter.rejected(level, seq)
        else:
            limiter.succeeded(level, seq)
    assert limiter.cuts == 0 and limiter.capacity == 32


def test_refusals_above_a_level_set_the_concurrency_just_under_it() -> None:
    """A burst where every call started above 8 in flight is refused: the allowance is 8, not
    half of 32; probing above it later costs one 429 and comes back to 8."""
    limiter = AdaptiveLimiter(32)
    for level in range(9, 33):
        limiter.rejected(level, level)
    seq = 33
    while limiter.capacity > 8:  # the refused retry at once, up to the allowance
        assert seq < 100, "the allowance does not come down to the limit"
        limiter.rejected(limiter.capacity, seq)
        seq += 1
    assert limiter.cuts <= 5
    found = limiter.cuts
    for seq in range(100, 1000):
        limiter.succeeded(8, seq)
        if limiter.capacity > 8:  # a probe
            limiter.rejected(9, seq)
    assert limiter.capacity == 8
    assert limiter.cuts - found <= 1 + 900 // (8 * 8)  # a probe per 8 x allowed successes


async def _world(
    limiter: AdaptiveLimiter,
    rng: random.Random,
    calls: int,
    *,
    share: float = 0.1,
    limit: int | None = None,
    capacities: list[int] | None = None,
) -> int:
    """Drive ``limiter`` as a run does, against a provider that answers 429 at once (before any
    success can arrive) to ``share`` of the calls at random and to every call above ``limit``
    in flight, and answers the others in the order they started. Return the 429s."""
    pending: collections.deque[tuple[int, int]] = collections.deque()
    todo, done, refused = calls, 0, 0
    while done < calls:
        while todo and limiter.in_flight < limiter.capacity:
            await limiter.__aenter__()
            level, seq = limiter.in_flight, limiter.started
            if (limit is not None and len(pending) >= limit) or rng.random() < share:
                limiter.rejected(level, seq)  # the retry goes out at once (Retry-After: 0)
                await limiter.__aexit__()
                refused += 1
            else:
                pending.append((level, seq))
                todo -= 1
        level, seq = pending.popleft()
        limiter.succeeded(level, seq)
        await limiter.__aexit__()
        done += 1
        if capacities is not None:
            capacities.append(limiter.capacity)
    return refused


@pytest.mark.parametrize("seed", range(40))
def test_instant_random_429s_do_not_outvote_slower_successes(seed: int) -> None:
    """In the first burst no success can have arrived when the fast 429s do: calls still out
    are not refusals, so 10% random refusals never read as a limit (2,000 calls, C=32)."""
    limiter = AdaptiveLimiter(32)
    asyncio.run(_world(limiter, random.Random(seed), 2000))
    assert limiter.cuts == 0 and limiter.capacity == 32


def test_a_burst_with_a_few_refusals_among_calls_still_out_is_no_limit() -> None:
    """Six of 32 refused at once: no cut; their slots wait for the next answer, which gives
    them all back."""

    async def go() -> tuple[AdaptiveLimiter, int]:
        limiter = AdaptiveLimiter(32)
        for _ in range(32):
            await limiter.__aenter__()
        for level in (5, 12, 20, 27, 30, 31):  # refused at once; the other 26 still out
            limiter.rejected(level, level)
            await limiter.__aexit__()
        held = limiter.capacity
        await limiter.__aexit__()
        limiter.succeeded(1, 1)
        return limiter, held

    limiter, held = asyncio.run(go())
    assert limiter.cuts == 0 and held == 26 and limiter.capacity == 32


@pytest.mark.parametrize("seed", range(5))
def test_the_cut_lands_at_the_limit_whatever_order_the_refusals_come_in(seed: int) -> None:
    """A limit of 8: the 24 calls of the first burst above it are refused in a random order;
    the allowance ends at 8, never below it on the way."""

    async def go() -> tuple[AdaptiveLimiter, int]:
        limiter = AdaptiveLimiter(32)
        for _ in range(32):
            await limiter.__aenter__()
        order = list(range(9, 33))
        random.Random(seed).shuffle(order)
        lowest = 32
        for level in order:
            limiter.rejected(level, level)
            lowest = min(lowest, limiter.capacity)
        return limiter, lowest

    limiter, lowest = asyncio.run(go())
    assert limiter.capacity == 8 and lowest == 8


@pytest.mark.parametrize("seed", range(3))
def test_a_wrong_cut_is_undone_within_a_run_and_random_429s_do_not_redo_it(seed: int) -> None:
    """A limit of 10 that then goes away (a provider's burst): with 10% random 429s the
    allowance is back at 32 within 1,500 calls (one slot per 8 x allowed successes took about
    3,600), and once the log no longer shows the old limit, random 429s above it cut nothing."""
    limiter = AdaptiveLimiter(32)
    rng = random.Random(seed)
    asyncio.run(_world(limiter, rng, 300, share=0.0, limit=10))
    assert limiter.capacity == 10
    capacities: list[int] = []
    asyncio.run(_world(limiter, rng, 1500, capacities=capacities))
    assert 32 in capacities[:1500]
    cuts = limiter.cuts
    asyncio.run(_world(limiter, rng, 1000))
    assert limiter.cuts == cuts and limiter.capacity == 32


def test_a_real_limit_costs_few_429s() -> None:
    limiter = AdaptiveLimiter(32)
    refused = asyncio.run(_world(limiter, random.Random(1), 1000, share=0.0, limit=8))
    assert limiter.capacity == 8
    assert refused < 0.05 * 1000


def test_a_concurrency_limit_is_found_with_few_429s(fake: FakeOpenAI) -> None:
    fake.configure(max_in_flight=4, latency=0.01)
    flow = flownb.load_flow(make_flow(PROMPTS, ["topic"]), cache=False, concurrency=16)
    assert_all_correct(flow.run_batch(rows(100)), 100)
    stats = fake.settled_stats()  # every answer counted
    assert stats["answered"] == 200
    # The first burst refuses the 12 calls over the limit (and some retries land in it too);
    # after that, about one probe per 8 x 4 successes: ~25 in all on a quiet machine, ~60 with
    # CPU hogs beside it (which calls a probe overlaps depends on the order answers come back
    # in). A client that kept 16 in flight against a limit of 4 would see three attempts in four
    # refused, ~600 429s for these 200 answers; halving (the old way) kept half the calls
    # refused for seconds and lost rows after 8 retries. Counted against the answers, not a
    # clock: at most one 429 per two answers, whatever the load.
    assert stats["limited"] <= stats["answered"] // 2, stats
    assert fake.peak_in_flight <= 5


def test_rate_limit_headers_pace_starts_before_any_429(fake: FakeOpenAI) -> None:
    fake.configure(rate_limit=15, rate_window=0.3, latency=0.005)
    flow = flownb.load_flow(make_flow(PROMPTS, ["topic"]), cache=False, concurrency=8)
    assert_all_correct(flow.run_batch(rows(30)), 30)
    stats = fake.settled_stats()
    assert stats["answered"] == 60
    # The first 8 start before any answer has told us the limit; after that, none over it.
    assert stats["limited"] <= 2, stats


def test_token_headers_hold_starts_until_the_window_resets() -> None:
    """50 tokens left and calls of about 100: one more start, then the next waits for the
    window's reset; the requests window, never mentioned, holds nothing back."""

    async def go() -> AdaptiveLimiter:
        limiter = AdaptiveLimiter(8)
        async with limiter:
            pass
        window = RateLimits(remaining_tokens=50, reset_tokens=0.05, limit_tokens=1000)
        limiter.succeeded(1, limiter.started, window, tokens=100)
        async with limiter:
            assert limiter.held == 0.0
        async with limiter:
            pass
        return limiter

    limiter = asyncio.run(go())
    # The seconds the limiter decided to hold (not a wall time): the window's reset, 50 ms, and
    # at most a sliver more when the loop's clock woke the wait a hair early.
    assert 0.0 < limiter.held < 0.1


def _hammer(work: object, threads: int = 8) -> None:
    """Run ``work`` on ``threads`` threads at once, switching between them as often as the
    interpreter can (so an unguarded read-modify-write loses updates)."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        start = threading.Barrier(threads)

        def run() -> None:
            start.wait()
            work()  # type: ignore[operator]

        pool = [threading.Thread(target=run) for _ in range(threads)]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
    finally:
        sys.setswitchinterval(old)


def test_pacer_slots_taken_from_many_threads_are_never_shared() -> None:
    pacer = Pacer(60)  # one start a second: every slot taken here lies in the future
    first = pacer.take()
    slots: list[float] = []

    def work() -> None:
        for _ in range(2000):
            slots.append(pacer.take())

    _hammer(work)
    # One slot a second after the first, each taken once: none shared, none skipped.
    assert sorted(round(s - first) for s in slots) == list(range(1, 16001))


def test_meter_corrections_from_many_threads_all_count() -> None:
    meter = Meter(60)  # a unit is a second
    asyncio.run(meter.take(1))
    before = meter._next

    def work() -> None:
        for _ in range(2000):
            meter.adjust(1)

    _hammer(work)
    assert meter._next == pytest.approx(before + 16000.0)


@pytest.mark.parametrize("seed", range(5))
def test_a_limit_smeared_over_levels_by_a_busy_client_still_cuts(seed: int) -> None:
    """A client behind on reading its answers counts more calls in flight than the provider
    sees, so a limit of 8 shows as half the calls refused at every level from 9 to 14, with
    as many answered there: no level splits them, but that steady share is a limit all the
    same, and the allowance ends at or under the lowest level refused."""
    limiter = AdaptiveLimiter(32)
    rng = random.Random(seed)
    refused = 0  # in the second half
    for seq in range(1, 1001):
        level = rng.randint(max(1, limiter.capacity - 5), limiter.capacity)
        if level > 8 and rng.random() < 0.5:
            limiter.rejected(level, seq)
            refused += seq > 500
        else:
            limiter.succeeded(level, seq)
    assert limiter.capacity <= 9
    assert refused < 0.15 * 500  # uncut, half of them would be


def test_a_burst_over_a_limit_pays_only_its_own_429s() -> None:
    """32 calls start at once against a limit of 8: the 24 above it are refused at once, one by
    one, long before any of the 8 is answered. A refused slot waits for the next answer, so
    nothing refills it meanwhile (each refill, often the refused call's own retry, would be
    refused too): 24 429s in all, then the 8 answers set the pace at 8."""

    async def go() -> tuple[AdaptiveLimiter, int]:
        limiter = AdaptiveLimiter(32)
        out: collections.deque[tuple[int, int]] = collections.deque()
        answered: list[tuple[int, int]] = []
        refused = 0
        waiting = 1000  # calls not started yet (retries included)
        while waiting and limiter.in_flight < limiter.capacity:
            await limiter.__aenter__()
            waiting -= 1
            start = (limiter.in_flight, limiter.started)
            (answered if len(answered) < 8 else out).append(start)
        while out:  # the provider's 429s, at once; the client refills what it may meanwhile
            level, seq = out.popleft()
            limiter.rejected(level, seq)
            await limiter.__aexit__()
            refused += 1
            waiting += 1  # its retry
            while waiting and limiter.in_flight < limiter.capacity:
                await limiter.__aenter__()
                waiting -= 1
                out.append((limiter.in_flight, limiter.started))  # the provider has 8: refused
        for level, seq in answered:
            await limiter.__aexit__()
            limiter.succeeded(level, seq)
        return limiter, refused

    limiter, refused = asyncio.run(go())
    assert refused == 24
    assert limiter.capacity == 8


def test_probes_at_a_steady_limit_come_less_often() -> None:
    """5,000 calls against a limit of 8 and no other 429: a probe refused at the limit found
    before makes the next wait twice as long (one per 128 successes, not 64)."""
    limiter = AdaptiveLimiter(32)
    refused = asyncio.run(_world(limiter, random.Random(1), 5000, share=0.0, limit=8))
    assert limiter.capacity == 8
    assert refused <= 8 + 5000 // 100, refused  # the first burst's, then about one per 128


def test_a_concurrency_limit_costs_few_429s_on_the_wire(fake: FakeOpenAI) -> None:
    """The bench's case: C=32 against a server serving 8 at once, 1,000 calls. The first
    burst's 24 calls over the limit are refused, and after that about a probe per 128 answers:
    about 3% of the requests (the refills of refused slots and a probe per 64 answers made
    about 5%). Counted against the requests, never a clock; held to the bench's aim (under
    5%), as a machine far busier than two cores (a load of 10) was seen to reach 4.7%. The two
    tests above hold each of the two causes on its own, exactly."""
    fake.configure(max_in_flight=8, latency=0.02)
    flow = flownb.load_flow(make_flow(PROMPTS, ["topic"]), cache=False, concurrency=32)
    assert_all_correct(flow.run_batch(rows(500)), 500)
    stats = fake.settled_stats()
    assert stats["answered"] == 1000
    assert stats["limited"] < 0.05 * stats["requests"], stats
