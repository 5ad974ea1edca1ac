"""The local flow API against the semantics of DESIGN.md section 1, with the offline provider
(and small recording providers where the test needs to see what ran)."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest
from PIL import Image

import flownb
from flownb.errors import BatchError, InputError
from tests.conftest import make_flow
from tests.providers_for_tests import EchoProvider


def test_run_substitutes_and_returns_outputs_in_node_order(blog_flow_path: Path) -> None:
    flow = flownb.load_flow(blog_flow_path)
    res = flow.run({"topic": "owls", "tone": "dry"})
    assert list(res) == ["intro", "header_image"]
    assert res["intro"] == "Write a dry two-sentence intro for a blog post about owls."
    assert res == {**res}  # a real dict
    assert res.provider == "offline"


def test_keyword_and_mapping_variables_combine() -> None:
    flow = flownb.load_flow(make_flow({"a": "{x}/{y}"}, ["x", "y"]))
    assert flow.run({"x": "1"}, y="2") == {"a": "1/2"}


def test_describe_lists_variables_then_outputs_each_in_node_order() -> None:
    data = make_flow({"b": "{z}{y}", "a": "{y}"}, ["z", "y"])
    # Put the output nodes first and a duplicate variable label at the end.
    data["nodes"] = data["nodes"][-2:] + data["nodes"][:-2]
    data["nodes"].append(
        {"id": "dup", "type": "variableNode", "data": {"variable": {"label": "z"}}}
    )
    flow = flownb.load_flow(data)
    assert flow.variables == ["z", "y"]
    assert flow.outputs == ["b", "a"]
    assert flow.describe() == [
        {"name": "z", "type": "variable"},
        {"name": "y", "type": "variable"},
        {"name": "b", "type": "output"},
        {"name": "a", "type": "output"},
    ]


def test_only_nodes_feeding_an_output_run() -> None:
    data = make_flow({"used": "U {x}", "unused": "N {x}"}, ["x"], outputs={"out": ["used"]})
    provider = EchoProvider()
    flow = flownb.load_flow(data, provider=provider)
    assert flow.run(x="1") == {"out": "text:U 1"}
    assert [c.prompt for c in provider.calls] == ["U 1"]


def test_output_fed_by_nothing_is_empty_and_by_several_is_joined_in_edge_order() -> None:
    data = make_flow(
        {"a": "A{x}", "b": "B{x}"}, ["x"], outputs={"none": [], "both": ["b", "a"], "x_too": ["x"]}
    )
    flow = flownb.load_flow(data)
    assert flow.run(x="!") == {"none": "", "both": "B!\n\nA!", "x_too": "!"}


def test_every_variable_substituted_in_every_prompt_even_without_an_edge() -> None:
    data = make_flow({"a": "{x} {y}"}, ["x", "y"])
    data["edges"] = [e for e in data["edges"] if e["source"] != "var-y"]
    assert flownb.load_flow(data).run(x="1", y="2") == {"a": "1 2"}


def test_all_variable_problems_reported_at_once() -> None:
    flow = flownb.load_flow(make_flow({"a": "{x}{y}{z}"}, ["x", "y", "z"]))
    with pytest.raises(InputError) as err:
        flow.run({"x": 1, "w": "?"})
    problems = {(p.code, p.variable) for p in err.value.problems}
    assert problems == {
        ("missing_variable", "y"),
        ("missing_variable", "z"),
        ("unknown_variable", "w"),
        ("invalid_variable_type", "x"),
    }
    assert "missing variable 'y'" in str(err.value)


def test_batch_is_validated_whole_before_anything_runs() -> None:
    provider = EchoProvider()
    flow = flownb.load_flow(make_flow({"a": "{x}"}, ["x"]), provider=provider)
    with pytest.raises(InputError) as err:
        flow.run_batch([{"x": "ok"}, {}, {"x": "ok", "extra": "1"}, "nope"])
    assert [(p.index, p.code) for p in err.value.problems] == [
        (1, "missing_variable"),
        (2, "unknown_variable"),
        (3, "invalid_request"),
    ]
    assert provider.calls == []


def test_batch_results_keep_input_order_and_empty_batch_is_empty() -> None:
    provider = EchoProvider(delay=0.001)
    flow = flownb.load_flow(make_flow({"a": "{x}"}, ["x"]), provider=provider, concurrency=7)
    rows = [{"x": str(i)} for i in range(60)]
    assert [r["a"] for r in flow.run_batch(rows)] == [f"text:{i}" for i in range(60)]
    assert flow.run_batch([]) == []


def test_run_batch_refuses_a_single_mapping() -> None:
    flow = flownb.load_flow(make_flow({"a": "{x}"}, ["x"]))
    with pytest.raises(TypeError, match="list of variable mappings"):
        flow.run_batch({"x": "1"})


def test_independent_nodes_of_one_run_execute_concurrently() -> None:
    provider = EchoProvider(delay=0.05)
    flow = flownb.load_flow(
        make_flow({"a": "{x}", "b": "{x}", "c": "{x}"}, ["x"]), provider=provider
    )
    flow.run(x="1")
    assert provider.peak == 3


def test_concurrency_limit_is_shared_by_elements_and_nodes_and_never_exceeded() -> None:
    provider = EchoProvider(delay=0.01)
    flow = flownb.load_flow(make_flow({"a": "{x}", "b": "{x}"}, ["x"]), provider=provider)
    flow.run_batch([{"x": str(i)} for i in range(30)], concurrency=5)
    assert provider.peak == 5
    assert len(provider.calls) == 60


def test_chained_nodes_run_in_order_with_upstream_output_substituted() -> None:
    data = make_flow(
        {"draft": "draft about {x}", "edit": "edit: {draft}"}, ["x"], outputs={"final": ["edit"]}
    )
    data["edges"].append({"id": "chain", "source": "node-draft", "target": "node-edit"})
    flow = flownb.load_flow(data, provider=EchoProvider())
    assert flow.run(x="owls") == {"final": "text:edit: text:draft about owls"}
    assert [s.name for s in flow.plan.steps] == ["draft", "edit"]


def test_run_works_inside_a_running_event_loop() -> None:
    flow = flownb.load_flow(make_flow({"a": "{x}"}, ["x"]), provider=EchoProvider())

    async def notebook_cell() -> dict:
        return flow.run(x="in a loop")  # sync call, as a Jupyter cell would make

    assert asyncio.run(notebook_cell()) == {"a": "text:in a loop"}


def test_async_api_runs_on_the_callers_loop() -> None:
    flow = flownb.load_flow(make_flow({"a": "{x}"}, ["x"]), provider=EchoProvider())
    assert asyncio.run(flow.arun(x="1")) == {"a": "text:1"}


def test_failed_elements_keep_the_others() -> None:
    provider = EchoProvider(fail_on="bad")
    flow = flownb.load_flow(make_flow({"a": "{x}"}, ["x"]), provider=provider)
    with pytest.raises(BatchError) as err:
        flow.run_batch([{"x": "good"}, {"x": "bad"}, {"x": "fine"}])
    assert [r and r["a"] for r in err.value.results] == ["text:good", None, "text:fine"]
    assert list(err.value.errors) == [1]
    assert "element 1" in str(err.value)


def test_single_run_failure_raises_the_provider_error() -> None:
    flow = flownb.load_flow(make_flow({"a": "{x}"}, ["x"]), provider=EchoProvider(fail_on="x"))
    with pytest.raises(flownb.ProviderError, match="model refused"):
        flow.run(x="x")


def _image_path(url: str) -> Path:
    assert url.startswith("file://")
    return Path(unquote(urlparse(url).path))


def test_offline_images_are_deterministic_pngs_in_flownb_home(
    blog_flow_path: Path, flownb_env: Path
) -> None:
    flow = flownb.load_flow(blog_flow_path)
    first = flow.run(topic="owls", tone="dry")
    again = flow.run(topic="owls", tone="dry")
    other = flow.run(topic="bats", tone="dry")
    assert first.is_image("header_image") and not first.is_image("intro")
    path = _image_path(first["header_image"])
    assert path.parent == flownb_env / "media"
    assert first["header_image"] == again["header_image"] != other["header_image"]
    with Image.open(path) as img:
        assert img.format == "PNG" and img.size[0] > 0
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    path.unlink()
    regenerated = _image_path(flow.run(topic="owls", tone="dry")["header_image"])
    assert hashlib.sha256(regenerated.read_bytes()).hexdigest() == digest


def test_result_displays_text_and_images(blog_flow_path: Path) -> None:
    res = flownb.load_flow(blog_flow_path).run(topic="owls", tone="dry")
    bundle = res._repr_mimebundle_()
    assert "owls" in bundle["text/plain"] and "header_image" in bundle["text/plain"]
    assert "data:image/png;base64," in bundle["text/html"]
    assert res.to_items()[0] == {"name": "intro", "output": res["intro"], "type": "output"}


def test_the_async_set_is_complete_on_local_and_remote_flows() -> None:
    import inspect

    for cls in (flownb.LocalFlow, flownb.RemoteFlow):
        for name in ("arun", "arun_batch", "arun_dataframe"):
            assert inspect.iscoroutinefunction(getattr(cls, name)), (cls, name)
        assert inspect.isasyncgenfunction(cls.astream), cls


def test_arun_dataframe_gives_what_run_dataframe_gives() -> None:
    import pandas as pd

    flow = flownb.load_flow(make_flow({"o": "<{x}>"}, ["x"]))
    df = pd.DataFrame({"x": ["a", None, "c"]}, index=[5, 7, 9])

    async def main() -> pd.DataFrame:
        return await flow.arun_dataframe(df, progress=False, fill="?")

    got = asyncio.run(main())
    assert got["o"].tolist() == ["<a>", "<?>", "<c>"]
    pd.testing.assert_frame_equal(got, flow.run_dataframe(df, progress=False, fill="?"))
