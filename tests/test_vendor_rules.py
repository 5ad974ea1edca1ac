"""Flows as the web tool exports them (every sampling knob at its editor default) run on the
vendors' current models through fakes that refuse what the vendors refuse (issue 37): what is
sent to whom, what is refused at load with nothing sent, the model rules' table, and each fake's
refusals in its vendor's status and body shape."""
# ruff: noqa: F811

from __future__ import annotations

import base64
import json
import re
import urllib.error
import urllib.request
import warnings
from collections.abc import Iterator
from datetime import date
from typing import Any

import pandas as pd
import pytest

import flownb
from flownb import scorers as S
from flownb.errors import ConfigError
from flownb.flowfile.params import to_send
from flownb.providers.model_rules import RULES, rule_for
from flownb.testing.fake_anthropic import FakeAnthropic
from flownb.testing.fake_config import FakeConfig
from flownb.testing.fake_gemini import FakeGemini
from flownb.testing.fake_openai import FakeOpenAI
from tests.vendor_fakes import (  # noqa: F401  (fixtures)
    anthropic_fake,
    anthropic_server,
    flow_with,
    gemini_fake,
    gemini_server,
)

# What the web tool exports for a text node: every knob at its editor default.
EDITOR = {
    "temperature": 0.7,
    "max_tokens": 200,
    "top_p": 1,
    "frequency_penalty": 0,
    "presence_penalty": 0,
    "n": 1,
    "best_of": 1,
}
ROWS = pd.DataFrame({"topic": ["owls", "tide pools"]})
FAST_BATCH = {"batch_seconds": 0.2, "batch_fail_marker": "", "batch_expire": False}


def exported(model: str, **params: Any) -> dict:
    """Return an exported flow: one text node on ``model`` with the editor's knobs."""
    return flow_with({"Intro": {"model": model, **EDITOR, **params}})


def run_every_way(flow: flownb.LocalFlow) -> None:
    """Run ``flow`` over ROWS plainly and once streamed; every row must succeed."""
    out = flow.run_dataframe(ROWS, progress=False)
    assert out["Intro"].str.startswith("echo: Intro about").all(), out
    *events, result = list(flow.stream(topic="streamed"))
    assert events and result["Intro"] == "echo: Intro about streamed"


# -- the model rules' table ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "rule"),
    [
        ("claude-sonnet-4-5", "Claude Sonnet 4.5+: temperature or top_p"),
        ("claude-sonnet-4-5-20250929", "Claude Sonnet 4.5+: temperature or top_p"),
        ("claude-sonnet-4-6", "Claude Sonnet 4.5+: temperature or top_p"),
        ("claude-sonnet-4-9", "Claude Sonnet 4.5+: temperature or top_p"),  # unknown: family's
        ("claude-haiku-4-5", "Claude Haiku 4.5+: temperature or top_p"),
        ("anthropic.claude-haiku-4-5-20251001-v1:0", "Claude Haiku 4.5+: temperature or top_p"),
        ("claude-opus-4-1-20250805", "Claude Opus 4.1+: temperature or top_p"),
        ("claude-opus-4-5", "Claude Opus 4.1+: temperature or top_p"),
        ("claude-opus-4-7", "Claude Opus 4.7+: no temperature, top_p or top_k"),
        ("claude-opus-4-8", "Claude Opus 4.7+: no temperature, top_p or top_k"),
        ("claude-opus-5", "Claude Opus 4.7+: no temperature, top_p or top_k"),
        ("gemini-2.5-flash", "Gemini 2.5+: no presence or frequency penalty"),
        ("models/gemini-2.5-pro", "Gemini 2.5+: no presence or frequency penalty"),
        ("gemini-3-pro-preview", "Gemini 2.5+: no presence or frequency penalty"),
        ("gemini-flash-latest", "Gemini 2.5+: no presence or frequency penalty"),
        ("o3-mini", "OpenAI reasoning models (o1, o3, o4, gpt-5): no sampling knobs"),
        ("gpt-5-mini", "OpenAI reasoning models (o1, o3, o4, gpt-5): no sampling knobs"),
    ],
)
def test_a_model_gets_its_family_rule(model: str, rule: str) -> None:
    found = rule_for(model)
    assert found is not None and found.name == rule


@pytest.mark.parametrize(
    "model",
    [
        "claude-opus-4-20250514",  # Opus 4.0: the date is no minor version
        "claude-sonnet-4-0",
        "claude-3-5-haiku-latest",
        "claude-3-7-sonnet-20250219",
        "gemini-2.0-flash",
        "gemini-1.5-pro",
        "gpt-4o-mini",
        "gpt-3.5-turbo-instruct",
        "llama3.1",
    ],
)
def test_models_no_rule_is_about_get_their_knobs_as_set(model: str) -> None:
    assert rule_for(model) is None


def test_every_rule_names_its_sources_and_when_it_was_learned() -> None:
    for rule in RULES:
        assert rule.sources, rule.name
        assert all(re.match(r"^(https://|[\w.-]+#\d+)", s) for s in rule.sources), rule.sources
        assert date.fromisoformat(rule.learned) <= date.today()
        assert rule.one_of or rule.takes_none or rule.no_nonzero, rule.name


def test_editor_defaults_are_not_sent_unless_set_on_purpose() -> None:
    assert to_send(EDITOR) == {"temperature": 0.7, "max_tokens": 200}
    chosen = to_send(EDITOR, ["top_p", "n"])
    assert chosen == {"temperature": 0.7, "max_tokens": 200, "top_p": 1, "n": 1}
    real = {**EDITOR, "top_p": 0.9, "presence_penalty": 0.5, "n": 2}
    assert to_send(real) == {
        k: v for k, v in real.items() if k not in ("frequency_penalty", "best_of")
    }


def test_with_params_marks_what_it_sets_and_travels_by_value() -> None:
    flow = flownb.load_flow(exported("claude-sonnet-4-5"), provider="offline")
    assert flow.plan.steps[0].params == {
        "model": "claude-sonnet-4-5",
        "temperature": 0.7,
        "max_tokens": 200,
    }
    chosen = flow.with_params(n=1)
    assert chosen.plan.steps[0].params["n"] == 1
    # The exported JSON a copy travels with (pickling, Dask workers) keeps the choice.
    again = flownb.load_flow(chosen.source, provider="offline")
    assert again.plan.steps[0].params["n"] == 1


# -- Anthropic ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "model", ["claude-sonnet-4-5", "claude-sonnet-4-6", "claude-haiku-4-5", "claude-opus-4-1"]
)
def test_an_exported_flow_runs_on_current_claude_models(
    anthropic_fake: FakeAnthropic, model: str
) -> None:
    flow = flownb.load_flow(exported(model), provider="anthropic", cache=False)
    run_every_way(flow)
    assert len(anthropic_fake.requests) == len(ROWS) + 1
    for body in anthropic_fake.requests:
        # The editor's top_p 1 stays home: the model takes temperature or top_p.
        assert body["temperature"] == 0.7 and "top_p" not in body
        assert not {"frequency_penalty", "presence_penalty", "n", "best_of"} & set(body)


def test_opus_4_7_gets_no_sampling_knob_and_one_warning(anthropic_fake: FakeAnthropic) -> None:
    flow = flownb.load_flow(exported("claude-opus-4-7"), provider="anthropic", cache=False)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        run_every_way(flow)
    left_out = [str(w.message) for w in said if "left out" in str(w.message)]
    assert len(left_out) == 1 and "temperature" in left_out[0], [str(w.message) for w in said]
    assert "claude-opus-4-7" in left_out[0] and "Opus 4.7+" in left_out[0]
    assert anthropic_fake.requests
    for body in anthropic_fake.requests:
        assert not {"temperature", "top_p", "top_k"} & set(body)


@pytest.mark.parametrize("chosen", [{"top_p": 0.9}, {"top_p": 1}])
def test_both_knobs_on_current_claude_are_refused_at_load_with_nothing_sent(
    anthropic_fake: FakeAnthropic, chosen: dict[str, float]
) -> None:
    flow = flownb.load_flow(exported("claude-sonnet-4-5"), provider="anthropic", cache=False)
    with pytest.raises(ConfigError) as refused:
        flow.with_params(**chosen)
    message = str(refused.value)
    assert "'Intro'" in message and "claude-sonnet-4-5" in message
    assert "temperature or top_p" in message and "Sonnet 4.5+" in message
    assert anthropic_fake.requests == []


def test_message_batches_and_a_judge_on_claude_send_what_it_takes(
    anthropic_fake: FakeAnthropic, monkeypatch: pytest.MonkeyPatch
) -> None:
    anthropic_fake.configure(**FAST_BATCH, batch_create_delay=0.0)
    monkeypatch.setenv("FLOWNB_BATCH_POLL", "0.05")
    flow = flownb.load_flow(exported("claude-haiku-4-5"), provider="anthropic")
    out = flow.run_dataframe(ROWS, batch_api=True, progress=False)
    assert out["Intro"].str.startswith("echo: Intro about").all()
    sent = [r["params"] for batch in anthropic_fake.message_batches.submitted for r in batch]
    assert len(sent) == len(ROWS)
    assert all(p["temperature"] == 0.7 and "top_p" not in p for p in sent)
    grader = S.judge("Intro", "Is it about {topic}?", model="claude-opus-4-7", provider="anthropic")
    report = flownb.evaluate(flow, ROWS, [grader], progress=False)
    assert report.results["judge_Intro"].notna().all()
    judged = [b for b in anthropic_fake.requests if b["model"] == "claude-opus-4-7"]
    assert len(judged) == len(ROWS) and not any("temperature" in b for b in judged)


# -- Gemini -------------------------------------------------------------------------------------


def test_an_exported_flow_runs_on_gemini_2_5(gemini_fake: FakeGemini) -> None:
    flow = flownb.load_flow(exported("gemini-2.5-flash"), provider="gemini", cache=False)
    run_every_way(flow)
    assert len(gemini_fake.requests) == len(ROWS) + 1
    for body in gemini_fake.requests:
        config = body["generationConfig"]
        assert config["temperature"] == 0.7 and config["maxOutputTokens"] == 200
        assert not {"presencePenalty", "frequencyPenalty", "topP", "candidateCount"} & set(config)


def test_a_penalty_on_gemini_2_5_is_refused_at_load_with_nothing_sent(
    gemini_fake: FakeGemini,
) -> None:
    data = exported("gemini-2.5-flash", presence_penalty=0.5)
    with pytest.raises(ConfigError) as refused:
        flownb.load_flow(data, provider="gemini", cache=False)
    message = str(refused.value)
    assert "'Intro'" in message and "gemini-2.5-flash" in message and "presence_penalty" in message
    assert "Gemini 2.5+" in message
    assert gemini_fake.requests == []


# -- OpenAI -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def openai_server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


@pytest.fixture
def openai_fake(openai_server: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> FakeOpenAI:
    openai_server.configure(
        latency=0.0,
        faults={},
        fail_markers={},
        replies={},
        retry_after="0",
        max_in_flight=None,
        rate_limit=None,
        **FAST_BATCH,
    )
    openai_server.reset()
    monkeypatch.setenv("OPENAI_BASE_URL", openai_server.url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-rules-0123456789")
    monkeypatch.setenv("FLOWNB_BATCH_POLL", "0.05")
    return openai_server


def test_an_exported_flow_runs_on_openai_plain_streamed_and_batched(
    openai_fake: FakeOpenAI,
) -> None:
    flow = flownb.load_flow(exported("gpt-4o-mini"), provider="openai", cache=False)
    run_every_way(flow)
    batched = flownb.load_flow(exported("gpt-4o-mini"), provider="openai").with_prompts(
        {"Intro": "Intro about {topic}, batched"}
    )
    out = batched.run_dataframe(ROWS, batch_api=True, progress=False)
    assert out["Intro"].str.startswith("echo: Intro about").all()
    lines = [json.loads(x) for up in openai_fake.batches.uploads for x in up.splitlines()]
    bodies = [*openai_fake.requests, *(line["body"] for line in lines)]
    assert len(bodies) == 2 * len(ROWS) + 1
    for body in bodies:
        assert body["temperature"] == 0.7
        assert not {"top_p", "frequency_penalty", "presence_penalty", "n", "best_of"} & set(body)
        # A server other than OpenAI's: the name compatible servers read.
        assert body["max_tokens"] == 200 and "max_completion_tokens" not in body


def test_an_endpoint_says_which_token_limit_name_its_server_reads(
    openai_fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RULES_KEY", "sk-test-rules-0123456789")
    current = flownb.Endpoint(
        "current",
        "openai",
        base_url=openai_fake.url,
        api_key_env="RULES_KEY",
        max_tokens_param="max_completion_tokens",
    )
    flow = flownb.load_flow(exported("gpt-4o-mini"), endpoint=current, cache=False)
    flow.run(topic="owls")
    (body,) = openai_fake.requests
    assert body["max_completion_tokens"] == 200 and "max_tokens" not in body
    with pytest.raises(ConfigError, match="max_tokens_param"):
        flownb.Endpoint("bad", "openai", max_tokens_param="max_output_tokens")


def test_a_reasoning_model_gets_no_knobs_and_the_current_limit_name(
    openai_fake: FakeOpenAI,
) -> None:
    flow = flownb.load_flow(exported("o3-mini"), provider="openai", cache=False)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        run_every_way(flow)
    assert len([w for w in said if "left out" in str(w.message)]) == 1
    for body in openai_fake.requests:
        assert body["max_completion_tokens"] == 200
        assert not {"temperature", "top_p", "max_tokens"} & set(body)


def test_completions_take_logprobs_as_a_whole_number(openai_fake: FakeOpenAI) -> None:
    data = exported("gpt-3.5-turbo-instruct", logprobs=3)
    flow = flownb.load_flow(data, provider="openai", cache=False)
    assert flow.run(topic="owls")["Intro"] == "echo: Intro about owls"
    (body,) = openai_fake.requests
    assert openai_fake.state.paths == ["/v1/completions"]
    assert body["logprobs"] == 3 and body["max_tokens"] == 200
    with pytest.raises(ConfigError, match="whole number from 0 to 5"):
        flownb.load_flow(exported("gpt-3.5-turbo-instruct", logprobs=True), provider="openai")
    with pytest.raises(ConfigError, match="true or false"):
        flownb.load_flow(exported("gpt-4o-mini", logprobs=3), provider="openai")


def test_safety_identifier_and_prompt_cache_key_pass_through(openai_fake: FakeOpenAI) -> None:
    data = exported("gpt-4o-mini", safety_identifier="user-7", prompt_cache_key="intro")
    flow = flownb.load_flow(data, provider="openai", cache=False)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        flow.run(topic="owls")
    assert not [w for w in said if "dropped" in str(w.message)]
    (body,) = openai_fake.requests
    assert (body["safety_identifier"], body["prompt_cache_key"]) == ("user-7", "intro")


def test_gpt_image_1_answers_base64_and_the_image_is_kept(openai_fake: FakeOpenAI) -> None:
    data = flow_with({"Picture": {"model": "gpt-image-1"}}, images=("Picture",))
    flow = flownb.load_flow(data, provider="openai", cache=False)
    result = flow.run(topic="owls")
    (generation,) = result.generations
    assert generation.media
    (body,) = openai_fake.requests
    assert "response_format" not in body
    raw = _post(openai_fake.url + "/images/generations", {"model": "gpt-image-1", "prompt": "x"})
    answer = raw[1]
    assert "url" not in answer["data"][0] and base64.b64decode(answer["data"][0]["b64_json"])


def test_a_429_waits_whole_seconds_by_default_end_to_end(openai_fake: FakeOpenAI) -> None:
    openai_fake.configure(retry_after="1", rate_limit=1, rate_window=1.0)
    status, _, headers = _post_full(
        openai_fake.url + "/chat/completions",
        {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "a"}]},
        times=2,
    )
    assert status == 429 and headers["Retry-After"] == "1"
    openai_fake.reset()
    # The default: a 429 says "Retry-After: 1"; flownb waits it out and every row succeeds.
    openai_fake.configure(rate_limit=None, retry_after=FakeConfig().retry_after)
    # Two rows at once against a server serving one at a time (each answer held a second):
    # the second is refused with "Retry-After: 1", waited for, and sent again.
    openai_fake.configure(max_in_flight=1, latency=1.0)
    flow = flownb.load_flow(exported("gpt-4o-mini"), provider="openai", cache=False)
    out = flow.run_dataframe(ROWS, progress=False, concurrency=2)
    assert out["Intro"].str.startswith("echo: Intro about").all()
    assert openai_fake.state.limited >= 1


# -- the fakes refuse what their vendors refuse -------------------------------------------------


def _post_full(
    url: str, body: dict[str, Any], times: int = 1
) -> tuple[int, dict[str, Any], dict[str, str]]:
    """POST ``body`` as JSON ``times`` times; return the last answer's status, JSON and
    headers."""
    found: tuple[int, dict[str, Any], dict[str, str]] = (0, {}, {})
    for _ in range(times):
        request = urllib.request.Request(
            url,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json", "x-api-key": "k"},
        )
        try:
            with urllib.request.urlopen(request, timeout=60) as answer:
                found = (answer.status, json.loads(answer.read()), dict(answer.headers))
        except urllib.error.HTTPError as refused:
            found = (refused.code, json.loads(refused.read()), dict(refused.headers))
    return found


def _post(url: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    status, answer, _ = _post_full(url, body)
    return status, answer


CHAT = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.parametrize(
    ("body", "param", "said"),
    [
        ({**CHAT, "top_pp": 1}, None, "Unrecognized request argument supplied: top_pp"),
        ({**CHAT, "temperature": "hot"}, "temperature", "Invalid type for 'temperature'"),
        (
            {**CHAT, "messages": [{"role": "user", "content": "hi", "nam": "x"}]},
            None,
            "Unrecognized request argument supplied: messages.0.nam",
        ),
        ({**CHAT, "model": "o3-mini", "temperature": 0.7}, "temperature", "Unsupported parameter"),
    ],
)
def test_the_openai_fake_refuses_as_openai_does(
    openai_fake: FakeOpenAI, body: dict[str, Any], param: str | None, said: str
) -> None:
    for url in (
        openai_fake.url + "/chat/completions",
        openai_fake.origin + "/openai/deployments/mini/chat/completions?api-version=2024-10-21",
    ):
        status, answer = _post(url, body)
        assert status == 400
        error = answer["error"]
        assert set(error) == {"message", "type", "param", "code"}
        assert error["type"] == "invalid_request_error" and error["param"] == param
        assert error["message"].startswith(said), error
    # None of these was answered. (By prompt, not by count: the module's fake is shared, and an
    # earlier test's stream is counted when its last byte has left, which can be after the reset.)
    assert "hi" not in openai_fake.state.answered_prompts


def test_the_openai_fake_refuses_a_boolean_logprobs_on_completions(
    openai_fake: FakeOpenAI,
) -> None:
    body = {"model": "gpt-3.5-turbo-instruct", "prompt": "hi", "logprobs": True}
    status, answer = _post(openai_fake.url + "/completions", body)
    assert status == 400 and answer["error"]["param"] == "logprobs"


def test_the_openai_fake_answers_every_field_the_api_sends(openai_fake: FakeOpenAI) -> None:
    status, answer = _post(openai_fake.url + "/chat/completions", CHAT)
    assert status == 200
    choice = answer["choices"][0]
    assert choice["logprobs"] is None and choice["message"]["refusal"] is None
    assert answer["system_fingerprint"] and answer["service_tier"]
    assert "cached_tokens" in answer["usage"]["prompt_tokens_details"]
    assert "reasoning_tokens" in answer["usage"]["completion_tokens_details"]


CLAUDE = {
    "model": "claude-sonnet-4-5",
    "max_tokens": 10,
    "messages": [{"role": "user", "content": "hi"}],
}


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ({**CLAUDE, "top_pp": 1}, "top_pp: Extra inputs are not permitted"),
        ({**CLAUDE, "max_tokens": "ten"}, "max_tokens: Input should be a valid integer"),
        (
            {**CLAUDE, "temperature": 0.7, "top_p": 0.9},
            "`temperature` and `top_p` cannot both be specified for this model. "
            "Please use only one.",
        ),
        (
            {**CLAUDE, "model": "claude-opus-4-7", "temperature": 0.7},
            "`temperature` is deprecated for this model.",
        ),
    ],
)
def test_the_anthropic_fake_refuses_as_anthropic_does(
    anthropic_fake: FakeAnthropic, body: dict[str, Any], said: str
) -> None:
    status, answer = _post(anthropic_fake.url + "/v1/messages", body)
    assert status == 400
    assert answer == {"type": "error", "error": {"type": "invalid_request_error", "message": said}}
    # None of these was answered. (By prompt, not by count: the module's fake is shared, and an
    # earlier test's stream is counted when its last byte has left, which can be after the reset.)
    assert "hi" not in anthropic_fake.state.answered_prompts


GEMINI = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}


@pytest.mark.parametrize(
    ("model", "body", "said"),
    [
        ("gemini-2.5-flash", {**GEMINI, "generation_confg": {}}, 'Unknown name "generation_confg"'),
        (
            "gemini-2.5-flash",
            {**GEMINI, "generationConfig": {"topPp": 1}},
            'Unknown name "topPp"',
        ),
        (
            "gemini-2.5-flash",
            {**GEMINI, "generationConfig": {"temperature": "hot"}},
            "Invalid value at 'generation_config.temperature'",
        ),
        (
            "gemini-2.5-flash",
            {**GEMINI, "generationConfig": {"presencePenalty": 0.5}},
            "Penalty is not enabled for models/gemini-2.5-flash",
        ),
    ],
)
def test_the_gemini_fake_refuses_as_gemini_does(
    gemini_fake: FakeGemini, model: str, body: dict[str, Any], said: str
) -> None:
    status, answer = _post(f"{gemini_fake.url}/v1beta/models/{model}:generateContent", body)
    assert status == 400
    error = answer["error"]
    assert set(error) == {"code", "message", "status"}
    assert error["code"] == 400 and error["status"] == "INVALID_ARGUMENT"
    assert said in error["message"], error
    # None of these was answered. (By prompt, not by count: the module's fake is shared, and an
    # earlier test's stream is counted when its last byte has left, which can be after the reset.)
    assert "hi" not in gemini_fake.state.answered_prompts


def test_the_message_batches_fake_refuses_a_request_anthropic_refuses(
    anthropic_fake: FakeAnthropic,
) -> None:
    both = {**CLAUDE, "temperature": 0.7, "top_p": 0.9}
    body = {"requests": [{"custom_id": "row-1", "params": both}]}
    status, answer = _post(anthropic_fake.url + "/v1/messages/batches", body)
    assert status == 400 and answer["type"] == "error"
    assert answer["error"]["type"] == "invalid_request_error"
    assert "cannot both be specified" in answer["error"]["message"]
    assert anthropic_fake.message_batches.created == 0


def test_the_batch_fake_answers_a_refused_line_as_openai_does(openai_fake: FakeOpenAI) -> None:
    import time

    from openai import OpenAI

    client = OpenAI(base_url=openai_fake.url, api_key="sk-test", max_retries=0)
    lines = [
        {"custom_id": "good", "method": "POST", "url": "/v1/chat/completions", "body": CHAT},
        {
            "custom_id": "bad",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {**CHAT, "top_pp": 1},
        },
    ]
    data = "\n".join(json.dumps(line) for line in lines).encode()
    upload = client.files.create(file=("in.jsonl", data), purpose="batch")
    batch = client.batches.create(
        input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    deadline = time.monotonic() + 60
    while batch.status != "completed" and time.monotonic() < deadline:
        time.sleep(0.05)
        batch = client.batches.retrieve(batch.id)
    assert batch.status == "completed" and batch.output_file_id
    out = client.files.content(batch.output_file_id).text.splitlines()
    found = {line["custom_id"]: line for line in map(json.loads, out)}
    assert found["good"]["error"] is None and found["good"]["response"]["status_code"] == 200
    bad = found["bad"]["response"]
    assert bad["status_code"] == 400 and found["bad"]["error"] is None
    assert bad["body"]["error"]["message"] == "Unrecognized request argument supplied: top_pp"
