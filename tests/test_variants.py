# ruff: noqa: F811  (pytest fixtures imported from openai_fake are parameters here)
"""Flow variants (with_params / with_prompts) and traces (result.trace, run_dataframe trace=True):
the original is untouched, requests and cache keys follow the variant, every node's output is
reported."""

from __future__ import annotations

import json

import pandas as pd
import pytest

import flownb
from flownb.errors import ConfigError
from flownb.testing.fake_openai import FakeOpenAI
from tests.conftest import make_flow
from tests.openai_fake import fake, fake_server  # noqa: F401 (fixtures)

PROMPTS = {"intro": "Intro about {topic}.", "title": "Title about {topic}."}


def two_nodes() -> dict:
    return make_flow(PROMPTS, ["topic"])


def chained() -> dict:
    """topic -> draft -> polish -> output (polish uses draft's output as {draft})."""
    data = make_flow(
        {"draft": "Draft on {topic}.", "polish": "Polish: {draft}"},
        ["topic"],
        outputs={"final": ["polish"]},
    )
    data["edges"] = [e for e in data["edges"] if e["id"] != "e-topic-polish"]
    data["edges"].append({"id": "e-d-p", "source": "node-draft", "target": "node-polish"})
    return data


def test_with_params_everywhere_and_per_node_leaves_original_untouched() -> None:
    flow = flownb.load_flow(two_nodes())
    before = flow.graph.model_dump()
    warm = flow.with_params(temperature=0.9)
    one = flow.with_params({"title": {"temperature": 0.1, "seed": 7}})
    by_id = flow.with_params({"node-intro": {"max_tokens": 5}})
    assert [s.params for s in warm.plan.steps] == [{"model": "gpt-4o-mini", "temperature": 0.9}] * 2
    assert [s.params for s in one.plan.steps] == [
        {"model": "gpt-4o-mini"},
        {"model": "gpt-4o-mini", "temperature": 0.1, "seed": 7},
    ]
    assert by_id.plan.steps[0].params == {"model": "gpt-4o-mini", "max_tokens": 5}
    assert flow.graph.model_dump() == before
    assert [s.params for s in flow.plan.steps] == [{"model": "gpt-4o-mini"}] * 2
    # None removes a parameter.
    assert warm.with_params(temperature=None).plan.steps[0].params == {"model": "gpt-4o-mini"}


def test_with_prompts_replaces_prompt_with_same_template_rules() -> None:
    flow = flownb.load_flow(two_nodes())
    shout = flow.with_prompts({"intro": "LOUD {topic} {unknown}"})
    assert shout.run(topic="owls") == {"intro": "LOUD owls {unknown}", "title": "Title about owls."}
    assert flow.run(topic="owls")["intro"] == "Intro about owls."


def test_unknown_node_lists_the_choices() -> None:
    flow = flownb.load_flow(two_nodes())
    with pytest.raises(
        ConfigError, match=r"no generation node 'nope'.*'intro' \(id 'node-intro'\)"
    ):
        flow.with_params({"nope": {"temperature": 0}})
    with pytest.raises(ConfigError, match="'title'"):
        flow.with_prompts({"nope": "x"})
    with pytest.raises(ConfigError, match="invalid model parameters"):
        flow.with_params(temperature="hot")
    with pytest.raises(ConfigError, match="must be a string"):
        flow.with_prompts({"intro": 3})  # type: ignore[dict-item]


def test_variant_requests_and_cache_keys_differ(fake: FakeOpenAI) -> None:
    flow = flownb.load_flow(two_nodes())
    cold = flow.with_params({"intro": {"temperature": 0.0}})
    other = flow.with_prompts({"title": "Another title for {topic}."})
    for f in (flow, cold, other):
        f.run(topic="owls")
    # Three flows x two nodes: the shared calls (same prompt and params) come from the cache.
    bodies = [json.dumps(b, sort_keys=True) for b in fake.requests]
    assert len(bodies) == 4 and len(set(bodies)) == 4
    assert [b.get("temperature") for b in fake.requests] == [None, None, 0.0, None]
    fake.reset()
    again = [f.run(topic="owls") for f in (flow, cold, other)]
    assert fake.requests == []
    assert all(r.cached == {"intro", "title"} for r in again)


def test_trace_reports_every_node_including_intermediate() -> None:
    flow = flownb.load_flow(chained())
    res = flow.run(topic="owls")
    assert dict(res) == {"final": "Polish: Draft on owls."}
    assert res.trace == {"draft": "Draft on owls.", "polish": "Polish: Draft on owls."}


def test_run_dataframe_trace_adds_a_column_per_node(blog_flow_path) -> None:
    df = pd.DataFrame({"topic": ["owls", "bees"], "tone": ["dry", "warm"]})
    out = flownb.load_flow(blog_flow_path).run_dataframe(df, trace=True, progress=False)
    assert list(out.columns) == [
        "topic",
        "tone",
        "intro",
        "header_image",
        "Blog intro",
        "Header art",
    ]
    assert out["Blog intro"].tolist() == out["intro"].tolist()
    assert out["Header art"].str.startswith("file://").all()
    plain = flownb.load_flow(chained()).run_dataframe(df[["topic"]], trace=True, progress=False)
    assert plain["draft"].tolist() == ["Draft on owls.", "Draft on bees."]


def test_trace_through_the_async_provider(fake: FakeOpenAI) -> None:
    res = flownb.load_flow(chained()).run(topic="owls")
    assert res.trace == {
        "draft": "echo: Draft on owls.",
        "polish": "echo: Polish: echo: Draft on owls.",
    }


def test_global_and_per_node_params_combine_and_bad_calls_are_refused() -> None:
    flow = flownb.load_flow(two_nodes())
    both = flow.with_params({"intro": {"temperature": 0.1}}, max_tokens=9)
    assert [s.params for s in both.plan.steps] == [
        {"model": "gpt-4o-mini", "temperature": 0.1, "max_tokens": 9},
        {"model": "gpt-4o-mini", "max_tokens": 9},
    ]
    with pytest.raises(ConfigError, match="needs parameters"):
        flow.with_params()
    with pytest.raises(ConfigError, match="mapping of node name"):
        flow.with_prompts({})


def test_preview_of_a_chained_flow_uses_cached_upstream_outputs(fake: FakeOpenAI) -> None:
    flow = flownb.load_flow(chained())
    before = flow.preview([{"topic": "owls"}])
    assert before.n_calls == 2 and before.n_cached == 0
    assert before.calls["prompt"].tolist() == ["Draft on owls.", "Polish: «output of draft»"]
    flow.run(topic="owls")
    fake.reset()
    after = flow.preview({"topic": "owls"})
    assert after.n_calls == 0 and after.n_cached == 2
    assert after.calls["prompt"].tolist()[1] == "Polish: echo: Draft on owls."
    assert fake.requests == []


def test_trace_needs_a_local_flow() -> None:
    class Remote(flownb.BaseFlow):
        name = "remote"
        spec = flownb.load_flow(two_nodes()).spec
        outputs = ("intro",)

        def _execute(self, batch, on_result, concurrency) -> None:  # pragma: no cover
            raise AssertionError("must not run")

    with pytest.raises(ConfigError, match="trace=True needs a local flow"):
        Remote().run_dataframe(pd.DataFrame({"topic": ["x"]}), trace=True)
