# ruff: noqa: F811  (pytest fixtures imported from openai_fake are parameters here)
"""Throughput and robustness against the loopback fake: the concurrency limit is never exceeded,
429s (Retry-After 0 and >0) and 5xx are retried, hangs time out, dropped connections are retried,
fault injection loses nothing, the requests-per-minute pace holds, 429s lower concurrency."""

from __future__ import annotations

import asyncio
import time

import pytest

import flownb
from flownb.errors import BatchError, ProviderTimeout
from flownb.providers import limits
from flownb.providers.limits import AdaptiveLimiter, Pacer
from flownb.testing.fake_openai import FakeOpenAI, echo
from tests.conftest import make_flow
from tests.openai_fake import fake, fake_server  # noqa: F401 (fixtures)

PROMPTS = {"intro": "Intro about {topic}.", "title": "Title about {topic}."}


def two_nodes() -> dict:
    return make_flow(PROMPTS, ["topic"])


def rows(n: int) -> list[dict[str, str]]:
    return [{"topic": f"t{i}"} for i in range(n)]


def assert_all_correct(results: list, n: int) -> None:
    assert len(results) == n
    for i, res in enumerate(results):
        assert res == {
            "intro": echo(f"Intro about t{i}."),
            "title": echo(f"Title about t{i}."),
        }


@pytest.mark.parametrize("concurrency", [1, 4, 16])
def test_concurrency_limit_is_never_exceeded_and_is_used(
    fake: FakeOpenAI, concurrency: int
) -> None:
    fake.configure(latency=0.02)
    flow = flownb.load_flow(two_nodes(), cache=False, concurrency=concurrency)
    results = flow.run_batch(rows(40))
    assert_all_correct(results, 40)
    assert len(fake.requests) == 80
    # Batch elements and both nodes of an element share one limit: never more, and it fills up.
    assert fake.peak_in_flight == concurrency


def test_per_call_concurrency_overrides_the_flow_default(fake: FakeOpenAI) -> None:
    fake.configure(latency=0.02)
    flow = flownb.load_flow(two_nodes(), cache=False, concurrency=16)
    flow.run_batch(rows(20), concurrency=3)
    assert fake.peak_in_flight == 3


def test_global_concurrency_setting(fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLOWNB_CONCURRENCY", "5")
    fake.configure(latency=0.02)
    flownb.load_flow(two_nodes(), cache=False).run_batch(rows(20))
    assert fake.peak_in_flight == 5


def test_429_with_retry_after_zero_is_retried_promptly(
    fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake.configure(fail_markers={"429": "t3."}, retry_after="0")
    # Were Retry-After: 0 taken as absent, each retry would back off 30 s: 2 minutes in all.
    policy = limits.retry_delay
    waits: list[float] = []

    def delay(n: int, hint: float | None, **kw: float) -> float:
        waits.append(30.0 if hint is None else policy(n, hint, **kw))
        return waits[-1]

    monkeypatch.setattr(limits, "retry_delay", delay)
    flow = flownb.load_flow(two_nodes(), cache=False, retries=4)
    # Every attempt for t3 gets a 429: 1 + 4 attempts per node, each retried at once.
    with pytest.raises(BatchError) as info:
        flow.run_batch(rows(5))
    assert set(info.value.errors) == {3}
    assert info.value.errors[3].code == "upstream_rate_limited"
    assert sum("t3." in str(body) for body in fake.requests) == 2 * 5
    # The waits the retry policy chose (at least one per retry; tenacity also asks after the
    # last attempt): Retry-After 0 means now (a few ms of jitter), not "absent, back off".
    assert len(waits) >= 2 * 4 and max(waits) <= 0.005
    assert_all_correct([r for r in info.value.results if r is not None][:3], 3)


def test_retry_after_is_honoured(fake: FakeOpenAI) -> None:
    fake.configure(faults={"429": 1.0}, retry_after="0.3")
    flow = flownb.load_flow(make_flow({"a": "x {topic}"}, ["topic"]), cache=False, retries=2)
    started = time.perf_counter()
    with pytest.raises(flownb.RateLimited) as info:
        flow.run(topic="y")
    assert time.perf_counter() - started >= 0.6  # two waits of Retry-After 0.3 s
    assert info.value.retry_after == 0.3
    assert len(fake.requests) == 3


def test_500s_are_retried_with_backoff_and_succeed(fake: FakeOpenAI) -> None:
    fake.configure(faults={"500": 0.5}, seed=3)
    flow = flownb.load_flow(two_nodes(), cache=False, concurrency=8)
    results = flow.run_batch(rows(30))
    assert_all_correct(results, 30)
    assert fake.stats()["faults"]["500"] > 5
    # The fake counts an answer once it is sent, which may be just after the client read it.
    deadline = time.monotonic() + 30
    while fake.stats()["answered"] < 60 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert fake.stats()["answered"] == 60


def test_a_hanging_call_times_out_and_is_retried(fake: FakeOpenAI) -> None:
    fake.configure(fail_markers={"hang": "t1."})
    flow = flownb.load_flow(two_nodes(), cache=False, timeout=0.2, retries=1)
    with pytest.raises(BatchError) as info:  # the fake holds t1 for good: only a timeout ends it
        flow.run_batch(rows(3))
    exc = info.value.errors[1]
    assert isinstance(exc, ProviderTimeout) and exc.code == "provider_timeout"
    assert "did not answer within 0.2 s" in str(exc)
    assert sum("t1." in str(body) for body in fake.requests) == 4  # 2 nodes x 2 attempts
    assert info.value.results[0] is not None and info.value.results[2] is not None


def test_timeout_from_the_environment(fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLOWNB_TIMEOUT", "0.2")
    monkeypatch.setenv("FLOWNB_RETRIES", "0")
    fake.configure(fail_markers={"hang": "x"})
    flow = flownb.load_flow(make_flow({"a": "x {topic}"}, ["topic"]), cache=False)
    with pytest.raises(ProviderTimeout):
        flow.run(topic="y")
    assert len(fake.requests) == 1


def test_dropped_connections_are_retried(fake: FakeOpenAI) -> None:
    fake.configure(faults={"drop": 0.3}, seed=1)
    flow = flownb.load_flow(two_nodes(), cache=False, concurrency=4)
    assert_all_correct(flow.run_batch(rows(20)), 20)
    assert fake.stats()["faults"]["drop"] > 3


def test_a_connection_refused_is_a_provider_error(
    fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{port}/v1")
    flow = flownb.load_flow(make_flow({"a": "x {topic}"}, ["topic"]), cache=False, retries=0)
    with pytest.raises(flownb.ProviderError, match="could not reach the OpenAI API") as info:
        flow.run(topic="y")
    assert info.value.status is None


@pytest.mark.parametrize("transport", ["aiohttp", "sdk"])
def test_fault_injection_nothing_lost(
    fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch, transport: str
) -> None:
    """10% 429s (Retry-After: 0) and 5% 500s: every row correct, nothing lost."""
    monkeypatch.setenv("FLOWNB_OPENAI_TRANSPORT", transport)
    fake.configure(faults={"429": 0.10, "500": 0.05}, retry_after="0", seed=11, latency=0.002)
    n = 200
    flow = flownb.load_flow(two_nodes(), cache=False, concurrency=16)
    results = flow.run_batch(rows(n))
    assert_all_correct(results, n)
    stats = fake.settled_stats()  # every answer counted
    assert stats["answered"] == 2 * n
    assert stats["faults"]["429"] > 20 and stats["faults"]["500"] > 8
    assert stats["requests"] == 2 * n + stats["faults"]["429"] + stats["faults"]["500"]
    assert fake.peak_in_flight <= 16


def test_rpm_paces_request_starts(fake: FakeOpenAI) -> None:
    flow = flownb.load_flow(two_nodes(), cache=False, rpm=600)  # one request per 0.1 s
    started = time.perf_counter()
    flow.run_batch(rows(3))
    assert time.perf_counter() - started >= 0.45  # 6 requests: 5 gaps of 0.1 s
    assert len(fake.requests) == 6


def test_rate_limiting_lowers_concurrency_then_it_regrows() -> None:
    limiter = AdaptiveLimiter(32, cooldown=0.0)
    limiter.rate_limited()
    assert limiter.capacity == 16
    limiter.rate_limited()
    assert limiter.capacity == 8
    for _ in range(100):
        limiter.succeeded()
    assert 8 < limiter.capacity < 32  # additive increase: about one slot per round of calls
    for _ in range(1000):
        limiter.succeeded()
    assert limiter.capacity == 32
    slow = AdaptiveLimiter(32, cooldown=60)
    slow.rate_limited()
    slow.rate_limited()  # one burst of 429s is one cut
    assert slow.capacity == 16 and slow.cuts == 1


def test_lowered_capacity_bounds_in_flight_calls() -> None:
    async def go() -> int:
        limiter = AdaptiveLimiter(8, cooldown=0.0)
        limiter.rate_limited()  # 4
        peak = 0

        async def call() -> None:
            nonlocal peak
            async with limiter:
                peak = max(peak, limiter.in_flight)
                await asyncio.sleep(0.005)

        await asyncio.gather(*(call() for _ in range(40)))
        assert limiter.in_flight == 0
        return peak

    assert asyncio.run(go()) == 4


def test_cancelled_waiters_give_their_slot_back() -> None:
    async def go() -> None:
        limiter = AdaptiveLimiter(1)
        await limiter.__aenter__()
        waiter = asyncio.ensure_future(limiter.__aenter__())
        await asyncio.sleep(0)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        await limiter.__aexit__()
        assert limiter.in_flight == 0
        async with limiter:
            assert limiter.in_flight == 1

    asyncio.run(go())


def test_pacer_spacing() -> None:
    async def go() -> float:
        pacer = Pacer(1200)  # 0.05 s apart
        started = time.perf_counter()
        for _ in range(5):
            await pacer.wait()
        return time.perf_counter() - started

    assert asyncio.run(go()) >= 0.19


def test_a_real_provider_429_storm_cuts_concurrency(fake: FakeOpenAI) -> None:
    fake.configure(faults={"429": 0.5}, retry_after="0", latency=0.01, seed=5)
    flow = flownb.load_flow(two_nodes(), cache=False, concurrency=16)
    assert_all_correct(flow.run_batch(rows(30)), 30)
    # Half the calls refused: the limiter cut its allowance at least once.
    assert fake.stats()["faults"]["429"] > 10
