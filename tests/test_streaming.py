"""Streaming a single run: ``flow.stream`` / ``flow.astream`` against the loopback fakes of
OpenAI, Anthropic and Gemini (which stream word by word, recording when each word was sent), the
offline provider, the cache (a streamed run and a plain run share one entry) and the run log."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

import flownb
from flownb.runtime.events import StreamEvent
from flownb.testing.fake_anthropic import FakeAnthropic
from flownb.testing.fake_gemini import FakeGemini
from flownb.testing.fake_openai import FakeOpenAI, echo
from tests.conftest import make_flow
from tests.openai_fake import fake, fake_server  # noqa: F401  (fixtures)
from tests.vendor_fakes import (  # noqa: F401  (fixtures)
    anthropic_fake,
    anthropic_server,
    flow_with,
    gemini_fake,
    gemini_server,
)

WORDS = "alpha beta gamma delta epsilon zeta eta theta"


def _timed(events: Any) -> list[tuple[float, Any]]:
    """Return every item of ``events`` with the perf_counter time it was received."""
    return [(time.perf_counter(), item) for item in events]


def _texts(items: list[Any]) -> dict[str, str]:
    joined: dict[str, str] = {}
    for item in items:
        if isinstance(item, StreamEvent) and item.kind == "text":
            joined[item.node] = joined.get(item.node, "") + item.delta
    return joined


@pytest.mark.parametrize("transport", ["aiohttp", "sdk"])
def test_openai_text_arrives_while_the_fake_is_still_sending(
    fake: FakeOpenAI,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    transport: str,
) -> None:
    monkeypatch.setenv("FLOWNB_OPENAI_TRANSPORT", transport)
    fake.configure(stream_delay=0.1)
    try:
        flow = flownb.load_flow(make_flow({"story": "{x}"}, ["x"]))
        timed = _timed(flow.stream(x=WORDS))
    finally:
        fake.configure(stream_delay=0.0)
    items = [item for _, item in timed]
    result = items[-1]
    assert isinstance(result, flownb.RunResult)
    assert result == {"story": f"echo: {WORDS}"}
    events = [(t, e) for t, e in timed if isinstance(e, StreamEvent)]
    assert len(events) == len(WORDS.split()) + 1  # "echo: " and one event per word
    assert _texts(items) == {"story": f"echo: {WORDS}"}
    [sent] = fake.streams
    first_seen = events[0][0]
    last_sent = sent[-1][0]
    # The first text was in the caller's hands while the fake still had words to send (it
    # sends the last one 700 ms after the first).
    assert first_seen < last_sent
    # Each word was seen after the fake sent it (same clock), one event per word, in order.
    for (seen, ev), (sent_at, word) in zip(events, sent, strict=True):
        assert ev.delta == word
        assert sent_at <= seen
    body = fake.requests[-1]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    gen = result.generations[0]
    totals = {k: gen.usage[k] for k in ("prompt_tokens", "completion_tokens", "total_tokens")}
    assert totals == {"prompt_tokens": 8, "completion_tokens": 9, "total_tokens": 17}
    assert gen.finish_reason == "stop" and gen.model == "gpt-4o-mini"


def test_a_streamed_run_and_a_plain_run_share_one_cache_entry(
    fake: FakeOpenAI,  # noqa: F811
) -> None:
    flow = flownb.load_flow(make_flow({"a": "{x}"}, ["x"]))
    streamed = list(flow.stream(x="one two"))[-1]
    assert len(fake.requests) == 1
    plain = flow.run(x="one two")
    assert len(fake.requests) == 1  # no call: the streamed answer was cached
    assert plain == streamed and plain.cached == {"a"}
    assert plain.generations[0].usage == streamed.generations[0].usage
    # And the other way: a plain run first, then a stream served whole from the cache.
    first = flow.run(x="three four")
    assert len(fake.requests) == 2
    items = list(flow.stream(x="three four"))
    assert len(fake.requests) == 2
    assert items[:-1] == [StreamEvent("text", "a", ("a",), "echo: three four")]
    assert items[-1] == first and items[-1].cached == {"a"}
    # A fresh flow (a new process's view of the same cache) agrees.
    again = flownb.load_flow(make_flow({"a": "{x}"}, ["x"]))
    assert again.run(x="one two") == streamed and len(fake.requests) == 2


def test_a_streamed_run_is_logged_as_a_plain_run(fake: FakeOpenAI) -> None:  # noqa: F811
    flow = flownb.load_flow(make_flow({"a": "{x}"}, ["x"]), name="logged")
    list(flow.stream(x="to log"))
    flow.run(x="plain")
    log = flownb.runs("logged")
    assert list(log["outputs"]) == [{"a": "echo: to log"}, {"a": "echo: plain"}]
    assert list(log["total_tokens"]) == [5, 3]  # "to log" + "echo: to log"; "plain" + ...


def test_stream_raises_what_run_raises(fake: FakeOpenAI) -> None:  # noqa: F811
    fake.configure(fail_markers={"500": "BOOM"})
    flow = flownb.load_flow(make_flow({"a": "{x}"}, ["x"]), retries=0)
    with pytest.raises(flownb.ProviderError) as plain:
        flow.run(x="BOOM")
    with pytest.raises(flownb.ProviderError) as streamed:
        list(flow.stream(x="BOOM"))
    assert type(streamed.value) is type(plain.value)
    assert str(streamed.value) == str(plain.value)
    with pytest.raises(flownb.InputError):
        flow.stream(y="unknown")


def test_astream_on_the_callers_loop(fake: FakeOpenAI) -> None:  # noqa: F811
    flow = flownb.load_flow(make_flow({"a": "{x}"}, ["x"]))

    async def consume() -> list[Any]:
        return [item async for item in flow.astream({"x": "red green blue"})]

    items = asyncio.run(consume())
    assert [e.delta for e in items[:-1]] == ["echo: ", "red ", "green ", "blue"]
    assert items[-1] == {"a": "echo: red green blue"}


def test_chained_nodes_stream_one_after_the_other() -> None:
    data = make_flow(
        {"draft": "draft about {x}", "edit": "edit: {draft}"}, ["x"], outputs={"final": ["edit"]}
    )
    data["edges"].append({"id": "chain", "source": "node-draft", "target": "node-edit"})
    flow = flownb.load_flow(data, provider="offline")
    items = list(flow.stream(x="owls"))
    nodes = [e.node for e in items[:-1]]
    assert nodes == ["draft"] * 3 + ["edit"] * 4  # the downstream node started after
    assert {e.outputs for e in items[:-1]} == {(), ("final",)}
    assert _texts(items) == {"draft": "draft about owls", "edit": "edit: draft about owls"}
    assert items[-1] == flow.run(x="owls") == {"final": "edit: draft about owls"}


def test_offline_streams_words_and_images_when_ready(blog_flow_path: Any) -> None:
    flow = flownb.load_flow(blog_flow_path, provider="offline")
    inputs = dict(flow.defaults)
    items = list(flow.stream(inputs))
    result = items[-1]
    assert result == flow.run(inputs)
    images = [e for e in items if isinstance(e, StreamEvent) and e.kind == "image"]
    assert [e.url for e in images] == [result[n] for n in result if result.is_image(n)]
    texts = [e for e in items if isinstance(e, StreamEvent) and e.kind == "text"]
    assert len(texts) > 1


def test_breaking_out_of_a_stream_keeps_the_call_it_paid_for(fake: FakeOpenAI) -> None:  # noqa: F811
    fake.configure(stream_delay=0.2)
    try:
        flow = flownb.load_flow(make_flow({"a": "{x}"}, ["x"]))
        for _event in flow.stream(x=WORDS):
            break
        # The consumer went away, but the request was sent (and is billed): it is read to its
        # end, and cached, so the same run asks nothing again.
        deadline = time.monotonic() + 20
        while fake.stats()["answered"] < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert fake.stats()["answered"] == 1
        assert flow.run(x=WORDS) == {"a": echo(WORDS)}
        assert fake.stats()["requests"] == 1
    finally:
        fake.configure(stream_delay=0.0)


def test_anthropic_streams_through_its_fake(anthropic_fake: FakeAnthropic) -> None:  # noqa: F811
    anthropic_fake.configure(stream_delay=0.05)
    try:
        flow = flownb.load_flow(flow_with({"Intro": {"model": "claude-x"}}), provider="anthropic")
        timed = _timed(flow.stream(topic="slow rivers run deep"))
    finally:
        anthropic_fake.configure(stream_delay=0.0)
    items = [item for _, item in timed]
    result = items[-1]
    assert anthropic_fake.requests[-1]["stream"] is True
    [sent] = anthropic_fake.streams
    assert timed[0][0] < sent[-1][0]  # text in hand before the last word was sent
    assert _texts(items) == {"Intro": "echo: Intro about slow rivers run deep"} == dict(result)
    plain = flownb.load_flow(
        flow_with({"Intro": {"model": "claude-x"}}), provider="anthropic", cache=False
    ).run(topic="slow rivers run deep")
    assert plain == result
    assert plain.generations[0].usage == result.generations[0].usage
    assert plain.generations[0].model == result.generations[0].model == "claude-x"


def test_gemini_streams_through_its_fake(gemini_fake: FakeGemini) -> None:  # noqa: F811
    gemini_fake.configure(stream_delay=0.05)
    try:
        flow = flownb.load_flow(flow_with({"Intro": {"model": "gemini-x"}}), provider="gemini")
        timed = _timed(flow.stream(topic="tides turn slowly here"))
    finally:
        gemini_fake.configure(stream_delay=0.0)
    items = [item for _, item in timed]
    result = items[-1]
    received = gemini_fake.state.paths[-1]
    assert received.endswith(":streamGenerateContent")
    [sent] = gemini_fake.streams
    assert timed[0][0] < sent[-1][0]
    assert _texts(items) == {"Intro": "echo: Intro about tides turn slowly here"} == dict(result)
    plain = flownb.load_flow(
        flow_with({"Intro": {"model": "gemini-x"}}), provider="gemini", cache=False
    ).run(topic="tides turn slowly here")
    assert plain == result
    assert plain.generations[0].usage == result.generations[0].usage


@pytest.mark.parametrize("transport", ["aiohttp", "sdk"])
def test_a_stream_cut_off_is_retried_and_its_text_restarts(
    fake: FakeOpenAI,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    transport: str,
) -> None:
    monkeypatch.setenv("FLOWNB_OPENAI_TRANSPORT", transport)
    fake.configure(stream_cut={"CUT": 2})
    try:
        flow = flownb.load_flow(make_flow({"a": "{x}"}, ["x"]))
        items = list(flow.stream(x="CUT one two three"))
    finally:
        fake.configure(stream_cut={})
    kinds = [e.kind for e in items[:-1]]
    assert kinds == ["text", "text", "restart"] + ["text"] * 5  # cut after 2 words, then whole
    after = items[kinds.index("restart") + 1 : -1]
    assert "".join(e.delta for e in after) == "echo: CUT one two three"
    assert items[-1] == {"a": "echo: CUT one two three"}
    assert len(fake.requests) == 2
    assert flow.run(x="CUT one two three") == items[-1] and len(fake.requests) == 2


@pytest.mark.parametrize("transport", ["aiohttp", "sdk"])
def test_a_server_that_cannot_stream_answers_plainly(
    fake: FakeOpenAI,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    transport: str,
) -> None:
    monkeypatch.setenv("FLOWNB_OPENAI_TRANSPORT", transport)
    fake.configure(refuse_stream=True)
    flow = flownb.load_flow(make_flow({"a": "{x}"}, ["x"]))
    items = list(flow.stream(x="no streams here"))
    assert items == [
        StreamEvent("text", "a", ("a",), "echo: no streams here"),
        {"a": "echo: no streams here"},
    ]
    assert [body.get("stream") for body in fake.requests] == [True, None]


@pytest.mark.parametrize("transport", ["aiohttp", "sdk"])
def test_a_whole_answer_to_a_streamed_request_is_read_as_one_piece(
    fake: FakeOpenAI,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    transport: str,
) -> None:
    """A server that answers a streamed request with one JSON body (as the fake's scripted
    answers do): its text comes as one event, and the result is the plain run's."""
    monkeypatch.setenv("FLOWNB_OPENAI_TRANSPORT", transport)
    fake.configure(answers={"WHOLE": {"message": {"role": "assistant", "content": "all at once"}}})
    flow = flownb.load_flow(make_flow({"a": "{x}"}, ["x"]), cache=False)
    items = list(flow.stream(x="WHOLE"))
    assert items == [StreamEvent("text", "a", ("a",), "all at once"), {"a": "all at once"}]
    assert fake.requests[-1]["stream"] is True
    plain = flow.run(x="WHOLE")
    assert plain == items[-1]
    assert plain.generations[0].usage == items[-1].generations[0].usage
