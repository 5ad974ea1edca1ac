"""The Anthropic and Gemini providers, through their official SDKs, against loopback fakes of
each vendor's HTTP API: what goes on the wire, what comes back, errors, retries, cache, usage."""
# ruff: noqa: F811

from __future__ import annotations

import math
import ssl
import warnings

import certifi
import pytest
from genai_prices import Usage, calc_price

import flownb
from flownb.errors import ConfigError, ProviderError, RateLimited
from flownb.providers.anthropic.provider import DEFAULT_MAX_TOKENS
from flownb.providers.vendor import tls_context
from flownb.testing.fake_anthropic import FakeAnthropic
from flownb.testing.fake_gemini import FakeGemini
from flownb.testing.fake_openai import image_bytes
from tests.vendor_fakes import (  # noqa: F401 (fixtures, used as parameters)
    ANTHROPIC_KEY,
    GEMINI_KEY,
    anthropic_fake,
    anthropic_server,
    flow_with,
    gemini_fake,
    gemini_server,
)


def _price(provider_id: str, model: str, inp: int, out: int) -> float:
    usage = Usage(input_tokens=inp, output_tokens=out)
    return float(calc_price(usage, model, provider_id=provider_id).total_price)


# -- Anthropic ----------------------------------------------------------------------------------


def test_anthropic_maps_params_and_prices_the_usage_reported(anthropic_fake: FakeAnthropic) -> None:
    flow = flow_with(
        {
            "A": {"model": "claude-3-5-haiku-latest", "temperature": 0.2, "top_p": 0.9},
            "B": {"model": "claude-3-5-haiku-latest", "max_tokens": 77, "stop": "END"},
        }
    )
    f = flownb.load_flow(flow, provider="anthropic", cache=False)
    result = f.run({"topic": "owls"})
    assert result == {"A": "echo: A about owls", "B": "echo: B about owls"}
    assert set(anthropic_fake.state.paths) == {"/v1/messages"}
    bodies = {b["messages"][0]["content"]: b for b in anthropic_fake.requests}
    a, b = bodies["A about owls"], bodies["B about owls"]
    assert a["max_tokens"] == DEFAULT_MAX_TOKENS  # Anthropic requires it; the node set none
    assert (a["temperature"], a["top_p"]) == (0.2, 0.9)
    assert b["max_tokens"] == 77 and b["stop_sequences"] == ["END"]
    assert a["model"] == "claude-3-5-haiku-latest"
    # The key went to the fake in the Messages API's header.
    headers = {k.lower(): v for k, v in anthropic_fake.state.headers[0].items()}
    assert headers["x-api-key"] == ANTHROPIC_KEY
    # Usage as the server reported it (words as tokens: 3 in, 4 out), priced by the table.
    gens = result.generations
    assert [g.usage["prompt_tokens"] for g in gens] == [3, 3]
    assert [g.usage["completion_tokens"] for g in gens] == [4, 4]
    expected = 2 * _price("anthropic", "claude-3-5-haiku-latest", 3, 4)
    assert result.cost == pytest.approx(expected, rel=1e-12)
    log = flownb.runs()
    assert log["cost_usd"].iloc[-1] == pytest.approx(expected, rel=1e-12)
    assert log["prompt_tokens"].iloc[-1] == 6


def test_anthropic_drops_what_claude_lacks_with_one_warning_per_flow(
    anthropic_fake: FakeAnthropic,
) -> None:
    lacking = {"model": "claude-3-5-haiku-latest", "frequency_penalty": 0.5, "seed": 3}
    flow = flow_with({"A": lacking, "B": dict(lacking)})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        f = flownb.load_flow(flow, provider="anthropic", cache=False)
        f.run({"topic": "x"})
    said = [str(w.message) for w in caught if str(w.message).startswith("anthropic: ")]
    assert len([m for m in said if "frequency_penalty" in m]) == 1
    assert len([m for m in said if "seed" in m]) == 1
    for body in anthropic_fake.requests:
        assert "frequency_penalty" not in body and "seed" not in body


def test_anthropic_replaces_an_openai_model_name(anthropic_fake: FakeAnthropic) -> None:
    f = flownb.load_flow(flow_with({"A": {"model": "gpt-4o-mini"}}), provider="anthropic")
    with pytest.warns(UserWarning, match="OpenAI model"):  # said when it is sent
        f.run({"topic": "x"})
    assert anthropic_fake.requests[0]["model"].startswith("claude")


def test_anthropic_refuses_image_nodes_and_bad_temperature_at_load(
    anthropic_fake: FakeAnthropic,
) -> None:
    images = flow_with({"A": {}, "Pic": {}}, images=("Pic",))
    with pytest.raises(ConfigError, match="cannot generate images"):
        flownb.load_flow(images, provider="anthropic")
    with pytest.raises(ConfigError, match=r"temperature 1\.5"):
        flownb.load_flow(flow_with({"A": {"temperature": 1.5}}), provider="anthropic")
    assert anthropic_fake.requests == []


def test_anthropic_429_retried_after_retry_after(anthropic_fake: FakeAnthropic) -> None:
    anthropic_fake.configure(faults={"429": 0.5}, seed=1)
    f = flownb.load_flow(
        flow_with({"A": {"model": "claude-3-5-haiku-latest"}}), provider="anthropic", cache=False
    )
    out = f.run_batch([{"topic": str(i)} for i in range(12)])
    assert [r["A"] for r in out] == [f"echo: A about {i}" for i in range(12)]
    assert anthropic_fake.stats()["faults"]["429"] > 0


def test_anthropic_errors_map_onto_flownb_errors(anthropic_fake: FakeAnthropic) -> None:
    anthropic_fake.configure(fail_markers={"429": "LIMIT"}, retry_after="7")
    f = flownb.load_flow(flow_with({"A": {}}), provider="anthropic", retries=0, cache=False)
    with pytest.raises(RateLimited) as info:
        f.run({"topic": "LIMIT"})
    assert info.value.retry_after == 7 and info.value.status == 429
    assert ANTHROPIC_KEY not in str(info.value)
    anthropic_fake.configure(fail_markers={"500": "BOOM"})
    f = flownb.load_flow(flow_with({"A": {}}), provider="anthropic", retries=2, cache=False)
    anthropic_fake.reset()
    with pytest.raises(ProviderError) as err:
        f.run({"topic": "BOOM"})
    assert err.value.status == 500
    assert len(anthropic_fake.requests) == 3  # the first attempt and two retries


def test_anthropic_cache_hit_costs_nothing_and_counts_the_saving(
    anthropic_fake: FakeAnthropic,
) -> None:
    flow = flow_with({"A": {"model": "claude-3-5-haiku-latest"}})
    first = flownb.load_flow(flow, provider="anthropic").run({"topic": "owls"})
    again = flownb.load_flow(flow, provider="anthropic").run({"topic": "owls"})
    assert len(anthropic_fake.requests) == 1
    assert again.cached == {"A"}
    assert first.cost > 0
    assert again.cost == 0 and again.cache_saving == pytest.approx(first.cost)
    log = flownb.runs()
    assert list(log["cost_usd"]) == [pytest.approx(first.cost), 0.0]
    assert log["saved_usd"].iloc[-1] == pytest.approx(first.cost)


def test_anthropic_needs_a_key_for_its_own_host(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match="ANTHROPIC_API_KEY"):
        flownb.load_flow(flow_with({"A": {}}), provider="anthropic")


# -- Gemini ---------------------------------------------------------------------------------------


def test_gemini_text_on_the_wire_and_priced(gemini_fake: FakeGemini) -> None:
    params = {"model": "gemini-2.5-flash", "temperature": 0.4, "top_p": 0.8, "max_tokens": 50}
    f = flownb.load_flow(flow_with({"A": params}), provider="gemini", cache=False)
    result = f.run({"topic": "owls"})
    assert result == {"A": "echo: A about owls"}
    assert gemini_fake.state.paths == ["/v1beta/models/gemini-2.5-flash:generateContent"]
    body = gemini_fake.requests[0]
    assert body["contents"][0]["parts"][0]["text"] == "A about owls"
    config = body["generationConfig"]
    assert (config["temperature"], config["topP"], config["maxOutputTokens"]) == (0.4, 0.8, 50)
    headers = {k.lower(): v for k, v in gemini_fake.state.headers[0].items()}
    assert headers["x-goog-api-key"] == GEMINI_KEY
    expected = _price("google", "gemini-2.5-flash", 3, 4)
    assert result.cost == pytest.approx(expected, rel=1e-12)
    assert flownb.runs()["cost_usd"].iloc[-1] == pytest.approx(expected, rel=1e-12)


def test_gemini_image_models_draw_image_nodes(gemini_fake: FakeGemini) -> None:
    flow = flow_with({"Text": {}, "Pic": {"model": "gemini-2.5-flash-image"}}, images=("Pic",))
    f = flownb.load_flow(flow, provider="gemini", cache=False)
    result = f.run({"topic": "owls"})
    assert sorted(gemini_fake.state.paths) == [
        "/v1beta/models/gemini-2.5-flash-image:generateContent",
        "/v1beta/models/gemini-2.5-flash:generateContent",
    ]
    assert result.is_image("Pic")
    with open(result["Pic"].removeprefix("file://"), "rb") as fh:
        assert fh.read() == image_bytes("Pic about owls")
    asked = next(b for b in gemini_fake.requests if "Pic" in str(b))
    assert asked["generationConfig"]["responseModalities"] == ["IMAGE"]
    # Image tokens are priced as the table prices the image model's output tokens.
    assert result.cost == pytest.approx(
        _price("google", "gemini-2.5-flash", 3, 4)
        + _price("google", "gemini-2.5-flash-image", 3, 1290)
    )


def test_gemini_refuses_imagen_at_load(gemini_fake: FakeGemini) -> None:
    flow = flow_with({"Pic": {"model": "imagen-4.0-generate-001"}}, images=("Pic",))
    with pytest.raises(ConfigError, match="Imagen"):
        flownb.load_flow(flow, provider="gemini")


def test_gemini_429_retry_info_and_retries(gemini_fake: FakeGemini) -> None:
    gemini_fake.configure(fail_markers={"429": "LIMIT"}, retry_after="3")
    f = flownb.load_flow(flow_with({"A": {}}), provider="gemini", retries=0, cache=False)
    with pytest.raises(RateLimited) as info:
        f.run({"topic": "LIMIT"})
    assert info.value.retry_after == 3  # from google.rpc.RetryInfo's retryDelay
    assert GEMINI_KEY not in str(info.value)
    gemini_fake.configure(fail_markers={}, faults={"500": 0.4}, seed=2)
    f = flownb.load_flow(flow_with({"A": {}}), provider="gemini", cache=False)
    out = f.run_batch([{"topic": str(i)} for i in range(10)])
    assert [r["A"] for r in out] == [f"echo: A about {i}" for i in range(10)]
    assert gemini_fake.stats()["faults"]["500"] > 0


def test_gemini_drops_what_it_lacks_once(gemini_fake: FakeGemini) -> None:
    flow = flow_with({"A": {"logit_bias": {"1": 2}}, "B": {"logit_bias": {"1": 2}}})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        flownb.load_flow(flow, provider="gemini", cache=False).run({"topic": "x"})
    said = [str(w.message) for w in caught if "logit_bias" in str(w.message)]
    assert len(said) == 1
    assert all("logitBias" not in str(b) for b in gemini_fake.requests)


def test_gemini_endpoint_prices_override_the_table(gemini_fake: FakeGemini) -> None:
    from flownb.config.endpoints import Endpoint
    from flownb.config.settings import resolve_run_config

    endpoint = Endpoint(
        "mine",
        "gemini",
        base_url=gemini_fake.url,
        api_key_env="MY_GEMINI_KEY",
        prices={"*": {"input": 1.0, "output": 2.0}},
    )
    config = resolve_run_config(provider="gemini", cache=False).replace(endpoint=endpoint)
    with pytest.raises(ConfigError, match="MY_GEMINI_KEY"):
        flownb.flows.local.LocalFlow(
            flownb.flowfile.model.parse_flow(flow_with({"A": {}})), config=config
        )
    import os

    os.environ["MY_GEMINI_KEY"] = "AIza-endpoint-key"
    try:
        f = flownb.flows.local.LocalFlow(
            flownb.flowfile.model.parse_flow(flow_with({"A": {}})), config=config
        )
        result = f.run({"topic": "owls"})
    finally:
        del os.environ["MY_GEMINI_KEY"]
    assert result.cost == pytest.approx((3 * 1.0 + 4 * 2.0) / 1e6)
    headers = {k.lower(): v for k, v in gemini_fake.state.headers[0].items()}
    assert headers["x-goog-api-key"] == "AIza-endpoint-key"
    assert "AIza-endpoint-key" not in repr(endpoint)


def test_unknown_price_is_nan_never_zero(anthropic_fake: FakeAnthropic) -> None:
    f = flownb.load_flow(
        flow_with({"A": {"model": "claude-nobody-knows"}}), provider="anthropic", cache=False
    )
    result = f.run({"topic": "x"})
    assert math.isnan(result.cost)
    assert math.isnan(flownb.runs()["cost_usd"].iloc[-1])


@pytest.mark.parametrize("vendor", ["anthropic", "gemini"])
def test_dropped_connections_are_retried_and_hangs_time_out(
    vendor: str, anthropic_fake: FakeAnthropic, gemini_fake: FakeGemini
) -> None:
    from flownb.errors import ProviderTimeout

    fake = anthropic_fake if vendor == "anthropic" else gemini_fake
    fake.configure(faults={"drop": 0.3}, seed=3)
    fake.reset()  # the seed takes effect
    f = flownb.load_flow(flow_with({"A": {}}), provider=vendor, cache=False)
    out = f.run_batch([{"topic": str(i)} for i in range(10)])
    assert [r["A"] for r in out] == [f"echo: A about {i}" for i in range(10)]
    assert fake.stats()["faults"]["drop"] > 0
    fake.configure(faults={}, fail_markers={"hang": "SLOW"})
    f = flownb.load_flow(flow_with({"A": {}}), provider=vendor, timeout=0.5, retries=0)
    with pytest.raises(ProviderTimeout):
        f.run({"topic": "SLOW"})


def test_anthropic_rate_limit_headers_reach_the_limiter(anthropic_fake: FakeAnthropic) -> None:
    anthropic_fake.configure(rate_limit=100, rate_window=60.0)
    f = flownb.load_flow(flow_with({"A": {}}), provider="anthropic", cache=False)
    limits = f.run({"topic": "x"}).generations[0].limits
    assert limits is not None
    assert (limits.limit_requests, limits.remaining_requests) == (100, 99)
    assert 0 < limits.reset_requests <= 60


def test_a_pickled_flow_carries_no_vendor_key(
    anthropic_fake: FakeAnthropic, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pickle

    f = flownb.load_flow(flow_with({"A": {}}), provider="anthropic", cache=False)
    data = pickle.dumps(f)
    assert ANTHROPIC_KEY.encode() not in data
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-other-process-key")
    copy = pickle.loads(data)  # rebuilt here: the key comes from this process's environment
    copy.run({"topic": "x"})
    assert any("sk-ant-other-process-key" in v for v in anthropic_fake.state.headers[-1].values())


# -- one TLS context for every vendor SDK's client ------------------------------------------------


def test_every_vendor_sdk_client_shares_the_process_tls_context(
    anthropic_fake: FakeAnthropic, gemini_fake: FakeGemini, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each SDK client made its own TLS context, loading the certificates (about 50 ms of CPU,
    # 80 for Gemini's three): now every client is handed the process's one. Counted as loads of
    # certificates into any context while flows of each vendor run, and their batch clients.
    loads: list[ssl.SSLContext] = []
    real = ssl.SSLContext.load_verify_locations

    def counted(self: ssl.SSLContext, *args: object, **kwargs: object) -> None:
        loads.append(self)
        real(self, *args, **kwargs)  # type: ignore[arg-type]

    shared = tls_context()
    monkeypatch.setattr(ssl.SSLContext, "load_verify_locations", counted)
    flow = flow_with({"A": {"model": "claude-3-5-haiku-latest"}})
    assert flownb.load_flow(flow, provider="anthropic", cache=False).run(topic="owls")
    flow = flow_with({"A": {"model": "gemini-2.0-flash"}})
    assert flownb.load_flow(flow, provider="gemini", cache=False).run(topic="owls")
    flownb.load_flow(flow_with({"A": {}}), provider="anthropic", cache=False).provider.batch_api()
    assert loads == []
    assert tls_context() is shared
    # Another certificate file is another context (made once, from that file).
    monkeypatch.setenv("SSL_CERT_FILE", certifi.where())
    other = tls_context()
    assert other is not shared and tls_context() is other
    assert loads == [other]
