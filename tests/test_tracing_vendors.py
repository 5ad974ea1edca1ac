"""Exports that count once (issue 28.8): with OpenTelemetry configured, each provider call of
every vendor is one ``chat`` span carrying its usage (the anthropic SDK's own spans are off),
so ``gen_ai.usage.*`` summed over a trace equals the run log's tokens; provider names follow the
GenAI registry (``openai``, ``azure.ai.openai``, ``anthropic``, ``gcp.gemini``), with
``server.address``/``server.port``, ``gen_ai.response.id`` and
``gen_ai.response.finish_reasons``."""
# ruff: noqa: F811

from __future__ import annotations

import warnings
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import flownb
from flownb.testing.fake_anthropic import FakeAnthropic
from flownb.testing.fake_gemini import FakeGemini
from flownb.testing.fake_openai import FakeOpenAI
from tests.conftest import make_flow
from tests.test_tracing import spans  # noqa: F401  (the fixture: an in-memory exporter)
from tests.vendor_fakes import (  # noqa: F401  (fixtures)
    anthropic_fake,
    anthropic_server,
    gemini_fake,
    gemini_server,
)

pytestmark = pytest.mark.timeout(180)

TWO = make_flow({"intro": "Intro about {topic}.", "title": "Title: {topic}"}, ["topic"])
ROWS = [{"topic": "owls"}, {"topic": "bees"}]


def _usage_sums(exporter: InMemorySpanExporter) -> tuple[int, int]:
    found = exporter.get_finished_spans()
    return (
        sum(int(s.attributes.get("gen_ai.usage.input_tokens", 0)) for s in found),
        sum(int(s.attributes.get("gen_ai.usage.output_tokens", 0)) for s in found),
    )


def _logged_tokens(n: int) -> tuple[int, int]:
    log = flownb.runs().tail(n)
    return int(log["prompt_tokens"].sum()), int(log["completion_tokens"].sum())


def _chat(exporter: InMemorySpanExporter) -> list:
    return [
        s
        for s in exporter.get_finished_spans()
        if s.attributes.get("gen_ai.operation.name") == "chat"
    ]


def _server(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    assert parts.hostname is not None and parts.port is not None
    return parts.hostname, parts.port


def test_anthropic_usage_is_counted_once_per_call_and_equals_the_run_log(
    anthropic_fake: FakeAnthropic, spans: InMemorySpanExporter
) -> None:
    flow = flownb.load_flow(TWO, provider="anthropic").with_model("claude-haiku-4-5")
    flow.run_batch(ROWS)
    for values in ROWS:  # streamed: the same answers, from the cache
        list(flow.stream(values))
    *_, streamed = flow.stream(topic="moths")  # streamed and paid: one more run, two calls
    assert streamed["intro"]
    # Only flownb's spans: the anthropic SDK's own (scope com.anthropic.sdk.python) are off.
    assert {s.instrumentation_scope.name for s in spans.get_finished_spans()} == {"flownb"}
    calls = _chat(spans)
    assert len(calls) == 2 * 5 and len(anthropic_fake.requests) == 2 * 3
    paid = [s for s in calls if not s.attributes["flownb.cache_hit"]]
    assert len(paid) == 6
    assert _usage_sums(spans) == _logged_tokens(5)  # runs: 2 batch, 2 cached, 1 streamed
    for span in paid:
        a = span.attributes
        assert a["gen_ai.provider.name"] == "anthropic"
        assert (a["server.address"], a["server.port"]) == _server(anthropic_fake.url)
        assert a["gen_ai.response.id"] == "msg_fake"
        assert tuple(a["gen_ai.response.finish_reasons"]) == ("stop",)
    for span in calls:
        if span.attributes["flownb.cache_hit"]:
            assert "gen_ai.usage.input_tokens" not in span.attributes


def test_gemini_spans_name_gcp_gemini_with_server_response_id_and_finish(
    gemini_fake: FakeGemini, spans: InMemorySpanExporter
) -> None:
    flow = flownb.load_flow(TWO, provider="gemini").with_model("gemini-2.5-flash")
    flow.run_batch(ROWS)
    *_, last = flow.stream(topic="moths")
    assert last["intro"]
    (run, *_) = [
        s
        for s in spans.get_finished_spans()
        if s.attributes["gen_ai.operation.name"] == "invoke_workflow"
    ]
    assert run.attributes["gen_ai.provider.name"] == "gcp.gemini"
    calls = _chat(spans)
    assert len(calls) == 6 == len(gemini_fake.requests)
    for span in calls:
        a = span.attributes
        assert a["gen_ai.provider.name"] == a["gen_ai.system"] == "gcp.gemini"
        assert (a["server.address"], a["server.port"]) == _server(gemini_fake.url)
        assert str(a["gen_ai.response.id"]).startswith("fake-")
        assert tuple(a["gen_ai.response.finish_reasons"]) == ("stop",)
    assert _usage_sums(spans) == _logged_tokens(3)


@pytest.fixture
def openai_fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        monkeypatch.setenv("OPENAI_BASE_URL", fake.url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test-trace-0123456789")
        monkeypatch.setenv("AZURE_KEY", "azure-test-0123456789")
        yield fake


def test_openai_and_azure_spans_name_their_provider_and_server(
    openai_fake: FakeOpenAI, spans: InMemorySpanExporter
) -> None:
    flownb.load_flow(TWO, provider="openai").run_batch(ROWS)
    azure = flownb.Endpoint(
        "az",
        "azure",
        base_url=openai_fake.origin,
        api_key_env="AZURE_KEY",
        api_version="2024-10-21",
        deployments={"gpt-4o-mini": "mini"},
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        flownb.load_flow(TWO, endpoint=azure).with_model("gpt-4o-mini").run(topic="azure")
    calls = _chat(spans)
    names = [s.attributes["gen_ai.provider.name"] for s in calls]
    assert sorted(names) == ["azure.ai.openai"] * 2 + ["openai"] * 4
    for span in calls:
        a = span.attributes
        assert (a["server.address"], a["server.port"]) == _server(openai_fake.url)
        assert a["gen_ai.response.id"] and tuple(a["gen_ai.response.finish_reasons"]) == ("stop",)
    assert _usage_sums(spans) == _logged_tokens(3)
