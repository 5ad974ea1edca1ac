"""Every provider attempt has its own time limit, though a run keeps them all on one timer
(flownb.providers.deadlines): an attempt that hangs ends in ProviderTimeout when its own time
is up, whichever attempts started before it and left early; the others are never cut short by
it; a cancellation that does not come from the limit stays a cancellation."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

import flownb
from flownb.providers.deadlines import Deadlines
from flownb.testing.fake_openai import FakeOpenAI, echo
from tests.conftest import make_flow

LIMIT = 0.5  # seconds an attempt may take; the fake answers the others in 0.02 s


@pytest.fixture
def hanging(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI]:
    """A fake that never answers a prompt holding HANG, and the environment pointing at it."""
    with FakeOpenAI(latency=0.02, fail_markers={"hang": "HANG"}) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-fake-deadlines")
        monkeypatch.setenv("FLOWNB_TIMEOUT", str(LIMIT))
        monkeypatch.setenv("FLOWNB_RETRIES", "0")
        monkeypatch.setenv("FLOWNB_CACHE", "0")
        yield server


def test_each_hanging_attempt_times_out_on_its_own_deadline(hanging: FakeOpenAI) -> None:
    # Hangs start at different moments (after fast calls that began before them and left), so
    # the run's one timer is set for a deadline that left, then for each hang's in turn.
    topics = ["a", "HANG 1", "b", "c", "d", "e", "HANG 2", "f", "g", "HANG 3", "h", "i"]
    flow = flownb.load_flow(
        make_flow({"out": "{topic}"}, ["topic"]), provider="openai", concurrency=2
    )
    with pytest.raises(flownb.BatchError) as caught:
        flow.run_batch([{"topic": t} for t in topics])
    err = caught.value
    hung = {i for i, t in enumerate(topics) if t.startswith("HANG")}
    assert set(err.errors) == hung
    for i in hung:
        assert isinstance(err.errors[i], flownb.ProviderTimeout), repr(err.errors[i])
        assert f"did not answer within {LIMIT:g} s" in str(err.errors[i])
    for i, topic in enumerate(topics):
        if i not in hung:
            assert err.results[i] is not None and err.results[i]["out"] == echo(topic)
    assert hanging.stats()["requests"] == len(topics)  # each sent once: nothing retried


async def _hold(deadlines: Deadlines, seconds: float) -> tuple[str, float]:
    """Hold an attempt open ``seconds`` under ``deadlines``, as the call runner does; return
    how it ended ("answered" or "timed out") and how long it was open."""
    task = asyncio.current_task()
    assert task is not None
    loop = asyncio.get_running_loop()
    began = loop.time()
    limit = deadlines.enter(task)
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        if deadlines.leave(limit):
            return "timed out", loop.time() - began
        raise
    deadlines.leave(limit)
    return "answered", loop.time() - began


def test_a_limit_cuts_its_own_attempt_no_sooner_and_no_other() -> None:
    async def main() -> list[tuple[str, float]]:
        # 1.5 s limits for 0.1 s answers: the quick ones answer within their limit however
        # long a loaded machine stalls this process (a 0.3 s limit failed at load 14).
        deadlines = Deadlines(1.5)
        first = asyncio.ensure_future(_hold(deadlines, 0.1))  # sets the timer, leaves early
        await asyncio.sleep(0.05)
        late = asyncio.ensure_future(_hold(deadlines, 10.0))  # its deadline comes 0.05 s later
        quick = asyncio.ensure_future(_hold(deadlines, 0.1))
        return list(await asyncio.gather(first, late, quick))

    (first, _), (late, waited), (quick, _) = asyncio.run(main())
    assert (first, late, quick) == ("answered", "timed out", "answered")
    assert waited >= 1.5  # its own deadline, not the earlier one the timer was set for


def test_another_cancellation_is_not_a_timeout() -> None:
    async def main() -> None:
        deadlines = Deadlines(1.5)  # the cancel, 0.05 s in, comes first on a loaded machine too
        held = asyncio.ensure_future(_hold(deadlines, 10.0))
        await asyncio.sleep(0.05)
        held.cancel()  # the user's Ctrl-C, before the limit
        with pytest.raises(asyncio.CancelledError):
            await held
        # The limit still cuts the attempts that come after it.
        assert (await _hold(deadlines, 10.0))[0] == "timed out"

    asyncio.run(main())


def test_a_providers_own_time_limit_with_no_run_limit_is_a_provider_timeout() -> None:
    # A runner made with no time limit of its own: the provider's TimeoutError still becomes
    # ProviderTimeout, worded without a number (it once formatted None and raised TypeError).
    from typing import ClassVar

    from flownb.providers.base import Call, Generation, Provider
    from flownb.providers.calls import CallRunner

    class SlowVendor(Provider):
        name: ClassVar[str] = "slow-vendor"
        cacheable: ClassVar[bool] = False

        async def generate(self, call: Call) -> Generation:
            raise TimeoutError("the vendor's client gave up")

    async def ask() -> Generation:
        runner = CallRunner(SlowVendor(), concurrency=1, retries=0)
        return await runner(Call("text", "hello"))

    with pytest.raises(flownb.ProviderTimeout, match="slow-vendor did not answer in time"):
        asyncio.run(ask())
