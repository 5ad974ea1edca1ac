"""The OpenAI Batch API's request lines made in bulk (OpenAIBatches.lines, each call's key and
prompt spliced into its node's line) are byte for byte the lines made one at a time
(OpenAIBatches.line), for chat and completion models, with and without a system message, and
for prompts that show images, quote, escape or hold the placeholders' own characters."""

from __future__ import annotations

import hashlib

import pytest

import flownb
from flownb.providers.base import Call
from tests.conftest import make_flow

PROMPTS = [
    "Plain words.",
    'Quotes " and \\ backslashes, \n newlines, tabs\t and émoji 🦉',
    "\x00flownb prompt\x00 and \x00flownb key\x00 inside",
    "An image: [[flownb-image:https://example.com/owl.png]] and words",
    "",
]
NODES = [
    ({"model": "gpt-4o-mini", "temperature": 0.2, "max_tokens": 50}, None),
    ({"model": "gpt-4o-mini"}, "Answer in one line."),
    ({"model": "gpt-3.5-turbo-instruct", "max_tokens": 20}, None),
    ({"model": "gpt-3.5-turbo-instruct"}, "Be brief."),
]


def test_lines_in_bulk_equal_lines_one_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLOWNB_PROVIDER", "openai")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")  # nothing is sent
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    api = flownb.load_flow(make_flow({"n": "{x}"}, ["x"])).provider.batch_api()
    calls = [
        (
            hashlib.sha256(f"{n}-{p}".encode()).hexdigest(),
            Call("text", prompt, params, f"n{n}", system),
        )
        for n, (params, system) in enumerate(NODES)
        for p, prompt in enumerate(PROMPTS)
        if "image" not in prompt or "instruct" not in params["model"]  # refused: no images there
    ]
    bulk = list(api.lines(calls))
    assert bulk == [api.line(key, call) for key, call in calls]
    assert {endpoint for endpoint, _, _ in bulk} == {"/chat/completions", "/completions"}
    # The splice is what runs wherever the prompt is a whole string of the line (not the
    # one-at-a-time fallback for all): every node but a completion model's with a system message.
    spliced = [api._frame(call) is not None for _, call in calls]
    assert spliced == [c.system is None or "instruct" not in c.params["model"] for _, c in calls]
