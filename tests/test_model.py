"""Loading exported flows: editor fields ignored, invalid graphs refused with a clear error."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

import flownb
from flownb.errors import FlowFileError
from tests.conftest import make_flow, write_flow


def blog() -> dict:
    return json.loads(
        (Path(__file__).parent.parent / "notebooks/flows/blog-intro.json").read_text()
    )


def test_export_with_editor_fields_loads(blog_flow_path: Path) -> None:
    flow = flownb.load_flow(blog_flow_path)
    assert flow.variables == ["topic", "tone"]
    assert flow.outputs == ["intro", "header_image"]
    assert flow.defaults == {"topic": "tide pools", "tone": "playful"}
    assert flow.name == "blog-intro"


def test_flow_can_be_loaded_from_a_dict() -> None:
    flow = flownb.load_flow(make_flow({"a": "{x}"}, ["x"]))
    assert flow.run(x="1") == {"a": "1"}


def test_unknown_fields_anywhere_are_ignored() -> None:
    data = blog()
    data["owner"] = "someone"
    data["nodes"][0]["data"]["variable"]["extra"] = 1
    data["nodes"][2]["data"]["modelParams"]["seed"] = 7
    data["edges"][0]["animated"] = True
    flow = flownb.load_flow(data)
    assert flow.variables == ["topic", "tone"]


def test_null_default_and_prompt_are_empty() -> None:
    data = make_flow({"a": "{x}"}, ["x"])
    data["nodes"][0]["data"]["variable"]["value"] = None
    flow = flownb.load_flow(data)
    assert flow.defaults == {"x": ""}


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda d: d["nodes"][2].update(type="llmNode"), "unknown type 'llmNode'"),
        (lambda d: d["nodes"][2].pop("type"), "unknown type None"),
        (lambda d: d["edges"][0].update(target="nope"), "target 'nope', which is not a node"),
        (lambda d: d["edges"][0].update(source="ghost"), "source 'ghost', which is not a node"),
        (lambda d: d["nodes"][0]["data"].pop("variable"), "variableNode) is invalid"),
        (lambda d: d["nodes"][4]["data"].pop("name"), "outputNode) is invalid"),
        (lambda d: d["nodes"].append(copy.deepcopy(d["nodes"][0])), "used by more than one node"),
        (lambda d: d.pop("nodes"), "not a flow"),
        (lambda d: d["nodes"].append("oops"), "node #6 is not a JSON object"),
    ],
)
def test_invalid_graphs_are_refused_naming_the_problem(
    tmp_path: Path, mutate, expected: str
) -> None:
    data = blog()
    mutate(data)
    path = write_flow(tmp_path / "bad.json", data)
    with pytest.raises(FlowFileError) as err:
        flownb.load_flow(path)
    assert expected in str(err.value)
    assert str(path) in str(err.value)


def test_unknown_type_error_names_the_node(tmp_path: Path) -> None:
    data = blog()
    data["nodes"][2]["type"] = "llmNode"
    with pytest.raises(FlowFileError, match="0e3d83d8-25db-59fd-9a04-4d44487c2508"):
        flownb.load_flow(write_flow(tmp_path / "f.json", data))


def test_edge_error_names_the_edge(tmp_path: Path) -> None:
    data = blog()
    data["edges"][1]["target"] = "missing-node"
    with pytest.raises(FlowFileError, match=data["edges"][1]["id"]):
        flownb.load_flow(write_flow(tmp_path / "f.json", data))


def test_cycle_is_refused_naming_its_nodes(tmp_path: Path) -> None:
    data = make_flow({"a": "{x}", "b": "{x}"}, ["x"])
    data["edges"] += [
        {"id": "ab", "source": "node-a", "target": "node-b"},
        {"id": "ba", "source": "node-b", "target": "node-a"},
    ]
    with pytest.raises(FlowFileError, match=r"cycle: node-\w -> node-\w -> node-\w"):
        flownb.load_flow(write_flow(tmp_path / "f.json", data))


def test_self_loop_is_a_cycle() -> None:
    data = make_flow({"a": "{x}"}, ["x"])
    data["edges"].append({"id": "aa", "source": "node-a", "target": "node-a"})
    with pytest.raises(FlowFileError, match="cycle: node-a -> node-a"):
        flownb.load_flow(data)


def test_edges_into_variables_or_out_of_outputs_are_refused() -> None:
    data = make_flow({"a": "{x}"}, ["x"])
    data["edges"].append({"id": "bad", "source": "node-a", "target": "var-x"})
    with pytest.raises(FlowFileError, match="points into variable node"):
        flownb.load_flow(data)
    data = make_flow({"a": "{x}"}, ["x"])
    data["edges"].append({"id": "bad", "source": "out-a", "target": "node-a"})
    with pytest.raises(FlowFileError, match="leaves output node"):
        flownb.load_flow(data)


def test_malformed_json_names_file_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text('{"nodes": [\n  {"id": "a",,}\n]}')
    with pytest.raises(
        FlowFileError,
        match=r"broken\.json: the flow file is not JSON: malformed JSON at line 2 column",
    ):
        flownb.load_flow(path)


def test_missing_file_is_a_flow_error(tmp_path: Path) -> None:
    with pytest.raises(FlowFileError, match="no such flow file"):
        flownb.load_flow(tmp_path / "nope.json")


def test_flow_errors_are_flownb_errors() -> None:
    assert issubclass(FlowFileError, flownb.FlownbError)


def chain(n: int) -> dict:
    """Return a flow of ``n`` text nodes in a line, from variable x to one output."""
    nodes = [{"id": "v", "type": "variableNode", "data": {"variable": {"label": "x"}}}]
    edges = []
    prev = "v"
    for i in range(n):
        data = {"name": f"s{i}", "prompt": "{x}"}
        nodes.append({"id": f"a{i}", "type": "actionNode", "data": data})
        edges.append({"id": f"e{i}", "source": prev, "target": f"a{i}"})
        prev = f"a{i}"
    nodes.append({"id": "o", "type": "outputNode", "data": {"name": "out"}})
    edges.append({"id": "eo", "source": prev, "target": "o"})
    return {"nodes": nodes, "edges": edges}


def test_deep_chain_does_not_hit_the_recursion_limit() -> None:
    flow = chain(3000)
    flow["edges"].append({"id": "back", "source": "a2999", "target": "a0"})
    with pytest.raises(FlowFileError, match="cycle"):
        flownb.load_flow(flow)


def test_deep_acyclic_chain_plans_and_runs() -> None:
    flow = flownb.load_flow(chain(3000))
    assert len(flow.plan.levels) == 3000
    assert flow.run(x="deep") == {"out": "deep"}
