# ruff: noqa: F811  (pytest fixtures imported from the fixture modules are parameters here)
"""A credential goes only to the host it was given for (issue 38.1): each vendor's fake answers
a 307 to a recording server on another host (127.0.0.2), for every provider and transport, the
streamed and batch clients too; nothing (no key, no endpoint header, no request at all) may
arrive there, and the run fails with RedirectRefused naming both origins. An endpoint moved to
another host does not take its literal key along."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import flownb
from flownb.config.endpoints import Endpoint
from flownb.errors import ConfigError, RedirectRefused
from flownb.testing.fake_anthropic import FakeAnthropic
from flownb.testing.fake_gemini import FakeGemini
from flownb.testing.fake_openai import FakeOpenAI
from tests.conftest import make_flow
from tests.openai_fake import KEY, fake, fake_server  # noqa: F401 (fixtures)
from tests.recorder import Answer, Recorder
from tests.vendor_fakes import (  # noqa: F401 (fixtures)
    ANTHROPIC_KEY,
    GEMINI_KEY,
    anthropic_fake,
    anthropic_server,
    flow_with,
    gemini_fake,
    gemini_server,
)

HEADER = "X-Team-Token"
HEADER_VALUE = "team-token-SECRET-42"
MARKER = "MOVED"


@pytest.fixture
def elsewhere() -> Iterator[Recorder]:
    """The recording server on another host, answering 200 to anything."""
    with Recorder() as server:
        yield server


def _redirect_to(server: Any, target: Recorder, path: str) -> None:
    server.configure(
        answers={MARKER: {"status": 307, "headers": {"Location": target.url + path}, "text": ""}}
    )


def _refused(run: Any, fake_url: str, target: Recorder, *keys: str) -> RedirectRefused:
    """Run ``run()``; return its RedirectRefused after checking what it says and what arrived."""
    with pytest.raises(RedirectRefused) as caught:
        run()
    message = str(caught.value)
    assert fake_url.split("/v1")[0].rstrip("/") in message and target.url in message
    assert all(key not in message for key in keys)
    assert target.received == []  # not a request, so not a key nor a header, reached it
    return caught.value


@pytest.fixture(params=["aiohttp", "sdk"])
def transport(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("FLOWNB_OPENAI_TRANSPORT", request.param)
    return str(request.param)


def _text_flow() -> dict:
    return make_flow({"out": f"{MARKER} about {{topic}}"}, ["topic"])


@pytest.mark.parametrize("kind", ["openai", "azure"])
@pytest.mark.parametrize("streamed", [False, True])
def test_openai_and_azure_refuse_a_redirect_to_another_host(
    fake: FakeOpenAI, elsewhere: Recorder, transport: str, kind: str, streamed: bool
) -> None:
    _redirect_to(fake, elsewhere, "/v1/chat/completions")
    base = fake.url if kind == "openai" else fake.origin
    endpoint = Endpoint("e", kind, base_url=base, api_key=KEY, headers={HEADER: HEADER_VALUE})
    flow = flownb.load_flow(_text_flow(), endpoint=endpoint, cache=False)
    run = (lambda: list(flow.stream(topic="owls"))) if streamed else (lambda: flow.run(topic="x"))
    _refused(run, fake.url, elsewhere, KEY, HEADER_VALUE)
    assert len(fake.requests) == 1  # refused, not retried


def test_openai_image_generation_refuses_a_redirect_too(
    fake: FakeOpenAI, elsewhere: Recorder, transport: str
) -> None:
    _redirect_to(fake, elsewhere, "/v1/images/generations")
    flow = flownb.load_flow(
        make_flow({"pic": f"{MARKER} {{topic}}"}, ["topic"], images=("pic",)), cache=False
    )
    _refused(lambda: flow.run(topic="owls"), fake.url, elsewhere, KEY)


@pytest.mark.parametrize("streamed", [False, True])
def test_anthropic_refuses_a_redirect_to_another_host(
    anthropic_fake: FakeAnthropic, elsewhere: Recorder, streamed: bool
) -> None:
    _redirect_to(anthropic_fake, elsewhere, "/v1/messages")
    try:
        endpoint = Endpoint(
            "c",
            "anthropic",
            base_url=anthropic_fake.url,
            api_key=ANTHROPIC_KEY,
            headers={HEADER: HEADER_VALUE},
        )
        flow = flownb.load_flow(
            flow_with({MARKER: {"model": "claude-3-5-haiku-latest"}}),
            endpoint=endpoint,
            cache=False,
        )
        run = (lambda: list(flow.stream(topic="o"))) if streamed else (lambda: flow.run(topic="o"))
        _refused(run, anthropic_fake.url, elsewhere, ANTHROPIC_KEY, HEADER_VALUE)
        assert len(anthropic_fake.requests) == 1
    finally:
        anthropic_fake.configure(answers={})


@pytest.mark.parametrize("streamed", [False, True])
def test_gemini_refuses_a_redirect_to_another_host(
    gemini_fake: FakeGemini, elsewhere: Recorder, streamed: bool
) -> None:
    _redirect_to(gemini_fake, elsewhere, "/v1beta/models/gemini-2.5-flash:generateContent")
    try:
        endpoint = Endpoint(
            "g",
            "gemini",
            base_url=gemini_fake.url,
            api_key=GEMINI_KEY,
            headers={HEADER: HEADER_VALUE},
        )
        flow = flownb.load_flow(
            flow_with({MARKER: {"model": "gemini-2.5-flash"}}), endpoint=endpoint, cache=False
        )
        run = (lambda: list(flow.stream(topic="o"))) if streamed else (lambda: flow.run(topic="o"))
        _refused(run, gemini_fake.url, elsewhere, GEMINI_KEY, HEADER_VALUE)
        assert len(gemini_fake.requests) == 1
    finally:
        gemini_fake.configure(answers={})


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_the_batch_clients_refuse_a_redirect_to_another_host(
    elsewhere: Recorder, kind: str
) -> None:
    """The Batch API clients (their own synchronous SDK clients): an endpoint that answers
    every request with a 307 to the other host."""
    key = KEY if kind == "openai" else ANTHROPIC_KEY
    with Recorder(
        Answer(307, {"Location": elsewhere.url + "/v1/batches/b1"}, b""), host="127.0.0.1"
    ) as mover:
        base = mover.url + "/v1" if kind == "openai" else mover.url
        endpoint = Endpoint("b", kind, base_url=base, api_key=key, headers={HEADER: HEADER_VALUE})
        flow = flownb.load_flow(
            flow_with({"A": {"model": "gpt-4o-mini" if kind == "openai" else "claude-haiku-4-5"}}),
            endpoint=endpoint,
            cache=False,
        )
        batches = flow.provider.batch_api()
        assert batches is not None
        _refused(lambda: batches.status("b1"), mover.url, elsewhere, key, HEADER_VALUE)
        assert mover.received and all(r["path"].endswith("/batches/b1") for r in mover.received)


# -- an endpoint moved to another host ------------------------------------------------------


def test_an_endpoint_moved_to_another_host_does_not_take_its_literal_key(
    fake: FakeOpenAI, elsewhere: Recorder
) -> None:
    literal = "sk-literal-for-A-000111"
    here = Endpoint("a", "openai", base_url=fake.url, api_key=literal)
    with pytest.raises(ConfigError) as caught:
        here.replace(base_url=elsewhere.url + "/v1")
    message = str(caught.value)
    assert elsewhere.url in message and fake.url.split("/v1")[0] in message
    assert "api_key" in message and literal not in message
    # The same through load_flow's base_url override of an endpoint: refused before any call.
    with pytest.raises(ConfigError, match="does not go to another host"):
        flownb.load_flow(_text_flow(), endpoint=here, base_url=elsewhere.url + "/v1")
    # Another port is another origin; so is another scheme.
    port = fake.url.replace(f":{fake.port}", f":{elsewhere.port}")
    with pytest.raises(ConfigError):
        here.replace(base_url=port)
    with pytest.raises(ConfigError):
        here.replace(base_url=fake.url.replace("http://", "https://"))
    # A vendor endpoint without a base URL holds its key for the vendor's host only.
    with pytest.raises(ConfigError):
        Endpoint("o", "openai", api_key=literal).replace(base_url=elsewhere.url)
    assert elsewhere.received == []


def test_an_endpoint_moved_to_another_host_does_not_take_its_headers(
    fake: FakeOpenAI, elsewhere: Recorder
) -> None:
    token = "gw-token-for-A-888999"
    here = Endpoint("g", "openai", base_url=fake.url, api_key_env="X", headers={"X-Gw": token})
    with pytest.raises(ConfigError, match=r"headers \(X-Gw\) were given for") as caught:
        here.replace(base_url=elsewhere.url + "/v1")
    assert token not in str(caught.value)
    # The same origin keeps them; given again on purpose, they go to the new host.
    assert here.replace(base_url=fake.origin + "/other/v1").headers == {"X-Gw": token}
    moved = here.replace(base_url=elsewhere.url + "/v1", headers={"X-Gw": "gw-token-B"})
    assert moved.headers == {"X-Gw": "gw-token-B"}


def test_a_moved_endpoint_keeps_what_may_go_along(
    fake: FakeOpenAI, elsewhere: Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    literal = "sk-literal-for-A-000111"
    here = Endpoint("a", "openai", base_url=fake.url, api_key=literal)
    # Another path on the same origin is the same host: the key stays.
    assert here.replace(base_url=fake.origin + "/other/v1").key() == literal
    # Moved with a key of its own, it sends that one.
    moved = here.replace(base_url=elsewhere.url + "/v1", api_key="sk-for-B-222333")
    assert moved.key() == "sk-for-B-222333"
    # A key named by a variable the user chose goes along (they named it for this endpoint).
    monkeypatch.setenv("TEAM_KEY", "sk-team-444555")
    named = Endpoint("n", "openai", base_url=fake.url, api_key_env="TEAM_KEY")
    assert named.replace(base_url=elsewhere.url + "/v1").key() == "sk-team-444555"
    # The vendor's default variable never goes to another host.
    monkeypatch.setenv("OPENAI_API_KEY", "sk-default-666777")
    vendor = Endpoint("v", "openai")
    assert vendor.key() == "sk-default-666777"
    with pytest.warns(UserWarning, match="is not sent there"):
        assert vendor.replace(base_url=elsewhere.url + "/v1").key() is None
    # Run for real: the request reaches the new host with the new key, not A's.
    flow = flownb.load_flow(_text_flow(), endpoint=moved, cache=False, retries=0)
    with pytest.raises(flownb.FlownbError):
        flow.run(topic="owls")  # the recorder answers {}: not a chat answer
    assert [r["headers"].get("Authorization") for r in elsewhere.received] == [
        "Bearer sk-for-B-222333"
    ]


_CHAT = (
    b'{"id": "chatcmpl-1", "object": "chat.completion", "model": "gpt-4o-mini", "choices": '
    b'[{"index": 0, "message": {"role": "assistant", "content": "moved hello"}, '
    b'"finish_reason": "stop"}], "usage": {"prompt_tokens": 3, "completion_tokens": 2, '
    b'"total_tokens": 5}}'
)


def _moved_here(server: Recorder) -> Answer:
    return Answer(307, {"Location": server.url + "/moved/v1/chat/completions"}, b"")


def test_a_redirect_within_the_origin_is_followed_with_the_key(transport: str) -> None:
    """The fast path sends without following; a redirect within the origin is followed (the
    key goes along, as the origin is the one it was given for) and the answer is the run's."""
    with Recorder(host="127.0.0.1") as server:
        server.answers = [_moved_here(server), _moved_here(server), Answer(200, {}, _CHAT)]
        endpoint = Endpoint("m", "openai", base_url=server.url + "/v1", api_key=KEY)
        flow = flownb.load_flow(_text_flow(), endpoint=endpoint, cache=False, retries=0)
        assert flow.run(topic="owls")["out"] == "moved hello"
    assert server.received[-1]["path"] == "/moved/v1/chat/completions"
    assert {r["headers"].get("Authorization") for r in server.received} == {f"Bearer {KEY}"}


def test_a_redirect_to_another_origin_after_one_within_is_refused(
    elsewhere: Recorder, transport: str
) -> None:
    with Recorder(host="127.0.0.1") as server:
        away = Answer(307, {"Location": elsewhere.url + "/v1/chat/completions"}, b"")
        server.answers = [_moved_here(server), _moved_here(server), away]
        endpoint = Endpoint("m", "openai", base_url=server.url + "/v1", api_key=KEY)
        flow = flownb.load_flow(_text_flow(), endpoint=endpoint, cache=False, retries=0)
        with pytest.raises(RedirectRefused):
            flow.run(topic="owls")
    assert elsewhere.received == []
