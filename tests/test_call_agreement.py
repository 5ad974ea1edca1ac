"""What a call is, asked of every path: the prompt and cache key the row path's runner makes are
the ones the bulk lookahead, the preview, the batch API's two passes and the cache's own key
functions make, on generated prompts, values, parameters and system messages. Each path is
observed by what it does with a stored answer (finds it, counts it cached, sends nothing for
it), not by its internals, so a path keying differently fails here."""

# ruff: noqa: F811

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import flownb
from flownb.frames.batch_api.assemble import FromBatches
from flownb.frames.batch_api.run import _calls, _Table
from flownb.providers.base import Generation
from flownb.runtime.cache import CallCache
from flownb.runtime.lookahead import Lookahead
from flownb.testing.fake_openai import FakeOpenAI
from tests.conftest import make_flow
from tests.openai_fake import fake, fake_server  # noqa: F401 (fixtures)

_plain = st.text(
    st.characters(blacklist_characters="{}", blacklist_categories=("Cs",)), max_size=40
)


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    before=_plain,
    after=_plain,
    value=st.text(st.characters(blacklist_categories=("Cs",)), max_size=60),
    temperature=st.none() | st.floats(0, 2, allow_nan=False).map(lambda t: round(t, 2)),
    max_tokens=st.none() | st.integers(1, 4096),
    system=st.none() | _plain,
)
def test_every_path_makes_the_same_prompt_and_key(
    fake: FakeOpenAI,
    before: str,
    after: str,
    value: str,
    temperature: float | None,
    max_tokens: int | None,
    system: str | None,
) -> None:
    graph = make_flow({"A": f"{before}{{topic}}{after}"}, ["topic"])
    params: dict[str, object] = {"model": "gpt-4o-mini"}
    if temperature is not None:
        params["temperature"] = temperature
    if max_tokens is not None:
        params["max_tokens"] = max_tokens
    for node in graph["nodes"]:
        if node["data"].get("name") == "A":
            node["data"]["modelParams"] = params
    flow = flownb.load_flow(graph, name="agree")
    if system is not None:
        flow = flow.with_system(system)
    engine, step = flow.engine, flow.plan.steps[0]
    cache = engine.cache
    assert cache is not None
    values = {"topic": value}
    node = engine.nodes[0]
    prompt = engine._prompt(step, values)  # the row path's rendering
    assert prompt == f"{before}{value}{after}"
    key = node.key(prompt)
    legacy = CallCache.prefix(flow.provider.identity(), step.kind, step.params, step.system)
    assert key == CallCache.key(legacy, prompt) == CallCache.keys(legacy, [prompt])[0]
    answer = f"answer for {key}"
    cache.put(key, Generation(answer, model="gpt-4o-mini", usage={"prompt_tokens": 1}, cost=0.0))

    # The row path: the runner answers the call from the cache.
    runner = engine._runner(1)
    hit = runner.hit(node.call(prompt))
    assert hit is not None and hit.output == answer
    # The bulk path: the lookahead renders the column and finds the same answer.
    chunk = Lookahead(flow.plan.steps, engine.limits, flow.provider, [values], cache, runner).chunk(
        0
    )
    assert chunk.prompts[0][0] == prompt
    assert chunk.gens[0][0] is not None and chunk.gens[0][0].output == answer
    # The preview (and dry run): the call is counted as cached, with the same prompt.
    calls = flow.preview([values]).calls
    assert calls["prompt"].tolist() == [prompt] and calls["cached"].tolist() == [True]
    # The batch API's first pass sends nothing for it; its final pass finds it by the same key.
    table = _Table(1, 1)
    assert _calls(flow.plan, flow.provider, cache, [values], table) == {}
    assert table.keys[0][0] == key and table.gens[0][0] is not None
    final = FromBatches(flow.provider, cache, {key: (410, "gone")})
    assert final.reason_of(node.call(prompt)) == (410, "gone")
    # Another prompt is another call.
    assert key != node.key(prompt + " ")
