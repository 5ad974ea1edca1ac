"""Traces that count once whatever else is installed (issue 37.4): with the vendors' own
OpenTelemetry instrumentations installed and active (``opentelemetry-instrumentation-openai-v2``;
OpenLLMetry's ``opentelemetry-instrumentation-anthropic``), ``gen_ai.usage.*`` summed over a
trace equals the run log's tokens on both OpenAI transports, plain and streamed, and on
Anthropic; a ``batch_api=True`` run leaves one span per provider batch with the batch's usage."""
# ruff: noqa: F811

from __future__ import annotations

from collections.abc import Iterator

import pandas as pd
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import flownb
from flownb.testing.fake_anthropic import FakeAnthropic
from flownb.testing.fake_openai import FakeOpenAI
from tests.test_tracing import spans  # noqa: F401  (the fixture: an in-memory exporter)
from tests.test_tracing_vendors import ROWS, TWO, _logged_tokens, _usage_sums
from tests.vendor_fakes import anthropic_fake, anthropic_server  # noqa: F401  (fixtures)

pytestmark = pytest.mark.timeout(180)

# The vendors' SDKs and instrumentations are imported by the tests that use them, not here: every
# xdist worker collects (imports) this module, and those imports cost about two seconds of CPU.


def _scopes(exporter: InMemorySpanExporter) -> set[str]:
    return {s.instrumentation_scope.name for s in exporter.get_finished_spans()}


@pytest.fixture
def openai_instrumented(spans: InMemorySpanExporter) -> Iterator[InMemorySpanExporter]:
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=trace.get_tracer_provider())
    try:
        yield spans
    finally:
        instrumentor.uninstrument()


@pytest.fixture
def openai_fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI]:
    with FakeOpenAI(batch_seconds=0.3) as fake:
        monkeypatch.setenv("OPENAI_BASE_URL", fake.url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test-trace-0123456789")
        # The fake ends a batch within 0.3 s: status checks every 30 s (the default) made the
        # Batch API test wait one whole interval for an answer that was long there.
        monkeypatch.setenv("FLOWNB_BATCH_POLL", "0.05")
        yield fake


@pytest.mark.parametrize("transport", ["aiohttp", "sdk"])
def test_openai_usage_counts_once_beside_the_openai_v2_instrumentation(
    openai_fake: FakeOpenAI,
    openai_instrumented: InMemorySpanExporter,
    transport: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import openai

    spans = openai_instrumented
    # The instrumentation is real and active: the SDK called directly gets its span.
    client = openai.OpenAI(base_url=openai_fake.url, api_key="sk-test-trace-0123456789")
    client.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}]
    )
    client.close()
    theirs = _scopes(spans) - {"flownb"}
    assert theirs and _usage_sums(spans)[0] > 0
    spans.clear()

    monkeypatch.setenv("FLOWNB_OPENAI_TRANSPORT", transport)
    flow = flownb.load_flow(TWO, provider="openai")
    assert flow.provider.transport_name == transport
    flow.run_batch(ROWS)
    *_, streamed = flow.stream(topic="moths")  # streamed and paid: one more run, two calls
    assert streamed["intro"]
    assert len(openai_fake.requests) == 1 + 3 * 2
    assert _scopes(spans) == {"flownb"}  # flownb's calls: flownb's spans alone
    paid = [s for s in spans.get_finished_spans() if "gen_ai.usage.input_tokens" in s.attributes]
    assert len(paid) == 6
    assert _usage_sums(spans) == _logged_tokens(3) != (0, 0)


def test_anthropic_usage_counts_once_beside_openllmetrys_instrumentation(
    anthropic_fake: FakeAnthropic, spans: InMemorySpanExporter
) -> None:
    import anthropic
    from opentelemetry.instrumentation.anthropic import AnthropicInstrumentor

    instrumentor = AnthropicInstrumentor()
    instrumentor.instrument(tracer_provider=trace.get_tracer_provider())
    try:
        client = anthropic.Anthropic(base_url=anthropic_fake.url, api_key="sk-ant-test-0123")
        client.messages.create(
            model="claude-haiku-4-5", max_tokens=16, messages=[{"role": "user", "content": "hi"}]
        )
        client.close()
        assert _scopes(spans) - {"flownb"}  # the instrumentation is active
        spans.clear()
        flow = flownb.load_flow(TWO, provider="anthropic").with_model("claude-haiku-4-5")
        flow.run_batch(ROWS)
        *_, streamed = flow.stream(topic="moths")
        assert streamed["intro"]
    finally:
        instrumentor.uninstrument()
    assert _scopes(spans) == {"flownb"}
    assert _usage_sums(spans) == _logged_tokens(3) != (0, 0)


def test_a_batch_api_run_leaves_one_span_per_batch_with_its_usage(
    openai_fake: FakeOpenAI, openai_instrumented: InMemorySpanExporter
) -> None:
    spans = openai_instrumented
    flow = flownb.load_flow(TWO, provider="openai")
    frame = pd.DataFrame({"topic": ["owls", "bees", "ants"]})
    out = flow.run_dataframe(frame, batch_api=True, progress=False)
    assert list(out["intro"].str.len() > 0) == [True] * 3
    batches = [s for s in spans.get_finished_spans() if "flownb.batch_id" in s.attributes]
    assert len(batches) == 1 and batches[0].attributes["flownb.batch_answers"] == 6
    assert batches[0].attributes["gen_ai.operation.name"] == "chat"
    assert batches[0].attributes["flownb.cost_usd"] > 0
    assert _usage_sums(spans) == _logged_tokens(3) != (0, 0)
    # Run again: every answer from the cache, no batch, no usage in the trace.
    spans.clear()
    flow.run_dataframe(frame, batch_api=True, progress=False)
    assert _usage_sums(spans) == (0, 0) == _logged_tokens(3)
