# ruff: noqa: F811  (pytest fixtures imported from openai_fake are parameters here)
"""Back-off that fits the signal, against the loopback fake enforcing real limits: random 429s
leave the concurrency alone, a concurrency limit is found with few 429s, OpenAI's rate-limit
headers are read by both transports and pace starts before the provider refuses."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest
from openai_fake import fake, fake_server  # noqa: F401 (fixtures)

import flownb
from flownb.media import MediaStore
from flownb.providers.base import Call, RateLimits
from flownb.providers.limits import AdaptiveLimiter
from flownb.providers.openai import OpenAIProvider, parse_duration, rate_limits
from flownb.testing.fake_openai import FakeOpenAI, duration, echo
from tests.conftest import make_flow

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


def test_a_concurrency_limit_is_found_with_few_429s(fake: FakeOpenAI) -> None:
    fake.configure(max_in_flight=4, latency=0.01)
    flow = flownb.load_flow(make_flow(PROMPTS, ["topic"]), cache=False, concurrency=16)
    assert_all_correct(flow.run_batch(rows(100)), 100)
    stats = fake.stats()
    assert stats["answered"] == 200
    # The first burst refuses the 12 calls over the limit (and some retries land in it too);
    # after that, about one probe per 8 x 4 successes: ~25 in all. Halving (the old way) kept
    # half the calls refused for seconds and lost rows after 8 retries.
    assert stats["limited"] <= 40, stats
    assert fake.peak_in_flight <= 5


def test_rate_limit_headers_pace_starts_before_any_429(fake: FakeOpenAI) -> None:
    fake.configure(rate_limit=15, rate_window=0.3, latency=0.005)
    flow = flownb.load_flow(make_flow(PROMPTS, ["topic"]), cache=False, concurrency=8)
    assert_all_correct(flow.run_batch(rows(30)), 30)
    stats = fake.stats()
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
