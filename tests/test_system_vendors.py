"""``flow.with_system(...)`` reaches every vendor's request body (issue 28.4): OpenAI's system
role, Azure's (the same), Anthropic's ``system`` and Gemini's ``systemInstruction``, for plain,
streamed and batch calls, at the HTTP boundary of the loopback fakes."""
# ruff: noqa: F811

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pandas as pd
import pytest

import flownb
from flownb.testing.fake_anthropic import FakeAnthropic
from flownb.testing.fake_gemini import FakeGemini
from flownb.testing.fake_openai import FakeOpenAI
from tests.conftest import make_flow
from tests.vendor_fakes import (  # noqa: F401  (fixtures)
    anthropic_fake,
    anthropic_server,
    gemini_fake,
    gemini_server,
)

SYSTEM = "Answer like a pirate."
FAST_BATCH = {"batch_seconds": 0.2, "batch_fail_marker": "", "batch_expire": False}


def _flow(provider: str | None = None, **extra: Any) -> flownb.LocalFlow:
    data = make_flow({"Intro": "About {topic}."}, ["topic"])
    return flownb.load_flow(data, provider=provider, **extra).with_system(SYSTEM)


def _consume(flow: flownb.LocalFlow, topic: str) -> None:
    *events, result = list(flow.stream(topic=topic))
    assert events and result["Intro"]


@pytest.fixture(scope="module")
def openai_server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


@pytest.fixture
def openai_fake(openai_server: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> FakeOpenAI:
    openai_server.configure(latency=0.0, faults={}, fail_markers={}, replies={}, **FAST_BATCH)
    openai_server.reset()
    monkeypatch.setenv("OPENAI_BASE_URL", openai_server.url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-system-0123456789")
    monkeypatch.setenv("FLOWNB_BATCH_POLL", "0.05")
    return openai_server


def _openai_systems(bodies: list[dict[str, Any]]) -> list[str]:
    return [m["content"] for b in bodies for m in b["messages"] if m["role"] == "system"]


def test_openai_plain_streamed_and_batched_calls_carry_the_system_message(
    openai_fake: FakeOpenAI,
) -> None:
    flow = _flow("openai")
    flow.run(topic="plain")
    _consume(flow, "streamed")
    flow.run_dataframe(pd.DataFrame({"topic": ["batched"]}), batch_api=True, progress=False)
    assert _openai_systems(openai_fake.requests) == [SYSTEM, SYSTEM]  # plain, streamed
    lines = [json.loads(x) for data in openai_fake.batches.uploads for x in data.splitlines()]
    assert [ln["body"]["messages"][0] for ln in lines] == [{"role": "system", "content": SYSTEM}]


def test_azure_calls_carry_the_system_message(openai_fake: FakeOpenAI) -> None:
    azure = flownb.Endpoint(
        "az",
        "azure",
        base_url=openai_fake.origin,
        api_key="azure-test-key-0123456789",
        api_version="2024-10-21",
        deployments={"gpt-4o-mini": "mini"},
    )
    flow = _flow(endpoint=azure, cache=False).with_model("gpt-4o-mini")
    flow.run(topic="plain")
    _consume(flow, "streamed")
    paths = {r["path"] for r in openai_fake.received}
    assert paths == {"/openai/deployments/mini/chat/completions"}
    assert _openai_systems(openai_fake.requests) == [SYSTEM, SYSTEM]


def test_anthropic_plain_streamed_and_message_batch_calls_carry_system(
    anthropic_fake: FakeAnthropic, monkeypatch: pytest.MonkeyPatch
) -> None:
    anthropic_fake.configure(**FAST_BATCH, batch_create_delay=0.0)
    monkeypatch.setenv("FLOWNB_BATCH_POLL", "0.05")
    flow = _flow("anthropic").with_model("claude-haiku-4-5")
    flow.run(topic="plain")
    _consume(flow, "streamed")
    flow.run_dataframe(pd.DataFrame({"topic": ["batched"]}), batch_api=True, progress=False)
    assert [b.get("system") for b in anthropic_fake.requests] == [SYSTEM, SYSTEM]
    sent = [r["params"] for batch in anthropic_fake.message_batches.submitted for r in batch]
    assert [p.get("system") for p in sent] == [SYSTEM]


def test_the_system_message_wins_over_a_system_param_and_changes_the_cache_key(
    anthropic_fake: FakeAnthropic,
) -> None:
    data = make_flow({"Intro": "About {topic}."}, ["topic"])
    data["nodes"][1]["data"]["modelParams"] = {"model": "claude-haiku-4-5", "system": "Be dull."}
    plain = flownb.load_flow(data, provider="anthropic")
    plain.run(topic="x")
    plain.with_system(SYSTEM).run(topic="x")
    assert [b.get("system") for b in anthropic_fake.requests] == ["Be dull.", SYSTEM]


def _gemini_system(body: dict[str, Any]) -> str | None:
    found = body.get("systemInstruction") or body.get("system_instruction")
    if found is None:
        return None
    return "".join(part.get("text", "") for part in found["parts"])


def test_gemini_plain_and_streamed_calls_carry_the_system_instruction(
    gemini_fake: FakeGemini,
) -> None:
    flow = _flow("gemini").with_model("gemini-2.5-flash")
    flow.run(topic="plain")
    _consume(flow, "streamed")
    assert [_gemini_system(b) for b in gemini_fake.requests] == [SYSTEM, SYSTEM]


def test_without_with_system_no_vendor_gets_a_system_message(
    anthropic_fake: FakeAnthropic, gemini_fake: FakeGemini
) -> None:
    data = make_flow({"Intro": "About {topic}."}, ["topic"])
    flownb.load_flow(data, provider="anthropic").with_model("claude-haiku-4-5").run(topic="y")
    flownb.load_flow(data, provider="gemini").with_model("gemini-2.5-flash").run(topic="y")
    assert "system" not in anthropic_fake.requests[0]
    assert _gemini_system(gemini_fake.requests[0]) is None
