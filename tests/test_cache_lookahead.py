# ruff: noqa: F811  (pytest fixtures imported from openai_fake are parameters here)
"""A cached re-run answered from bulk lookups ahead of the rows: no request, the same results
and run-log rows as the first run's, and an answer object of its own for every row."""

from __future__ import annotations

import asyncio

import pytest

import flownb
from flownb.testing.fake_openai import FakeOpenAI, echo
from tests.conftest import make_flow
from tests.openai_fake import fake, fake_server  # noqa: F401 (fixtures)

PROMPTS = {"intro": "Intro about {topic}.", "title": "Title about {topic}."}


def test_a_cached_rerun_with_repeated_rows_sends_nothing_and_keeps_rows_apart(
    fake: FakeOpenAI,
) -> None:
    flow = flownb.load_flow(make_flow(PROMPTS, ["topic"]))
    # Repeated prompts, in one lookahead chunk and across two (1024 elements a chunk).
    batch = [{"topic": f"t{i % 7}"} for i in range(1500)]
    first = flow.run_batch(batch)
    sent = len(fake.requests)
    assert sent == 14  # 7 topics x 2 nodes: each prompt bought once
    again = flow.run_batch(batch)
    assert len(fake.requests) == sent  # every call of the re-run came from the cache
    assert again == first and all(r.cached == {"intro", "title"} for r in again)
    # The first run paid once per prompt; every row's price is the same on the re-run.
    assert [r.price for r in again] == [r.price for r in first]
    assert all(r.cost == 0 for r in again)
    # Rows with one prompt share no answer object (each has its own latency).
    gens = [g for r in again for g in r.generations]
    assert len({id(g) for g in gens}) == len(gens) == 3000

    runs = flownb.runs()
    rerun = runs[runs["run_id"] == runs["run_id"].iloc[-1]]
    assert len(rerun) == 1500 and rerun["cached"].all()
    assert (rerun["cost_usd"] == 0).all() and rerun["prompt_tokens"].isna().all()
    assert list(rerun["price_usd"]) == [r.price for r in first]
    assert list(rerun["saved_usd"]) == [r.price for r in first]


def test_a_cold_run_buys_each_repeated_prompt_once(fake: FakeOpenAI) -> None:
    # A repeat looked up while its twin was in flight, and sent after the twin had ended and
    # stored its answer, was bought a second time (14-22 requests for these 14 prompts): the
    # runner trusted its earlier miss. Several cold runs, as the window was hit in about half.
    flow = flownb.load_flow(make_flow(PROMPTS, ["topic"]))
    for run in range(4):
        before = len(fake.requests)
        flow.run_batch([{"topic": f"r{run}-{i % 7}"} for i in range(1500)])
        bodies = fake.requests[before:]
        prompts = [b["messages"][-1]["content"] for b in bodies]
        assert len(prompts) == len(set(prompts)) == 14, f"run {run}: {len(prompts)} requests"


def test_a_miss_found_in_bulk_is_trusted_for_a_while_then_looked_up_again(
    fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The bulk lookup found the call missing; another process then stored its answer. Within
    # TRUST_MISS the call does not query again (the answer is bought a second time, as a twin
    # in flight in another process always was); past it, the call queries and finds it.
    from flownb.providers import calls
    from flownb.providers.base import Generation
    from flownb.runtime.cache import CallCache

    flow = flownb.load_flow(make_flow(PROMPTS, ["topic"]))
    engine = flow.engine
    cache = engine.cache
    assert cache is not None
    other = CallCache(cache.path, cache.media_dir)  # another process's connection
    node = engine.nodes[0]

    async def ask(prompt: str) -> Generation:
        runner = calls.CallRunner(engine.provider, concurrency=1, cache=cache, retries=0)
        call = node.call(prompt)
        runner.missing(node.params, [(prompt, node.key(prompt))])  # what the lookahead notes
        other.put(node.key(prompt), Generation("stored by the other process", model="m"))
        other.flush()
        hit = runner.hit(call)
        return hit if hit is not None else await runner(call)

    fresh = asyncio.run(ask("Intro about trusted."))
    assert fresh.output == echo("Intro about trusted.") and not fresh.cached
    assert len(fake.requests) == 1

    monkeypatch.setattr(calls, "TRUST_MISS", 0.0)  # every bulk miss is now too old to trust
    stale = asyncio.run(ask("Intro about stale."))
    assert stale.output == "stored by the other process" and stale.cached
    assert len(fake.requests) == 1
    other.close()
