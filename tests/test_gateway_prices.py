"""Prices behind gateways (issue 37.3): a gateway's own price of a call
(``x-litellm-response-cost``) wins over the table on both OpenAI transports, plain and streamed,
and is kept with the cached answer; an endpoint's ``price_as`` names the model whose list price
applies (checked against the table); a price still unknown stays unknown, never 0."""

from __future__ import annotations

import math
import tomllib
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

import flownb
from flownb.config.endpoints import table_endpoint
from flownb.config.pricing import call_cost, price_as_model
from flownb.errors import ConfigError
from flownb.show.meter import CostMeter
from flownb.testing.fake_openai import FakeOpenAI
from tests.conftest import make_flow

FLOW = make_flow({"out": "Write about {topic}."}, ["topic"])


@pytest.fixture(params=["aiohttp", "sdk"])
def transport(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("FLOWNB_OPENAI_TRANSPORT", request.param)
    return request.param


@pytest.fixture
def gateway() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake


def _endpoint(fake: FakeOpenAI, **fields: object) -> flownb.Endpoint:
    return flownb.Endpoint(
        "gw", "openai", base_url=fake.url, api_key="sk-gateway-0123456789", **fields
    )


def _load(fake: FakeOpenAI, model: str, **fields: object) -> flownb.LocalFlow:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # an alias the table does not know is said, not raised
        return flownb.load_flow(FLOW, endpoint=_endpoint(fake, **fields)).with_model(model)


@pytest.mark.parametrize("streamed", [False, True], ids=["plain", "streamed"])
def test_the_gateways_price_header_wins_and_is_kept_with_the_cached_answer(
    gateway: FakeOpenAI, transport: str, streamed: bool
) -> None:
    gateway.configure(headers={"x-litellm-response-cost": "0.000375"})
    flow = _load(gateway, "gpt-4o-mini")  # the table knows it: the header still wins
    if streamed:
        *_, result = flow.stream(topic="owls")
    else:
        result = flow.run(topic="owls")
    assert result.cost == pytest.approx(0.000375)
    listed = call_cost("openai", "gpt-4o-mini", {"prompt_tokens": 3, "completion_tokens": 5})
    assert listed != pytest.approx(0.000375)
    # The same call again, from the cache: nothing spent, the gateway's price saved.
    gateway.configure(headers={})
    again = flow.run(topic="owls")
    assert len(gateway.requests) == 1
    assert again.cost == 0 and again.cache_saving == pytest.approx(0.000375)
    assert again.price == pytest.approx(0.000375)
    log = flownb.runs().tail(2)
    assert list(log["cost_usd"]) == pytest.approx([0.000375, 0.0])
    assert list(log["saved_usd"]) == pytest.approx([0.0, 0.000375])


def test_a_header_that_is_not_a_price_is_ignored(gateway: FakeOpenAI) -> None:
    gateway.configure(headers={"x-litellm-response-cost": "n/a"})
    result = _load(gateway, "gpt-4o-mini").run(topic="owls")
    usage = result.generations[0].usage
    assert result.cost == pytest.approx(call_cost("openai", "gpt-4o-mini", usage))


def test_an_alias_is_priced_as_the_model_the_endpoint_names(
    gateway: FakeOpenAI, transport: str
) -> None:
    flow = _load(gateway, "team-fast", price_as="claude-haiku-4-5")
    result = flow.run(topic="owls")
    usage = result.generations[0].usage
    assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] > 0
    expected = call_cost("anthropic", "claude-haiku-4-5", usage)
    assert not math.isnan(expected) and expected > 0
    assert result.cost == pytest.approx(expected)
    # The preview's estimate prices the alias the same way.
    estimate = flow.preview({"topic": "bees"})  # not cached: to be bought
    assert not math.isnan(estimate.est_cost) and estimate.est_cost > 0


def test_an_unknown_alias_stays_unknown_never_zero(gateway: FakeOpenAI) -> None:
    flow = _load(gateway, "team-fast")
    result = flow.run(topic="owls")
    assert math.isnan(result.cost) and result.unpriced == 1
    meter = CostMeter()
    meter.add(result)
    assert "unknown" in meter.text()
    log = flownb.runs().tail(1)
    assert math.isnan(log["cost_usd"].iloc[0]) and int(log["unpriced_calls"].iloc[0]) == 1


def test_price_as_is_checked_against_the_table_with_the_closest_names(
    gateway: FakeOpenAI,
) -> None:
    with pytest.raises(ConfigError, match=r"price_as 'gpt4o-mini'.*did you mean 'gpt-4o-mini'"):
        _endpoint(gateway, price_as="gpt4o-mini")
    with pytest.raises(ConfigError, match="price_as must be a model name"):
        _endpoint(gateway, price_as="")
    assert price_as_model("claude-haiku-4-5") == ("anthropic", "claude-haiku-4-5")


def test_price_as_in_flownb_toml(gateway: FakeOpenAI, tmp_path: Path) -> None:
    (tmp_path / "flownb.toml").write_text(
        "[endpoints.gw]\n"
        'provider = "openai"\n'
        f'base_url = "{gateway.url}"\n'
        'api_key_env = "GW_KEY"\n'
        'price_as = "claude-haiku-4-5"\n'
        "[endpoints.typo]\n"
        'provider = "openai"\n'
        'price_as = "cluade-haiku-4-5"\n',
        encoding="utf-8",
    )
    tables = tomllib.loads((tmp_path / "flownb.toml").read_text(encoding="utf-8"))["endpoints"]
    endpoint = table_endpoint("gw", tables["gw"], tmp_path / "flownb.toml")
    assert endpoint.price_as == "claude-haiku-4-5" and "price_as=" in repr(endpoint)
    with pytest.raises(
        ConfigError,
        match=r"flownb.toml: endpoint 'typo': price_as .*did you mean 'claude-haiku-4-5'",
    ):
        table_endpoint("typo", tables["typo"], tmp_path / "flownb.toml")
