# ruff: noqa: F811  (pytest fixtures imported from openai_fake are parameters here)
"""Answers read right, on both transports (issue 17 item 10): content given as parts, refusals,
tool-call-only answers, answers cut at the token limit, ``retry-after-ms``, HTML error pages,
FastAPI-style 404s, empty ``choices``/``data``, a 200 that is not JSON; and a row where one node
fails keeps the outputs of the others. The loopback fake scripts each answer by a marker."""

from __future__ import annotations

import warnings
from typing import Any

import pandas as pd
import pytest
from openai_fake import KEY, fake, fake_server  # noqa: F401 (fixtures)

import flownb
from flownb.errors import BatchError, ProviderError, RateLimited, one_line
from flownb.testing.fake_openai import FakeOpenAI, echo
from tests.conftest import make_flow


@pytest.fixture(params=["aiohttp", "sdk"])
def transport(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("FLOWNB_OPENAI_TRANSPORT", request.param)
    return request.param


def one_node() -> flownb.LocalFlow:
    return flownb.load_flow(make_flow({"out": "say {a}"}, ["a"]), cache=False, retries=0)


def script(fake: FakeOpenAI, marker: str, **answer: Any) -> None:
    fake.configure(answers={marker: answer})


def failure(fake: FakeOpenAI, marker: str, **answer: Any) -> ProviderError:
    script(fake, marker, **answer)
    with pytest.raises(ProviderError) as info:
        one_node().run(a=marker)
    return info.value


def test_content_given_as_parts_is_joined(fake: FakeOpenAI, transport: str) -> None:
    parts = [{"type": "text", "text": "Owls "}, {"type": "text", "text": "hunt at night."}]
    script(fake, "PARTS", message={"role": "assistant", "content": parts})
    assert one_node().run(a="PARTS") == {"out": "Owls hunt at night."}


@pytest.mark.parametrize(
    ("answer", "named"),
    [
        (
            {"message": {"role": "assistant", "content": None, "refusal": "I can't help."}},
            "refusal instead of text: I can't help.",
        ),
        (
            {
                "message": {
                    "role": "assistant",
                    "content": [{"type": "refusal", "refusal": "Not this one."}],
                }
            },
            "refusal instead of text: Not this one.",
        ),
        ({"finish_reason": "content_filter"}, "content filter"),
        (
            {
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": "c1", "type": "function", "function": {"name": "lookup"}}
                    ],
                },
                "finish_reason": "tool_calls",
            },
            "a tool call (lookup) and no text",
        ),
    ],
    ids=["refusal", "refusal-part", "content-filter", "tool-call"],
)
def test_refusals_and_tool_calls_are_errors_naming_them(
    fake: FakeOpenAI, transport: str, answer: dict[str, Any], named: str
) -> None:
    exc = failure(fake, "NO", **answer)
    assert named in str(exc)
    assert exc.status == 200 and "\n" not in one_line(exc)


def test_a_refusal_is_not_retried(fake: FakeOpenAI) -> None:
    script(fake, "NO", finish_reason="content_filter")
    flow = flownb.load_flow(make_flow({"out": "say {a}"}, ["a"]), cache=False, retries=3)
    with pytest.raises(ProviderError):
        flow.run(a="NO")
    assert len(fake.requests) == 1


def test_an_answer_cut_at_the_token_limit_keeps_its_text_warns_and_is_flagged(
    fake: FakeOpenAI, transport: str
) -> None:
    script(fake, "LONG", finish_reason="length")
    flow = flownb.load_flow(make_flow({"out": "say {a}"}, ["a"]), cache=False)
    with pytest.warns(UserWarning, match="node 'out': the answer stopped at the token limit"):
        frame = flow.run_dataframe(pd.DataFrame({"a": ["LONG", "short"]}), progress=False)
    assert list(frame["out"]) == [echo("say LONG"), echo("say short")]
    assert list(frame["truncated"]) == ["out", pd.NA]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = flow.run(a="LONG")
    assert result["out"] == echo("say LONG") and result.truncated == ("out",)
    assert flow.run(a="short").truncated == ()


def test_retry_after_ms_wins_over_retry_after(fake: FakeOpenAI, transport: str) -> None:
    script(
        fake,
        "SLOW",
        status=429,
        headers={"retry-after-ms": "250", "Retry-After": "30"},
        json={"error": {"message": "Rate limit reached", "code": "rate_limit_exceeded"}},
    )
    with pytest.raises(RateLimited) as info:
        one_node().run(a="SLOW")
    assert info.value.retry_after == 0.25


def test_an_html_error_page_becomes_its_first_line(fake: FakeOpenAI, transport: str) -> None:
    page = (
        "<html>\n<head><title>502 Bad Gateway</title></head>\n<body>\n"
        "<center><h1>502 Bad Gateway</h1></center>\n<hr><center>nginx</center>\n</body></html>"
    )
    exc = failure(fake, "PROXY", status=502, text=page)
    assert exc.status == 502
    assert str(exc) == "OpenAI API error 502: 502 Bad Gateway (request id req_fake_ok)"


def test_a_404_detail_is_shown_with_the_path_asked_for(fake: FakeOpenAI, transport: str) -> None:
    exc = failure(fake, "GONE", status=404, json={"detail": "Not Found"})
    assert exc.status == 404
    assert "OpenAI API error 404: Not Found" in str(exc)
    assert f"{fake.url}/chat/completions" in str(exc)
    assert "no message" not in str(exc) and KEY not in str(exc)


def test_empty_choices_say_so(fake: FakeOpenAI, transport: str) -> None:
    exc = failure(fake, "EMPTY", choices=[])
    assert "answered 200 with no answer (its 'choices' list is empty or missing)" in str(exc)


def test_empty_image_data_says_so(fake: FakeOpenAI, transport: str) -> None:
    script(fake, "EMPTY", data=[])
    flow = flownb.load_flow(
        make_flow({"pic": "draw {a}"}, ["a"], images=("pic",)), cache=False, retries=0
    )
    with pytest.raises(ProviderError, match=r"no image \(its 'data' list is empty or missing\)"):
        flow.run(a="EMPTY")


def test_a_200_that_is_not_json_is_one_line(fake: FakeOpenAI, transport: str) -> None:
    exc = failure(fake, "BROKEN", text='{"choices": [ oops\nmore', content_type="application/json")
    assert type(exc) is ProviderError and exc.status == 200
    assert 'not a JSON object: {"choices": [ oops' in one_line(exc)
    assert "JSONDecodeError" not in one_line(exc)


def text_and_image() -> dict:
    """A row of two independent nodes: a paid text answer and an image."""
    return make_flow({"text": "say {a}", "pic": "draw {a}"}, ["a"], images=("pic",))


def test_a_failed_node_keeps_the_rows_other_outputs(fake: FakeOpenAI, transport: str) -> None:
    fake.configure(fail_markers={"500": "draw B"})
    flow = flownb.load_flow(text_and_image(), cache=False, retries=0)
    with pytest.raises(BatchError) as info:
        flow.run_batch([{"a": "A"}, {"a": "B"}])
    err = info.value.errors[1]
    assert isinstance(err, ProviderError) and err.status == 500
    assert err.failed_nodes == ("pic",)
    assert str(err).startswith("node 'pic' failed: OpenAI API error 500")
    assert err.partial == {"text": echo("say B")}  # the paid text is kept
    assert info.value.results[0]["text"] == echo("say A")

    frame = flow.run_dataframe(pd.DataFrame({"a": ["A", "B"]}), progress=False)
    assert list(frame["text"]) == [echo("say A"), echo("say B")]
    assert frame["pic"][1] is pd.NA and frame["pic"][0].startswith("file://")
    assert frame["error"][0] is pd.NA and "node 'pic' failed" in frame["error"][1]


def test_a_node_downstream_of_a_failed_one_does_not_run(fake: FakeOpenAI) -> None:
    flow_dict = make_flow(
        {"first": "say {a}", "second": "again {first}", "side": "side {a}"}, ["a"]
    )
    flow_dict["edges"].append({"id": "chain", "source": "node-first", "target": "node-second"})
    fake.configure(fail_markers={"500": "say X"})
    flow = flownb.load_flow(flow_dict, cache=False, retries=0)
    with pytest.raises(ProviderError) as info:
        flow.run(a="X")
    err = info.value
    assert err.failed_nodes == ("first",)
    assert err.partial == {"side": echo("side X")}
    assert not any(p.startswith("again") for p in fake.answered_prompts)


@pytest.mark.parametrize(
    ("usage", "flat"),
    [
        (  # a chat answer as OpenAI sends it: both detail sections, zeros kept
            {
                "prompt_tokens": 3,
                "completion_tokens": 4,
                "total_tokens": 7,
                "prompt_tokens_details": {"cached_tokens": 2, "audio_tokens": 0},
                "completion_tokens_details": {"reasoning_tokens": 1, "audio_tokens": 0},
            },
            {
                "prompt_tokens": 3,
                "completion_tokens": 4,
                "total_tokens": 7,
                "cached_tokens": 2,
                "prompt_audio_tokens": 0,
                "reasoning_tokens": 1,
                "completion_audio_tokens": 0,
            },
        ),
        (  # the images API's names, also under the chat ones
            {"input_tokens": 5, "output_tokens": 2, "input_tokens_details": {"image_tokens": 3}},
            {
                "input_tokens": 5,
                "output_tokens": 2,
                "image_tokens": 3,
                "prompt_tokens": 5,
                "completion_tokens": 2,
            },
        ),
        (  # a promoted name taken already: the later count keeps its section's prefix
            {
                "prompt_tokens_details": {"image_tokens": 2},
                "output_tokens_details": {"image_tokens": 5},
            },
            {"image_tokens": 2, "output_image_tokens": 5},
        ),
        (  # ... also when the top level has it
            {"cached_tokens": 9, "prompt_tokens_details": {"cached_tokens": 2}},
            {"cached_tokens": 9, "prompt_cached_tokens": 2},
        ),
        (  # what is not a count is left out: booleans, floats, nulls, other sections
            {
                "prompt_tokens": True,
                "note": None,
                "extra": {"a": 1},
                "prompt_tokens_details": {"cached_tokens": False, "audio_tokens": 1.5, "x": 2},
            },
            {"prompt_x": 2},
        ),
        ({}, None),
        ({"prompt_tokens_details": {}}, None),
        (None, None),
        ([1, 2], None),
    ],
)
def test_usage_is_flattened_to_token_counts(usage: object, flat: dict | None) -> None:
    from flownb.providers.openai.answers import usage_of

    for _ in range(2):  # a shape seen before is read as the first time
        assert usage_of(usage) == flat


def test_usage_of_one_shape_with_other_values_each_time() -> None:
    """Answers of the same top-level names, one after another: what the first held (a null
    section, sections of other names, values that are not counts) never decides how a later
    one is read."""
    from flownb.providers.openai.answers import usage_of

    answers = [
        ({"w_tokens": 1, "w_tokens_details": None}, {"w_tokens": 1}),
        (
            {"w_tokens": 1, "w_tokens_details": {"cached_tokens": 2}},
            {"w_tokens": 1, "cached_tokens": 2},
        ),
        (
            {"w_tokens": 1, "w_tokens_details": {"cached_tokens": 2, "audio_tokens": 3}},
            {"w_tokens": 1, "cached_tokens": 2, "w_audio_tokens": 3},
        ),
        (
            {"w_tokens": 1, "w_tokens_details": {"audio_tokens": 3}},
            {"w_tokens": 1, "w_audio_tokens": 3},
        ),
        ({"w_tokens": 1, "w_tokens_details": {"cached_tokens": True}}, {"w_tokens": 1}),
        ({"w_tokens": "1", "w_tokens_details": {"cached_tokens": 2}}, {"cached_tokens": 2}),
        ({"w_tokens": 1, "w_tokens_details": [2]}, {"w_tokens": 1}),
        (
            {"w_tokens": 4, "w_tokens_details": {"cached_tokens": 5}},
            {"w_tokens": 4, "cached_tokens": 5},
        ),
    ]
    for usage, flat in answers:
        got = usage_of(usage)
        assert got == flat
        assert list(got or ()) == list(flat)  # the names in the order the answer gave them
