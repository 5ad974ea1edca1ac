"""Every fake reports every request it received: a DataFrame run through each vendor's fake
shows up in its ``received`` request by request (path, query, headers, body)."""

from __future__ import annotations

import pandas as pd
import pytest

import flownb
from flownb.testing.fake_anthropic import FakeAnthropic
from flownb.testing.fake_gemini import FakeGemini
from flownb.testing.fake_openai import FakeOpenAI
from tests.conftest import make_flow

_MODELS = {
    "openai": "gpt-4o-mini",
    "anthropic": "claude-3-5-haiku-latest",
    "gemini": "gemini-2.0-flash",
}
_ENV = {"openai": "OPENAI", "anthropic": "ANTHROPIC", "gemini": "GEMINI"}
_FAKES: dict[str, type[FakeOpenAI]] = {
    "openai": FakeOpenAI,
    "anthropic": FakeAnthropic,
    "gemini": FakeGemini,
}


@pytest.mark.parametrize("provider", sorted(_FAKES))
def test_each_fake_reports_every_request_of_a_dataframe_run(
    provider: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    flow = make_flow({"A": "first about {topic}", "B": "second about {topic}"}, ["topic"])
    for node in flow["nodes"]:
        if node["type"] == "actionNode":
            node["data"]["modelParams"] = {"model": _MODELS[provider]}
    topics = [f"topic{i}" for i in range(5)]
    with _FAKES[provider]() as fake:
        prefix = _ENV[provider]
        monkeypatch.setenv(f"{prefix}_BASE_URL", fake.url)
        monkeypatch.setenv(f"{prefix}_API_KEY", "test-key-0123456789")
        f = flownb.load_flow(flow, provider=provider, cache=False)
        out = f.run_dataframe(pd.DataFrame({"topic": topics}), progress=False)
        sent = fake.settled_stats()["requests"]
        received = fake.received
    assert len(out) == 5 and out["A"].notna().all() and out["B"].notna().all()
    assert sent == 10
    assert len(received) == sent == len(fake.requests)
    for entry in received:
        assert set(entry) == {"path", "query", "headers", "body"}
        assert isinstance(entry["query"], dict) and isinstance(entry["headers"], dict)
    # Each vendor nests the prompt its own way: look for it anywhere in the body.
    bodies = [repr(entry["body"]) for entry in received]
    for word in ("first", "second"):
        for topic in topics:
            assert sum(f"{word} about {topic}" in b for b in bodies) == 1, (word, topic)
