"""Run settings resolve by one rule, whichever way a flow gets its endpoint: an explicit
argument > the endpoint's own setting > the environment > the default.
``load_flow(..., endpoint=E)`` and ``load_flow(...).with_endpoint(E)`` give the same settings
(issue 39: they did not)."""

from __future__ import annotations

from pathlib import Path

import pytest

import flownb
from tests.conftest import FLOWS

BLOG = FLOWS / "blog-intro.json"


def _endpoint(name: str, **limits: float) -> flownb.Endpoint:
    return flownb.Endpoint(
        name, "openai", base_url="http://127.0.0.1:9/v1", api_key="sk-test", **limits
    )  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("given", "endpoint", "env", "expected"),
    [
        ({"concurrency": 4}, {"concurrency": 16}, None, 4),  # the argument wins
        ({}, {"concurrency": 16}, "3", 16),  # the endpoint's own, over the environment
        ({}, {}, "3", 3),  # the environment, over the default
        ({}, {}, None, 16),  # the default
    ],
)
def test_load_flow_and_with_endpoint_resolve_alike(
    given: dict, endpoint: dict, env: str | None, expected: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    if env is not None:
        monkeypatch.setenv("FLOWNB_CONCURRENCY", env)
    e = _endpoint("e", **endpoint)
    at_load = flownb.load_flow(BLOG, endpoint=e, ready=False, **given)
    moved = flownb.load_flow(BLOG, ready=False, **given).with_endpoint(e)
    assert at_load.concurrency == moved.concurrency == expected
    assert at_load.config.rpm == moved.config.rpm


def test_a_previous_endpoints_limits_do_not_follow_a_flow_to_the_next(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FLOWNB_CONCURRENCY", "5")
    first = flownb.load_flow(BLOG, endpoint=_endpoint("a", concurrency=16, rpm=60), ready=False)
    assert (first.concurrency, first.config.rpm) == (16, 60)
    second = first.with_endpoint(_endpoint("b"))
    assert (second.concurrency, second.config.rpm) == (5, None)
    explicit = flownb.load_flow(BLOG, endpoint=_endpoint("a", rpm=60), rpm=30, ready=False)
    assert explicit.with_endpoint(_endpoint("b", rpm=90)).config.rpm == 30


def test_a_name_resolves_through_flownb_toml_either_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "flownb.toml").write_text(
        '[endpoints.near]\nprovider = "openai"\nbase_url = "http://127.0.0.1:9/v1"\n'
        'api_key_env = "KEY_NEAR"\nconcurrency = 7\n'
    )
    monkeypatch.setenv("KEY_NEAR", "sk-test-near")
    at_load = flownb.load_flow(BLOG, endpoint="near", concurrency=2, ready=False)
    moved = flownb.load_flow(BLOG, concurrency=2, ready=False).with_endpoint("near")
    assert at_load.concurrency == moved.concurrency == 2
    assert flownb.load_flow(BLOG, ready=False).with_endpoint("near").concurrency == 7
    with pytest.raises(flownb.errors.ConfigError, match="no endpoint named 'far'"):
        flownb.load_flow(BLOG, ready=False).with_endpoint("far")
