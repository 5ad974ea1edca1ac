"""The run route's streaming extension (``Accept: text/event-stream``) on a real uvicorn server
running the OpenAI provider against the fake streaming one word per 100 ms, and the client's
``RemoteFlow.stream`` / ``astream`` reading it."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

import flownb
from flownb.runtime.events import StreamEvent
from flownb.testing.fake_openai import FakeOpenAI
from tests.conftest import make_flow, write_flow
from tests.serving import Running, post_run, run_server

pytestmark = pytest.mark.timeout(120)

WORDS = "one two three four five six seven eight"


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(stream_delay=0.1, fail_markers={"500": "FAIL500"}) as f:
        yield f


@pytest.fixture
def server(fake: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Running]:
    monkeypatch.setenv("OPENAI_BASE_URL", fake.url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-loopback-only")
    monkeypatch.setenv("FLOWNB_RETRIES", "0")
    flows = tmp_path / "flows"
    flows.mkdir()
    write_flow(flows / "story.json", make_flow({"story": "{x}"}, ["x"]))
    with run_server(flows, tmp_path / "home", provider="openai") as running:
        yield running


def _stream(server: Running, variables: Any, accept: str = "text/event-stream") -> Any:
    return requests.post(
        f"{server.url}/api/flows/run/story",
        json={"variables": variables},
        headers={"x-api-key": server.key, "Accept": accept},
        stream=True,
        timeout=60,
    )


def _events(resp: requests.Response) -> list[tuple[float, str, Any]]:
    """Return every server-sent event as (perf_counter time read, name, decoded data)."""
    found = []
    name, data = "message", []
    for line in resp.iter_lines(chunk_size=None):  # type: ignore[call-overload]
        text = line.decode()
        if not text:
            found.append((time.perf_counter(), name, json.loads("\n".join(data))))
            name, data = "message", []
        elif text.startswith("event: "):
            name = text[7:]
        elif text.startswith("data: "):
            data.append(text[6:])
    return found


def test_one_run_streams_its_text_then_the_contract_result(
    server: Running, fake: FakeOpenAI
) -> None:
    with _stream(server, {"x": WORDS}) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        events = _events(resp)
    [sent] = fake.streams
    texts = [(t, d) for t, name, d in events if name == "text"]
    assert texts[0][0] < sent[-1][0]  # read before the fake sent the last word
    assert "".join(d["delta"] for _, d in texts) == f"echo: {WORDS}"
    assert {(d["node"], tuple(d["outputs"])) for _, d in texts} == {("story", ("story",))}
    assert [name for _, name, _ in events][-1] == "result"
    plain = post_run(server, "story", {"x": WORDS})  # the same request without the header
    assert plain.headers["content-type"] == "application/json"
    assert events[-1][2] == plain.json() == [{"name": "story", "output": f"echo: {WORDS}",
                                              "type": "output"}]  # fmt: skip


def test_an_array_of_one_streams_and_a_batch_does_not(server: Running) -> None:
    with _stream(server, [{"x": "solo"}]) as resp:
        events = _events(resp)
    assert events[-1][1:] == (
        "result",
        [[{"name": "story", "output": "echo: solo", "type": "output"}]],
    )
    refused = _stream(server, [{"x": "a"}, {"x": "b"}])
    assert refused.status_code == 406
    assert refused.json()["code"] == "not_acceptable"
    both = _stream(server, [{"x": "a"}, {"x": "b"}], accept="text/event-stream, application/json")
    assert both.status_code == 200 and both.headers["content-type"] == "application/json"
    assert [items[0]["output"] for items in both.json()] == ["echo: a", "echo: b"]


def test_errors_before_and_during_a_streamed_run(server: Running) -> None:
    bad = _stream(server, {"y": "unknown"})
    assert bad.status_code == 422 and bad.headers["content-type"] == "application/json"
    with _stream(server, {"x": "FAIL500 now"}) as resp:
        assert resp.status_code == 200  # the stream had begun: the error is its last event
        events = _events(resp)
    [(_, name, data)] = events
    plain = post_run(server, "story", {"x": "FAIL500 now"})
    assert name == "error" and data["status"] == plain.status_code == 502
    expected = plain.json()
    assert {k: data[k] for k in ("code", "message", "errors")} == {
        k: expected[k] for k in ("code", "message", "errors")
    }


def test_remote_flow_streams(server: Running, fake: FakeOpenAI) -> None:
    # A short backoff: the plain FAIL500 run below is retried (502) before it raises.
    flow = flownb.Client(server.url, server.key, backoff=0.01).flow("story")
    timed = [(time.perf_counter(), item) for item in flow.stream(x=WORDS)]
    [sent] = fake.streams
    events = [(t, e) for t, e in timed if isinstance(e, StreamEvent)]
    assert events[0][0] < sent[-1][0]
    assert "".join(e.delta for _, e in events) == f"echo: {WORDS}"
    result = timed[-1][1]
    assert isinstance(result, flownb.RunResult) and result == flow.run(x=WORDS)

    async def consume() -> list[Any]:
        return [item async for item in flow.astream(x="async words")]

    items = asyncio.run(consume())
    assert [e.delta for e in items[:-1]] == ["echo: ", "async ", "words"]
    assert items[-1] == {"story": "echo: async words"}
    with pytest.raises(flownb.ProviderError) as streamed:
        list(flow.stream(x="FAIL500"))
    with pytest.raises(flownb.ProviderError) as plain:
        flow.run(x="FAIL500")
    assert str(streamed.value).split(" (request id")[0] == str(plain.value).split(" (request id")[0]
    with pytest.raises(flownb.InputError):
        flow.stream(y="unknown")


def test_only_an_explicit_accept_streams(server: Running) -> None:
    for accept in ("*/*", "text/*", "application/json", "text/event-stream;q=0, */*"):
        resp = _stream(server, {"x": "plain"}, accept=accept)
        assert resp.status_code == 200 and resp.headers["content-type"] == "application/json"
        assert resp.json() == [{"name": "story", "output": "echo: plain", "type": "output"}]


def test_a_service_that_will_not_stream_still_runs(
    server: Running, fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Answers worth retrying, or a 406, before the stream starts: the client falls back to
    the plain run route (retried as usual), and the caller still gets the result."""
    calls: list[str] = []

    def refuse(*args: Any, **kwargs: Any) -> Any:
        calls.append("stream")
        from starlette.responses import JSONResponse

        return JSONResponse({"code": "overloaded", "message": "busy"}, status_code=503)

    # The server as one that cannot stream now: 503 to every streamed request.
    monkeypatch.setattr("flownb.server.sse.event_stream", refuse)
    flow = flownb.Client(server.url, server.key, backoff=0.01).flow("story")
    items = list(flow.stream(x="fallback please"))
    assert calls == ["stream"]
    assert items == [
        StreamEvent("text", "story", ("story",), "echo: fallback please"),
        {"story": "echo: fallback please"},
    ]
