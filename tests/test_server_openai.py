"""``flownb serve --provider openai`` against the loopback fake OpenAI server: real generations
through the contract, and the provider rows of the error table (502, 429 with Retry-After, 504)
produced by the real provider from real HTTP failures."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from flownb.testing.fake_openai import FakeOpenAI, echo
from tests.conftest import FLOWS, make_flow, write_flow
from tests.serving import Running, post_run, run_server

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(
        fail_markers={"500": "FAIL500", "429": "FAIL429", "hang": "HANG"}, retry_after="7"
    ) as f:
        yield f


def _serve(
    fake: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, timeout: str = "1"
) -> Iterator[Running]:
    monkeypatch.setenv("OPENAI_BASE_URL", fake.url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-loopback-only")
    monkeypatch.setenv("FLOWNB_RETRIES", "0")  # the table's statuses, not the retry layer
    monkeypatch.setenv("FLOWNB_TIMEOUT", timeout)
    flows = tmp_path / "flows"
    flows.mkdir()
    shutil.copy(FLOWS / "blog-intro.json", flows / "blog-intro.json")
    write_flow(flows / "echo.json", make_flow({"say": "say {a}"}, ["a"]))
    write_flow(
        flows / "pair.json",
        make_flow({"text": "say {a}", "pic": "draw {a}"}, ["a"], images=("pic",)),
    )
    with run_server(flows, tmp_path / "home", provider="openai") as running:
        yield running


@pytest.fixture
def server(fake: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Running]:
    yield from _serve(fake, tmp_path, monkeypatch)


@pytest.fixture(params=["aiohttp", "sdk"])
def both(
    request: pytest.FixtureRequest,
    fake: FakeOpenAI,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Running]:
    """The server of :func:`server`, on each OpenAI transport (no tight timeout: the SDK's
    first call imports it)."""
    monkeypatch.setenv("FLOWNB_OPENAI_TRANSPORT", request.param)
    yield from _serve(fake, tmp_path, monkeypatch, timeout="60")


def test_text_and_image_through_the_contract(server: Running) -> None:
    resp = post_run(server, "blog-intro", {"topic": "owls", "tone": "dry"})
    assert resp.status_code == 200, resp.text
    items = {i["name"]: i["output"] for i in resp.json()}
    prompt = "Write a dry two-sentence intro for a blog post about owls."
    assert items["intro"] == echo(prompt)
    assert items["header_image"].startswith("http")


def test_provider_failures_map_to_the_error_table(server: Running) -> None:
    failed = post_run(server, "echo", {"a": "FAIL500"})
    assert failed.status_code == 502 and failed.json()["code"] == "provider_error"

    limited = post_run(server, "echo", {"a": "FAIL429"})
    assert limited.status_code == 429 and limited.json()["code"] == "upstream_rate_limited"
    assert limited.headers["Retry-After"] == "7"

    slow = post_run(server, "echo", {"a": "HANG"})
    assert slow.status_code == 504 and slow.json()["code"] == "provider_timeout"

    assert "sk-loopback-only" not in failed.text + limited.text + slow.text


def test_partly_failed_batch_keeps_paid_outputs(server: Running) -> None:
    resp = post_run(server, "echo", [{"a": "one"}, {"a": "FAIL500"}, {"a": "three"}])
    assert resp.status_code == 502
    body = resp.json()
    assert [e["index"] for e in body["errors"]] == [1]
    assert body["results"][0] == [{"name": "say", "output": echo("say one"), "type": "output"}]
    assert body["results"][1] is None
    assert body["results"][2][0]["output"] == echo("say three")


def test_a_row_with_a_failed_node_keeps_the_other_outputs(both: Running, fake: FakeOpenAI) -> None:
    server = both
    fake.configure(fail_markers={"500": "draw B"})
    resp = post_run(server, "pair", [{"a": "A"}, {"a": "B"}])
    assert resp.status_code == 502
    body = resp.json()
    assert [e["index"] for e in body["errors"]] == [1], body["errors"]
    assert "node 'pic' failed" in body["errors"][0]["message"]
    assert body["results"][1] == [{"name": "text", "output": echo("say B"), "type": "output"}]
    assert {i["name"] for i in body["results"][0]} == {"text", "pic"}


def test_answers_are_read_right_through_the_contract(both: Running, fake: FakeOpenAI) -> None:
    server = both
    parts = [{"type": "text", "text": "two "}, {"type": "text", "text": "parts"}]
    fake.configure(
        answers={
            "PARTS": {"message": {"role": "assistant", "content": parts}},
            "NO": {"message": {"role": "assistant", "content": None, "refusal": "Cannot."}},
        }
    )
    joined = post_run(server, "echo", {"a": "PARTS"})
    assert joined.status_code == 200
    assert joined.json() == [{"name": "say", "output": "two parts", "type": "output"}]
    refused = post_run(server, "echo", {"a": "NO"})
    assert refused.status_code == 502
    assert "refusal instead of text: Cannot." in refused.json()["message"]


@pytest.mark.parametrize("cache_on", [False, True])
def test_server_cache_is_off_unless_the_operator_turns_it_on(
    fake: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cache_on: bool
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", fake.url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-loopback-only")
    if cache_on:
        monkeypatch.setenv("FLOWNB_SERVER_CACHE", "1")
    flows = tmp_path / "flows"
    flows.mkdir()
    write_flow(flows / "echo.json", make_flow({"say": "say {a}"}, ["a"]))
    with run_server(flows, tmp_path / "home", provider="openai") as server:
        first = post_run(server, "echo", {"a": "owls"})
        calls_after_first = fake.stats()["requests"]
        second = post_run(server, "echo", {"a": "owls"})
    assert first.status_code == second.status_code == 200
    assert (
        first.json()
        == second.json()
        == [{"name": "say", "output": echo("say owls"), "type": "output"}]
    )
    assert calls_after_first == 1
    assert fake.stats()["requests"] == (1 if cache_on else 2)
