"""Fixtures for the Anthropic and Gemini tests: one loopback fake of each vendor's HTTP API per
test module, reset before each test, with the vendor's environment pointing at it; and flows
whose nodes carry chosen modelParams."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from flownb.testing.fake_anthropic import FakeAnthropic
from flownb.testing.fake_gemini import FakeGemini
from tests.conftest import make_flow

ANTHROPIC_KEY = "sk-ant-test-SECRET-0123456789"
GEMINI_KEY = "AIzaTEST-SECRET-0123456789"

_GOOD = {
    "latency": 0.0,
    "faults": {},
    "fail_markers": {},
    "retry_after": "0",
    "seed": 0,
    "max_in_flight": None,
    "rate_limit": None,
    "replies": {},
    "cached_tokens": 0,
    "cache_write_tokens": 0,
}


@pytest.fixture(scope="module")
def anthropic_server() -> Iterator[FakeAnthropic]:
    """The fake Messages API for the whole module."""
    with FakeAnthropic() as server:
        yield server


@pytest.fixture(scope="module")
def gemini_server() -> Iterator[FakeGemini]:
    """The fake Gemini API for the whole module."""
    with FakeGemini() as server:
        yield server


@pytest.fixture
def anthropic_fake(
    anthropic_server: FakeAnthropic, monkeypatch: pytest.MonkeyPatch
) -> FakeAnthropic:
    """The module's fake Messages API, reset, with ANTHROPIC_* pointing at it."""
    anthropic_server.configure(**_GOOD)
    anthropic_server.reset()
    monkeypatch.setenv("ANTHROPIC_BASE_URL", anthropic_server.url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", ANTHROPIC_KEY)
    return anthropic_server


@pytest.fixture
def gemini_fake(gemini_server: FakeGemini, monkeypatch: pytest.MonkeyPatch) -> FakeGemini:
    """The module's fake Gemini API, reset, with GEMINI_* pointing at it."""
    gemini_server.configure(**_GOOD)
    gemini_server.reset()
    monkeypatch.setenv("GEMINI_BASE_URL", gemini_server.url)
    monkeypatch.setenv("GEMINI_API_KEY", GEMINI_KEY)
    return gemini_server


def flow_with(params: dict[str, dict[str, Any]], images: tuple[str, ...] = ()) -> dict:
    """Return a flow with one node per entry of ``params`` (node name -> its modelParams), each
    prompt ``"<name> about {topic}"``, one output per node."""
    flow = make_flow({name: f"{name} about {{topic}}" for name in params}, ["topic"], images=images)
    for node in flow["nodes"]:
        name = node["data"].get("name")
        if name in params:
            node["data"]["modelParams"] = params[name]
    return flow
