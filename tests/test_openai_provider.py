# ruff: noqa: F811  (pytest fixtures imported from openai_fake are parameters here)
"""The OpenAI provider at its HTTP boundary, against the loopback fake server: request shapes field
by field, the modelParams mapping, images (URL and base64), error translation, both transports."""

from __future__ import annotations

import asyncio
import base64
import warnings
from pathlib import Path
from urllib.parse import urlsplit
from urllib.request import url2pathname

import pytest

import flownb
from flownb.errors import ConfigError, InputError, ProviderError, RateLimited
from flownb.infra.media import MediaStore
from flownb.providers.base import Call, Generation
from flownb.providers.openai.provider import OpenAIProvider
from flownb.testing.fake_openai import FakeOpenAI, image_bytes
from tests.conftest import make_flow
from tests.openai_fake import KEY, fake, fake_server  # noqa: F401 (fixtures)

BLOG_PARAMS = {
    "model": "gpt-4o-mini",
    "temperature": 0.7,
    "max_tokens": 200,
    "top_p": 1,
    "frequency_penalty": 0,
    "presence_penalty": 0,
    "n": 1,
    "best_of": 1,
}


def one_node(params: dict, *, image: bool = False) -> dict:
    flow = make_flow({"out": "About {topic}."}, ["topic"], images=("out",) if image else ())
    for node in flow["nodes"]:
        if node["type"] in ("actionNode", "imageNode"):
            node["data"]["modelParams"] = params
    return flow


@pytest.fixture(params=["aiohttp", "sdk"])
def transport(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("FLOWNB_OPENAI_TRANSPORT", request.param)
    return request.param


def test_blog_flow_request_shape_field_by_field(
    fake: FakeOpenAI, transport: str, blog_flow_path: Path
) -> None:
    flow = flownb.load_flow(blog_flow_path, cache=False)
    assert flow.provider.transport_name == transport
    res = flow.run(topic="owls", tone="dry")
    assert len(fake.requests) == 2
    by_path = dict(zip(fake.state.paths, fake.requests, strict=True))
    chat = by_path["/v1/chat/completions"]
    assert chat["model"] == "gpt-4o-mini"
    assert chat["temperature"] == 0.7
    assert chat["max_tokens"] == 200
    # The exported editor defaults change nothing: not sent (issue 37).
    for name in ("top_p", "frequency_penalty", "presence_penalty", "n", "best_of"):
        assert name not in chat
    assert chat["messages"] == [{"role": "user", "content": chat["messages"][0]["content"]}]
    prompt = chat["messages"][0]["content"]
    assert "owls" in prompt and "dry" in prompt
    image = by_path["/v1/images/generations"]
    assert image["model"] == "dall-e-3"
    assert set(image) == {"model", "prompt"}
    assert "owls" in image["prompt"]
    # Outputs come from the answers; the provider's (expiring) image URL was downloaded once
    # into flownb's media, and the output is flownb's own URL for it.
    text_out = next(v for k, v in res.items() if not res.is_image(k))
    image_out = next(v for k, v in res.items() if res.is_image(k))
    assert text_out == f"echo: {prompt}"
    assert image_out.startswith("file://") and image_out.endswith(".png")
    stored = Path(url2pathname(urlsplit(image_out).path))
    assert stored.read_bytes() == image_bytes(image["prompt"])
    assert len(fake.state.image_headers) == 1
    # The key went in the Authorization header of API calls, and nowhere else (not to the
    # image's host).
    for headers in fake.state.headers:
        assert headers["Authorization"] == f"Bearer {KEY}"
    assert "Authorization" not in fake.state.image_headers[0]


def test_reasoning_models_get_max_completion_tokens_and_no_sampling_knobs(
    fake: FakeOpenAI, transport: str
) -> None:
    params = {**BLOG_PARAMS, "model": "o3-mini"}
    flow = flownb.load_flow(one_node(params), cache=False)
    with pytest.warns(UserWarning, match="temperature left out"):
        flow.run(topic="owls")
    (body,) = fake.requests
    assert body["model"] == "o3-mini"
    assert body["max_completion_tokens"] == 200
    for name in ("max_tokens", "temperature", "top_p", "frequency_penalty", "presence_penalty"):
        assert name not in body


@pytest.mark.parametrize("model", ["gpt-5", "gpt-5-mini", "o1", "o4-mini"])
def test_reasoning_model_names(fake: FakeOpenAI, model: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        flownb.load_flow(one_node({"model": model, "max_tokens": 5}), cache=False).run(topic="x")
    assert fake.requests[0]["max_completion_tokens"] == 5


def test_n_is_sent_and_the_first_choice_is_the_output(fake: FakeOpenAI, transport: str) -> None:
    flow = flownb.load_flow(one_node({"model": "gpt-4o-mini", "n": 3}), cache=False)
    res = flow.run(topic="owls")
    assert fake.requests[0]["n"] == 3
    assert res["out"] == "echo: About owls."  # choice 0; the fake answers echo[1]: ... for others


def test_best_of_on_a_chat_model_is_refused_before_any_call(fake: FakeOpenAI) -> None:
    with pytest.raises(ConfigError, match="best_of=3 only works on the completions endpoint"):
        flownb.load_flow(one_node({"model": "gpt-4o-mini", "best_of": 3}), cache=False)
    assert fake.requests == []


def test_best_of_routes_to_completions_for_completion_models(
    fake: FakeOpenAI, transport: str
) -> None:
    params = {
        "model": "gpt-3.5-turbo-instruct",
        "best_of": 3,
        "n": 2,
        "max_tokens": 7,
        "temperature": 0.2,
    }
    res = flownb.load_flow(one_node(params), cache=False).run(topic="owls")
    assert fake.state.paths == ["/v1/completions"]
    body = fake.requests[0]
    assert body == {
        "model": "gpt-3.5-turbo-instruct",
        "prompt": "About owls.",
        "best_of": 3,
        "n": 2,
        "max_tokens": 7,
        "temperature": 0.2,
    }
    assert res["out"] == "echo: About owls."


def test_endpoint_param_forces_completions_for_other_servers(fake: FakeOpenAI) -> None:
    params = {"model": "llama3", "endpoint": "completions", "best_of": 2}
    flownb.load_flow(one_node(params), cache=False).run(topic="owls")
    assert fake.state.paths == ["/v1/completions"]
    assert fake.requests[0] == {"model": "llama3", "prompt": "About owls.", "best_of": 2}


def test_known_extras_pass_through_unknown_ones_are_dropped_with_a_warning(
    fake: FakeOpenAI,
) -> None:
    params = {"model": "gpt-4o-mini", "seed": 7, "stop": ["\n"], "frobnicate": True}
    flow = flownb.load_flow(one_node(params), cache=False)
    with pytest.warns(UserWarning, match="frobnicate dropped"):
        flow.run(topic="owls")
    body = fake.requests[0]
    assert body["seed"] == 7 and body["stop"] == ["\n"]
    assert "frobnicate" not in body


def test_b64_images_are_written_to_media_and_returned_as_a_file_url(
    fake: FakeOpenAI, transport: str, flownb_env: Path
) -> None:
    params = {"model": "gpt-image-1", "size": "1024x1024", "quality": "low"}
    fake.configure(image_format="b64_json")  # gpt-image-1 always answers base64
    res = flownb.load_flow(one_node(params, image=True), cache=False).run(topic="owls")
    body = fake.requests[0]
    assert body == {
        "model": "gpt-image-1",
        "prompt": "About owls.",
        "size": "1024x1024",
        "quality": "low",
    }
    url = res["out"]
    assert url.startswith("file://") and url.endswith(".png")
    stored = Path(url.removeprefix("file://"))
    assert stored.parent == (flownb_env / "media").resolve()
    assert stored.read_bytes() == image_bytes("About owls.")


def test_response_format_is_sent_when_the_flow_asks(fake: FakeOpenAI) -> None:
    params = {"model": "dall-e-2", "response_format": "b64_json", "n": 2}
    res = flownb.load_flow(one_node(params, image=True), cache=False).run(topic="owls")
    assert fake.requests[0]["response_format"] == "b64_json" and fake.requests[0]["n"] == 2
    assert res["out"].startswith("file://")


def test_dalle3_n_above_one_is_refused(fake: FakeOpenAI) -> None:
    with pytest.raises(ConfigError, match="dall-e-3 makes one image per request"):
        flownb.load_flow(one_node({"model": "dall-e-3", "n": 2}, image=True), cache=False)


def test_provider_errors_keep_status_message_and_request_id_without_the_key(
    fake: FakeOpenAI, transport: str
) -> None:
    fake.configure(fail_markers={"500": "boom"})
    flow = flownb.load_flow(one_node({"model": "gpt-4o-mini"}), cache=False, retries=1)
    with pytest.raises(ProviderError) as info:
        flow.run(topic="boom")
    exc = info.value
    assert exc.status == 500
    assert exc.request_id == "req_fake_500"
    assert "The server had an error while processing your request." in str(exc)
    assert len(fake.requests) == 2  # one retry
    assert KEY not in str(exc) and KEY not in repr(exc.__dict__)


def test_a_key_echoed_by_the_server_is_masked(fake: FakeOpenAI, transport: str) -> None:
    provider = OpenAIProvider(media=MediaStore(Path("unused")), api_key=KEY)
    from flownb.providers.openai import answers as mod

    err = mod._translate_status(
        401,
        {"error": {"message": f"Incorrect API key provided: {KEY}. sk-proj-abc123xyz"}},
        {"x-request-id": "req_1"},
        KEY,
    )
    assert KEY not in str(err) and "sk-proj-abc123xyz" not in str(err)
    assert err.status == 401 and err.request_id == "req_1"
    assert KEY not in repr(provider)


def test_rate_limited_after_retries_is_rate_limited(fake: FakeOpenAI, transport: str) -> None:
    fake.configure(faults={"429": 1.0}, retry_after="0")
    flow = flownb.load_flow(one_node({"model": "gpt-4o-mini"}), cache=False, retries=2)
    with pytest.raises(RateLimited) as info:
        flow.run(topic="owls")
    assert info.value.status == 429 and info.value.retry_after == 0.0
    assert info.value.code == "upstream_rate_limited"
    assert len(fake.requests) == 3


def test_insufficient_quota_is_not_retried() -> None:
    from flownb.providers.openai import answers as mod

    err = mod._translate_status(
        429,
        {"error": {"message": "You exceeded your current quota", "code": "insufficient_quota"}},
        {},
        None,
    )
    assert type(err) is ProviderError and err.status == 429


def test_no_key_for_api_openai_com_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(ConfigError, match="OPENAI_API_KEY"):
        flownb.load_flow(one_node({"model": "gpt-4o-mini"}), provider="openai")


def test_a_local_server_needs_no_key(fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY")
    res = flownb.load_flow(one_node({"model": "llama3"}), cache=False).run(topic="owls")
    assert res["out"] == "echo: About owls."
    assert "Authorization" not in fake.state.headers[0]


def test_unknown_transport_is_a_config_error(
    monkeypatch: pytest.MonkeyPatch, fake: FakeOpenAI
) -> None:
    monkeypatch.setenv("FLOWNB_OPENAI_TRANSPORT", "carrier-pigeon")
    with pytest.raises(ConfigError, match="carrier-pigeon"):
        flownb.load_flow(one_node({"model": "gpt-4o-mini"}))


def test_provider_generate_direct_returns_usage(fake: FakeOpenAI, transport: str) -> None:
    provider = OpenAIProvider(
        media=MediaStore(Path("unused")), base_url=fake.url, transport=transport
    )

    async def go() -> Generation:
        try:
            return await provider.generate(Call("text", "one two three", {"model": "m"}))
        finally:
            await provider.aclose()

    gen = asyncio.run(go())
    assert gen.output == "echo: one two three"
    # The counts; the zero details every OpenAI answer also carries are kept beside them.
    totals = {k: gen.usage[k] for k in ("prompt_tokens", "completion_tokens", "total_tokens")}
    assert totals == {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}
    assert gen.usage["reasoning_tokens"] == 0
    assert gen.model == "m"


def test_non_json_answer_is_a_provider_error(fake: FakeOpenAI) -> None:
    # /chat/completions there is a 404 page
    provider = OpenAIProvider(
        media=MediaStore(Path("unused")), base_url=fake.url.removesuffix("/v1")
    )
    from flownb.infra.aio import run_sync

    with pytest.raises(ProviderError) as info:
        run_sync(provider.generate(Call("text", "x", {"model": "m"})))
    assert info.value.status == 404


def test_b64_is_decoded_exactly() -> None:
    raw = image_bytes("x")
    assert base64.b64decode(base64.b64encode(raw)) == raw


def test_proxy_is_resolved_once_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from flownb.providers.openai.transport import _AiohttpTransport

    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")
    monkeypatch.setenv("NO_PROXY", "internal.example")
    assert _AiohttpTransport("https://api.openai.com/v1", KEY).proxy == "http://proxy.invalid:3128"
    assert _AiohttpTransport("https://internal.example/v1", KEY).proxy is None
    assert _AiohttpTransport("http://127.0.0.1:9/v1", None).proxy is None


def test_fake_server_runs_as_a_module_for_the_plain_sdk() -> None:
    """``python -m flownb.testing.fake_openai`` serves the real SDK (bench, notebooks)."""
    import json
    import socket
    import subprocess
    import sys
    import urllib.request

    from openai import OpenAI

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [
        sys.executable,
        "-m",
        "flownb.testing.fake_openai",
        "--port",
        str(port),
        "--faults",
        "429=1.0",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        # The server prints its address once it listens: wait for that line (however long a
        # busy machine takes to import and bind), never for a number of seconds.
        assert proc.stdout is not None
        said = proc.stdout.readline()
        assert said.startswith("fake OpenAI on http://127.0.0.1:"), (said, proc.poll())
        urllib.request.urlopen(base + "/_fake/stats", timeout=60).close()
        client = OpenAI(api_key=KEY, base_url=base + "/v1", max_retries=0)
        import openai

        with pytest.raises(openai.RateLimitError):
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "a"}])
        body = json.dumps({"faults": {}}).encode()
        urllib.request.urlopen(urllib.request.Request(base + "/_fake/config", data=body)).close()
        resp = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "a"}]
        )
        assert resp.choices[0].message.content == "echo: a"
        with urllib.request.urlopen(base + "/_fake/stats") as r:
            stats = json.loads(r.read())
        assert stats["requests"] == 2 and stats["faults"]["429"] == 1 and stats["answered"] == 1
        client.close()
    finally:
        proc.terminate()
        proc.wait(10)


def test_an_image_over_the_download_cap_is_refused_not_stored(
    fake: FakeOpenAI, transport: str, monkeypatch: pytest.MonkeyPatch, flownb_env: Path
) -> None:
    from flownb.providers import download as mod

    size = len(image_bytes("About owls."))
    monkeypatch.setattr(mod, "MAX_IMAGE_BYTES", size - 1)  # the fake's PNG is one byte over
    flow = flownb.load_flow(one_node({"model": "dall-e-2"}, image=True), cache=False, retries=0)
    with pytest.raises(ProviderError, match=f"over {size - 1} bytes"):
        flow.run(topic="owls")
    media = flownb_env / "media"
    assert not media.exists() or not list(media.glob("*.png"))
    monkeypatch.setattr(mod, "MAX_IMAGE_BYTES", size)  # exactly at the cap: kept
    assert flow.run(topic="owls")["out"].startswith("file://")


def test_providers_of_one_endpoint_and_key_send_their_own_headers(
    fake: FakeOpenAI, transport: str
) -> None:
    """Calls of one loop, endpoint and key whose providers name other headers each send their
    own provider's: a session shared between them would send the first one's with every call."""
    teams = ("red", "blue")
    providers = [
        OpenAIProvider(
            media=MediaStore(Path("unused")),
            base_url=fake.url,
            api_key=KEY,
            headers={"X-Team": team},
            transport=transport,
        )
        for team in teams
    ]

    async def go() -> None:
        for _ in range(2):
            for provider, team in zip(providers, teams, strict=True):
                await provider.generate(Call("text", team, {"model": "m"}))

    asyncio.run(go())
    sent = [(r["body"]["messages"][-1]["content"], r["headers"]) for r in fake.received]
    assert [prompt for prompt, _ in sent] == ["red", "blue", "red", "blue"]
    for prompt, headers in sent:
        assert {k.lower(): v for k, v in headers.items()}["x-team"] == prompt
        assert {k.lower(): v for k, v in headers.items()}["authorization"] == f"Bearer {KEY}"


def test_http_sessions_close_with_their_loop_and_are_not_kept(
    fake: FakeOpenAI, transport: str
) -> None:
    """Each ``asyncio.run`` makes its own loop: its session (aiohttp) or client (SDK) is closed
    as that loop shuts down, and no longer held (they used to pile up until exit)."""
    from flownb.providers.openai import transport as mod

    provider = OpenAIProvider(
        media=MediaStore(Path("unused")), base_url=fake.url, transport=transport
    )
    used: list[object] = []

    def held() -> dict:
        return mod._SESSIONS if transport == "aiohttp" else provider._transport._clients  # type: ignore[attr-defined]

    async def go() -> None:
        await provider.generate(Call("text", "x", {"model": "m"}))
        loop = asyncio.get_running_loop()
        if transport == "aiohttp":  # the session of this loop, endpoint and key
            (key,) = [k for k in held() if k[0] is loop and k[2] is None]
        else:
            key = loop
        used.append(held()[key])

    for _ in range(3):
        asyncio.run(go())
    assert len(used) == 3 and len({id(u) for u in used}) == 3
    assert not any(entry is u for entry in held().values() for u in used)
    for u in used:
        assert u.closed if transport == "aiohttp" else u.is_closed()  # type: ignore[attr-defined]


def test_a_loop_closed_without_shutting_down_leaves_nothing_behind(fake: FakeOpenAI) -> None:
    from flownb.providers.openai import transport as mod

    provider = OpenAIProvider(media=MediaStore(Path("unused")), base_url=fake.url)
    loop = asyncio.new_event_loop()
    loop.run_until_complete(provider.generate(Call("text", "x", {"model": "m"})))
    loop.close()  # no shutdown_asyncgens: nothing could close the session in time
    asyncio.run(provider.generate(Call("text", "y", {"model": "m"})))
    assert not any(key[0] is loop for key in mod._SESSIONS)


def test_image_prompts_go_up_to_gpt_image_1s_limit_and_longer_ones_are_never_sent(
    fake: FakeOpenAI,
) -> None:
    fake.configure(image_format="b64_json")
    flow = flownb.load_flow(one_node({"model": "gpt-image-1"}, image=True), cache=False)
    # Over dall-e-3's 4,000 characters (the offline default): the API decides per model.
    assert flow.run(topic="y" * 10_000)["out"].startswith("file://")
    assert len(fake.requests[0]["prompt"]) == 10_007
    with pytest.raises(InputError, match="over the limit of 32,000 for image prompts"):
        flow.run(topic="y" * 40_000)
    assert len(fake.requests) == 1  # refused before any request
