"""The flow, drawn: SVG and Mermaid pictures of a flow's graph (flow.to_svg, flow.to_mermaid,
the notebook bundle, ``flownb graph``)."""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import flownb
from flownb.graph import layout
from flownb.model import parse_flow
from tests.conftest import make_flow

SVG = "{http://www.w3.org/2000/svg}"


def _nodes(svg: str) -> dict[str, ET.Element]:
    root = ET.fromstring(svg)  # well-formed XML, or this raises
    return {g.get("data-id", ""): g for g in root.iter(f"{SVG}g") if "node" in g.get("class", "")}


def _texts(group: ET.Element) -> list[str]:
    return [t.text or "" for t in group.iter(f"{SVG}text")]


def test_every_node_and_edge_is_drawn(blog_flow_path: Path) -> None:
    flow = flownb.load_flow(blog_flow_path)
    svg = flow.to_svg()
    nodes = _nodes(svg)
    assert len(nodes) == len(flow.graph.nodes)
    assert len(ET.fromstring(svg).findall(f".//{SVG}path[@class='edge']")) == len(flow.graph.edges)
    shown = {text for g in nodes.values() for text in _texts(g)}
    assert {"topic", "= tide pools", "Blog intro", "text · gpt-4o-mini", "intro"} <= shown
    # The prompt is the generation node's tooltip.
    node = next(n for n in flow.graph.nodes if getattr(n.data, "name", "") == "Blog intro")
    title = nodes[node.id].find(f"{SVG}title")
    assert title is not None and title.text == node.data.prompt  # type: ignore[union-attr]


def test_mermaid_names_every_node_and_edge(blog_flow_path: Path) -> None:
    flow = flownb.load_flow(blog_flow_path)
    text = flow.to_mermaid()
    lines = text.splitlines()
    assert lines[0] == "flowchart LR"
    assert sum(" --> " in ln for ln in lines) == len(flow.graph.edges)
    assert any("Header art<br/>image · dall-e-3" in ln for ln in lines)


def test_a_chained_node_sits_right_of_the_node_that_feeds_it() -> None:
    data = make_flow({"outline": "Outline {topic}", "draft": "Draft from {outline}"}, ["topic"])
    data["edges"].append({"id": "chain", "source": "node-outline", "target": "node-draft"})
    boxes = {b.id: b for b in layout(parse_flow(data)).boxes}
    assert boxes["var-topic"].column == 0
    assert boxes["node-outline"].column == 1
    assert boxes["node-draft"].column == 2
    assert boxes["out-draft"].column == boxes["out-outline"].column == 3


def test_a_node_that_feeds_no_output_is_drawn_as_idle() -> None:
    data = make_flow({"used": "A {x}", "unused": "B {x}"}, ["x"], outputs={"o": ["used"]})
    graph = parse_flow(data)
    boxes = {b.id: b for b in layout(graph).boxes}
    assert boxes["node-used"].runs and not boxes["node-unused"].runs
    flow = flownb.load_flow(data)
    rect = _nodes(flow.to_svg())["node-unused"].find(f"{SVG}rect")
    assert rect is not None and rect.get("stroke-dasharray")
    assert "class n2 idle" in flow.to_mermaid()  # the third node in file order


def test_text_from_the_file_is_escaped_in_both_pictures() -> None:
    hostile = '<script>alert("x")</script>'
    data = make_flow({hostile: f"Say {{v}} {hostile}"}, ["v"], defaults={"v": hostile})
    flow = flownb.load_flow(data)
    root = ET.fromstring(flow.to_svg())
    assert not list(root.iter("script")) and not list(root.iter(f"{SVG}script"))
    assert "<script>" not in flow.to_svg()
    mermaid = flow.to_mermaid()
    assert "<script>" not in mermaid and '"x"' not in mermaid
    assert "#lt;script#gt;" in mermaid


def test_a_run_adds_time_to_the_nodes_that_ran(blog_flow_path: Path) -> None:
    flow = flownb.load_flow(blog_flow_path)
    result = flow.run(topic="owls", tone="dry")
    nodes = _nodes(flow.to_svg(result))
    ran = [n.id for n in flow.graph.nodes if n.type in ("actionNode", "imageNode")]
    for node_id in ran:
        notes = _texts(nodes[node_id])
        assert len(notes) == 3 and (notes[2].endswith(" s") or notes[2].startswith("cached"))
    assert all(len(_texts(nodes[n.id])) == 2 for n in flow.graph.nodes if n.id not in ran)


def test_the_notebook_view_is_the_picture_with_mermaid_and_text(blog_flow_path: Path) -> None:
    flow = flownb.load_flow(blog_flow_path)
    bundle = flow._repr_mimebundle_()
    assert bundle["image/svg+xml"].startswith("<svg")
    assert bundle["text/vnd.mermaid"].startswith("flowchart LR")
    assert "blog-intro" in bundle["text/plain"] and "variables" in bundle["text/markdown"]


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "flownb", *args], capture_output=True, text=True, cwd=cwd
    )


def test_flownb_graph_prints_mermaid_or_writes_svg(blog_flow_path: Path, tmp_path: Path) -> None:
    shown = _cli("graph", str(blog_flow_path), cwd=tmp_path)
    assert shown.returncode == 0 and shown.stdout.startswith("flowchart LR")
    out = tmp_path / "flow.svg"
    written = _cli("graph", str(blog_flow_path), "--svg", str(out), cwd=tmp_path)
    assert written.returncode == 0, written.stderr
    assert len(_nodes(out.read_text())) == 6
    missing = _cli("graph", str(tmp_path / "nope.json"), cwd=tmp_path)
    assert missing.returncode != 0 and len(missing.stderr.strip().splitlines()) == 1
