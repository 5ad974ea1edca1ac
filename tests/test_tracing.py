# ruff: noqa: F811  (pytest fixtures imported from openai_fake are parameters here)
"""OpenTelemetry spans (GenAI semantic conventions) for flow runs and provider calls, collected
with the SDK's in-memory exporter: real calls to the loopback fake, cache hits, failures, the
offline provider; and no tracing at all when OpenTelemetry is missing or not configured."""

from __future__ import annotations

import asyncio
import math
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

import flownb
from flownb.config.pricing import call_cost
from flownb.infra import tracing
from flownb.testing.fake_openai import FakeOpenAI
from tests.conftest import make_flow
from tests.openai_fake import fake, fake_server  # noqa: F401 (fixtures)

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[1]
TWO = make_flow({"intro": "Intro about {topic}.", "title": "Title: {topic}"}, ["topic"])
ONE = make_flow({"intro": "Intro about {topic}."}, ["topic"])


def unset_tracer_provider() -> None:
    """Put back the API's unconfigured global provider. The API lets a process set it once; this
    is what OpenTelemetry's own test utilities do, so each test starts (and leaves) untraced,
    whatever ran before it in this process (README's example sets one)."""
    trace._TRACER_PROVIDER = None
    trace._TRACER_PROVIDER_SET_ONCE._done = False


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """A configured SDK tracer provider exporting to memory, removed again afterwards."""
    unset_tracer_provider()
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    try:
        yield exporter
    finally:
        provider.shutdown()
        unset_tracer_provider()


def by_operation(exporter: InMemorySpanExporter, name: str) -> list:
    found = exporter.get_finished_spans()
    return [s for s in found if s.attributes["gen_ai.operation.name"] == name]


def test_provider_calls_and_flow_runs_are_genai_spans(
    fake: FakeOpenAI, spans: InMemorySpanExporter, tmp_path: Path
) -> None:
    flow = flownb.load_flow(TWO).with_params(model="gpt-test", temperature=0.5)
    flow.run_batch([{"topic": "a"}, {"topic": "b"}])
    (run,) = by_operation(spans, "invoke_workflow")
    calls = by_operation(spans, "chat")
    assert len(calls) == 4 == len(fake.requests)
    assert run.attributes["gen_ai.workflow.name"] == flow.name
    assert run.attributes["gen_ai.provider.name"] == "openai" and run.attributes["flownb.rows"] == 2
    for span in calls:
        a = span.attributes
        assert span.parent is not None and span.parent.span_id == run.context.span_id
        assert span.kind == trace.SpanKind.CLIENT and span.name == "chat gpt-test"
        assert a["gen_ai.provider.name"] == a["gen_ai.system"] == "openai"
        assert a["gen_ai.request.model"] == a["gen_ai.response.model"] == "gpt-test"
        assert a["gen_ai.request.temperature"] == 0.5
        assert a["gen_ai.usage.input_tokens"] > 0 and a["gen_ai.usage.output_tokens"] > 0
        assert a["flownb.cache_hit"] is False and span.status.status_code != StatusCode.ERROR
    # Run again: every answer comes from the cache, as spans that say so and used no tokens.
    spans.clear()
    fake.reset()
    flow.run_batch([{"topic": "a"}, {"topic": "b"}])
    calls = by_operation(spans, "chat")
    assert len(calls) == 4 and fake.requests == []
    assert all(s.attributes["flownb.cache_hit"] for s in calls)
    assert not any("gen_ai.usage.input_tokens" in s.attributes for s in calls)


def test_a_failed_call_is_an_error_span(
    fake: FakeOpenAI, spans: InMemorySpanExporter, tmp_path: Path
) -> None:
    fake.configure(fail_markers={"500": "BROKEN"})
    flow = flownb.load_flow(TWO, retries=0)
    with pytest.raises(flownb.ProviderError):
        flow.run(topic="BROKEN")
    failed = [s for s in by_operation(spans, "chat") if s.status.status_code == StatusCode.ERROR]
    assert failed and all(s.attributes["error.type"] for s in failed)
    assert all(s.attributes["flownb.error"] for s in failed)


@pytest.mark.parametrize("how", ["run", "stream"])
def test_a_failed_run_is_an_error_span(
    how: str, fake: FakeOpenAI, spans: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The element's error reaches the run through its on_result, and run() raises it only
    # after the run's span has ended: the span must still say the run failed.
    fake.configure(fail_markers={"500": "BOOM"})
    monkeypatch.setenv("FLOWNB_RETRIES", "0")
    flow = flownb.load_flow(ONE)
    with pytest.raises(flownb.ProviderError):
        if how == "run":
            flow.run(topic="BOOM")
        else:
            list(flow.stream(topic="BOOM"))
    (run,) = by_operation(spans, "invoke_workflow")
    assert run.status.status_code == StatusCode.ERROR
    assert run.attributes["error.type"] == "ProviderError" and run.attributes["flownb.error"]
    assert run.attributes["flownb.failed_rows"] == 1
    (event,) = [e for e in run.events if e.name == "exception"]
    assert event.attributes["exception.type"].endswith("ProviderError")
    assert event.attributes["flownb.row"] == 0


@pytest.mark.parametrize("how", ["sync", "async"])
def test_a_batch_with_failed_elements_is_an_error_span_naming_them(
    how: str, fake: FakeOpenAI, spans: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake.configure(fail_markers={"500": "BOOM"})
    monkeypatch.setenv("FLOWNB_RETRIES", "0")
    flow = flownb.load_flow(ONE)
    batch = [{"topic": "owls"}, {"topic": "BOOM"}, {"topic": "cats"}, {"topic": "BOOM twice"}]
    with pytest.raises(flownb.BatchError) as err:
        if how == "sync":
            flow.run_batch(batch)
        else:
            asyncio.run(flow.arun_batch(batch))
    assert set(err.value.errors) == {1, 3}
    # A batch is one run span (its elements share it, as their calls' parent): the span is an
    # error span that counts the failed elements and records each one's exception by index.
    (run,) = by_operation(spans, "invoke_workflow")
    assert run.status.status_code == StatusCode.ERROR
    assert run.attributes["error.type"] == "ProviderError"
    assert run.attributes["flownb.rows"] == 4 and run.attributes["flownb.failed_rows"] == 2
    events = [e for e in run.events if e.name == "exception"]
    assert sorted(e.attributes["flownb.row"] for e in events) == [1, 3]
    # The same batch without failures leaves its span's status alone.
    spans.clear()
    flow.run_batch([{"topic": "owls"}, {"topic": "cats"}])
    (run,) = by_operation(spans, "invoke_workflow")
    assert run.status.status_code == StatusCode.UNSET and "error.type" not in run.attributes
    assert "flownb.failed_rows" not in run.attributes and not run.events


def test_a_cache_hit_spends_nothing_and_reports_its_saving(
    fake: FakeOpenAI, spans: InMemorySpanExporter
) -> None:
    flow = flownb.load_flow(ONE).with_params(model="gpt-4o-mini")
    first = flow.run(topic="owls")
    again = flow.run(topic="owls")
    assert len(fake.requests) == 1 and again.cached == {"intro"}
    paid, hit = by_operation(spans, "chat")
    assert paid.attributes["flownb.cache_hit"] is False and hit.attributes["flownb.cache_hit"]
    assert first.cost > 0 and paid.attributes["flownb.cost_usd"] == pytest.approx(first.cost)
    assert "flownb.saved_usd" not in paid.attributes
    assert hit.attributes["flownb.cost_usd"] == 0.0
    assert hit.attributes["flownb.saved_usd"] == pytest.approx(first.cost)
    # Summed over the spans, the money spent is what the runs spent: the hit is not counted twice.
    spent = sum(s.attributes["flownb.cost_usd"] for s in (paid, hit))
    assert spent == pytest.approx(first.cost + again.cost)


def test_an_unknown_cost_is_left_off_the_span(
    fake: FakeOpenAI, spans: InMemorySpanExporter
) -> None:
    flow = flownb.load_flow(make_flow({"pic": "A picture of {topic}."}, ["topic"], images=("pic",)))
    flow = flow.with_params({"pic": {"model": "an-unpriced-image-model"}})
    result = flow.run(topic="owls")
    assert math.isnan(result.cost)  # no price per token nor per image for this model
    (span,) = by_operation(spans, "generate_content")
    assert "flownb.cost_usd" not in span.attributes and "flownb.saved_usd" not in span.attributes
    # An unpriced chat model alike; its cache hit still spent nothing.
    spans.clear()
    text = flownb.load_flow(ONE).with_params(model="gpt-unpriced")
    text.run(topic="owls")
    text.run(topic="owls")
    paid, hit = by_operation(spans, "chat")
    assert math.isnan(call_cost("openai", "gpt-unpriced", {"prompt_tokens": 1}))
    assert "flownb.cost_usd" not in paid.attributes
    assert hit.attributes["flownb.cost_usd"] == 0.0 and "flownb.saved_usd" not in hit.attributes


def test_offline_runs_are_traced_too(spans: InMemorySpanExporter, tmp_path: Path) -> None:
    flow = flownb.load_flow(TWO, provider="offline")
    flow.run(topic="x")
    (run,) = by_operation(spans, "invoke_workflow")
    calls = by_operation(spans, "chat")
    assert len(calls) == 2 and {s.attributes["gen_ai.provider.name"] for s in calls} == {"offline"}
    assert all(s.parent.span_id == run.context.span_id for s in calls)


def test_nothing_is_traced_without_a_configured_provider(tmp_path: Path) -> None:
    unset_tracer_provider()
    assert tracing.tracer() is None
    flow = flownb.load_flow(TWO, provider="offline")
    assert flow.run(topic="x")["intro"]


def test_an_untraced_run_does_not_look_in_the_environment_and_a_later_provider_is_seen(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # While no provider is set, OpenTelemetry's get_tracer_provider() looks in the environment
    # for one to load on every call: flownb serve paid that twice per request.
    unset_tracer_provider()
    flow = flownb.load_flow(TWO, provider="offline")
    flow.run(topic="first")  # the environment may be read once

    looked: list[str] = []

    class Watched(dict):  # type: ignore[type-arg]
        def __contains__(self, key: object) -> bool:
            looked.append(str(key))
            return super().__contains__(key)

    monkeypatch.setattr(os, "environ", Watched(os.environ))
    for topic in ("a", "b", "c"):
        assert flow.run(topic=topic)["intro"] == f"Intro about {topic}."
    assert "OTEL_PYTHON_TRACER_PROVIDER" not in looked
    # A provider set afterwards is used by the next run all the same.
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    try:
        flow.run(topic="d")
        assert len(by_operation(exporter, "invoke_workflow")) == 1
    finally:
        provider.shutdown()
        unset_tracer_provider()


def test_flownb_runs_without_opentelemetry_installed(tmp_path: Path) -> None:
    code = f"""
        import sys
        sys.modules["opentelemetry"] = None  # as if the otel extra were not installed
        import flownb
        from flownb.infra import tracing
        flow = flownb.load_flow({TWO!r}, provider="offline")
        print(flow.run(topic="x")["title"], tracing.tracer())
    """
    env = {**os.environ, "FLOWNB_HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-1] == "None" and "Title" in done.stdout
