"""Cache keys are a stored format: every way flownb computes one (a call's, a column's, a node's)
gives the digest earlier releases gave for the same call, so the caches users already have keep
hitting. The digests below were computed by the former rule, SHA-256 over the node's prefix and
the prompt hashed together in one piece."""

from __future__ import annotations

from pathlib import Path

import pytest

import flownb
from flownb.providers.callplan import key_of, key_prefix, keys_of
from flownb.runtime.cache import CallCache
from tests.conftest import make_flow

IDENTITY = {"name": "openai", "base_url": "https://api.openai.com/v1"}
PARAMS = {"model": "gpt-4o-mini", "temperature": 0.7, "max_tokens": 64}
PROMPTS = ["Write a dry intro about tea.", "h\u00e9llo \u2713 \U0001f600", "lone \ud800 half"]
# By prompt: without a system message, then with "Be brief." and params {"model": ...} only.
PINNED = [
    "1d50c4c63221ec6aef9ff41324e575b8108c256e69c3f33c17cd423b8b37d5ff",
    "02b3edcc86408aafde48341197bbaba8f5f5c7426bbc14138f8007eb34eb7509",
    "ae7d0b1ebb08a250ed00f7465e4d5d3c81427807e4e0f2de4ab0277641935ac3",
]
PINNED_SYSTEM = [
    "e31f34adcd74e433f9824dab205ab13268e1df1392f5d84712322438a8f08bcc",
    "fe6462dee70c0c2f6d4e69bf2195f6056198b3998a198159d1189073171f8dba",
    "af39428c1ad7d359ce3c01598607503551746415affaeb9d8fc2ccd2b4cc89a8",
]
# A flow's node, through the OpenAI provider at its default endpoint, by prompt.
PINNED_NODE = [
    "ea16f4bcbe193cb8d174e71b8ccba2c6867d8edad807c75cfe376466669820d8",
    "fdf9fac3a2b51ed3c60fd0a52b0b5d4f307eb3ab142a1e7b631c8d00b5da0d36",
    "98ef09417f44b88a10212c153487594f782714ff8ccc3e0b18bcd7c492874992",
]


def test_keys_of_a_call_and_of_a_column_are_the_pinned_digests() -> None:
    prefix = key_prefix(IDENTITY, "text", PARAMS)
    with_system = key_prefix(IDENTITY, "text", {"model": "gpt-4o-mini"}, "Be brief.")
    assert [key_of(prefix, p) for p in PROMPTS] == PINNED
    assert [key_of(with_system, p) for p in PROMPTS] == PINNED_SYSTEM
    # A column: the same digests, None kept in its place, the prefix left as it was.
    assert keys_of(prefix, [PROMPTS[0], None, *PROMPTS[1:]]) == [PINNED[0], None, *PINNED[1:]]
    assert keys_of(prefix, PROMPTS) == PINNED  # again: the prefix's hash was not consumed
    assert CallCache.keys(with_system, PROMPTS) == PINNED_SYSTEM
    assert [CallCache.key(prefix, p) for p in PROMPTS] == PINNED


def test_a_nodes_keys_are_the_pinned_digests(
    flownb_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-sent")
    graph = make_flow({"A": "{topic}"}, ["topic"])
    for node in graph["nodes"]:
        if node["data"].get("name") == "A":
            node["data"]["modelParams"] = dict(PARAMS)
    flow = flownb.load_flow(graph, provider="openai")
    node = flow.engine.nodes[0]
    assert [node.key(p) for p in PROMPTS] == PINNED_NODE
    assert node.keys([None, *PROMPTS]) == [None, *PINNED_NODE]
    assert [node.key(p) for p in PROMPTS] == PINNED_NODE  # the node's hashed prefix unchanged
