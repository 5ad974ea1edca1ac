"""The flow, drawn: SVG and Mermaid pictures of a flow's graph (flow.to_svg, flow.to_mermaid,
the notebook bundle, ``flownb graph``)."""

# ruff: noqa: F811

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from genai_prices import Usage, calc_price

import flownb
from flownb.errors import ConfigError
from flownb.flowfile.drawing import layout
from flownb.flowfile.model import parse_flow
from flownb.runtime.result import RunResult
from flownb.testing.fake_openai import FakeOpenAI
from tests.cli_inprocess import CliResult, run_cli
from tests.conftest import make_flow
from tests.openai_fake import fake, fake_server  # noqa: F401 (fixtures)
from tests.providers_for_tests import EchoProvider
from tests.vendor_fakes import flow_with

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
    for node_id, gen in zip(ran, result.generations, strict=True):
        notes = _texts(nodes[node_id])
        # The inline (offline) path times each node too; offline calls are not priced.
        assert gen.latency > 0 and len(notes) == 3 and notes[2] == f"{gen.latency:.2f} s"
    assert all(len(_texts(nodes[n.id])) == 2 for n in flow.graph.nodes if n.id not in ran)
    assert result.to_svg().count('class="note"') == len(ran)


NOTE = re.compile(r"^(?P<s>\d+\.\d\d) s · (?P<tok>[\d,]+) tok · \$(?P<usd>0\.\d+)$")
CACHED = re.compile(r"^cached · (?P<tok>[\d,]+) tok · saved \$(?P<usd>0\.\d+)$")


def _notes(svg: str) -> dict[str, str]:
    """Return each node's note line (the third text of its box), by node id."""
    return {node_id: texts[2] for node_id, g in _nodes(svg).items() if len(texts := _texts(g)) > 2}


def test_a_runs_picture_has_each_nodes_time_tokens_and_cost(fake: FakeOpenAI) -> None:
    fake.configure(latency=0.15)
    data = flow_with({"A": {"model": "gpt-4o-mini"}, "B": {"model": "gpt-4o"}})
    flow = flownb.load_flow(data, name="priced")
    result = flow.run(topic="owls and other birds of the night")
    svg = result.to_svg()
    assert svg == flow.to_svg(result).replace(
        "<title>priced</title>", f"<title>{_title(svg)}</title>"
    )
    notes = _notes(svg)
    assert set(notes) == {"node-A", "node-B"}
    for node_id, model, gen in zip(
        ("node-A", "node-B"), ("gpt-4o-mini", "gpt-4o"), result.generations, strict=True
    ):
        found = NOTE.match(notes[node_id])
        assert found, notes[node_id]
        # The fake answers after 0.15 s; its usage: the prompt's words in, one more word out.
        assert float(found["s"]) >= 0.15 and found["s"] == f"{gen.latency:.2f}"
        words = len(f"{node_id[-1]} about owls and other birds of the night".split())
        assert int(found["tok"]) == 2 * words + 1 == gen.usage["total_tokens"]
        assert float(found["usd"]) == pytest.approx(_price(model, words, words + 1), rel=0.05)
    # The same run again: every node from the cache, with what it saved.
    again = flow.run(topic="owls and other birds of the night")
    for node_id, line in _notes(again.to_svg()).items():
        found = CACHED.match(line)
        assert found and found["usd"] == NOTE.match(notes[node_id])["usd"], line  # type: ignore[index]


def test_each_node_is_timed_on_its_own(tmp_path: Path) -> None:
    data = make_flow({"outline": "Outline {t}", "draft": "Draft {outline}"}, ["t"])
    data["edges"].append({"id": "chain", "source": "node-outline", "target": "node-draft"})
    flow = flownb.load_flow(data, provider=EchoProvider(delay=0.2))
    result = flow.run(t="owls")
    first, second = result.generations
    assert first.latency >= 0.2 and second.latency >= 0.2
    assert result.latency >= first.latency + second.latency  # one after the other, each its own
    lines = result.trace_picture().text.splitlines()
    # The echo provider reports no usage: no tokens, and a price nobody knows.
    assert lines == [f"outline: {first.latency:.2f} s · $?", f"draft: {second.latency:.2f} s · $?"]
    bundle = result.trace_picture()._repr_mimebundle_()
    assert set(bundle) == {"text/html", "image/svg+xml", "text/plain"}
    assert set(_notes(bundle["image/svg+xml"])) == {"node-outline", "node-draft"}
    assert bundle["image/svg+xml"] in bundle["text/html"]  # drawn inline by every front end


def _variable_details(svg: str) -> dict[str, str]:
    """Each variable box's title -> its detail line."""
    found = {}
    for g in ET.fromstring(svg).iter(f"{SVG}g"):
        if "variable" in (g.get("class") or "").split():
            texts = [t.text or "" for t in g.iter(f"{SVG}text")]
            found[texts[0]] = texts[1]
    return found


def test_the_run_picture_shows_that_runs_inputs_not_the_defaults() -> None:
    data = make_flow({"outline": "Outline {t} for {who}"}, ["t", "who"])
    for node in data["nodes"]:
        if node["type"] == "variableNode":
            node["data"]["variable"]["value"] = "the default"
    flow = flownb.load_flow(data, provider=EchoProvider())
    result = flow.run(t="owls <b>$5 & $7</b>", who="")
    assert result.inputs == {"t": "owls <b>$5 & $7</b>", "who": ""}
    details = _variable_details(result.trace_picture().svg)
    assert details == {"t": "= owls <b>$5 & $7</b>", "who": "(empty)"}
    assert _variable_details(flow.to_svg(result)) == details
    assert set(_variable_details(flow.to_svg()).values()) == {"= the default"}


def test_a_remote_run_has_no_picture_and_says_why() -> None:
    with pytest.raises(ConfigError, match="remote run reports only outputs"):
        RunResult({"out": "text"}, provider="remote").to_svg()


def _title(svg: str) -> str:
    return ET.fromstring(svg).findtext(f"{SVG}title") or ""


def _price(model: str, inp: int, out: int) -> float:
    usage = Usage(input_tokens=inp, output_tokens=out)
    return float(calc_price(usage, model, provider_id="openai").total_price)


def test_the_notebook_view_is_the_picture_with_mermaid_and_text(blog_flow_path: Path) -> None:
    flow = flownb.load_flow(blog_flow_path)
    bundle = flow._repr_mimebundle_()
    assert bundle["image/svg+xml"].startswith("<svg")
    assert bundle["text/vnd.mermaid"].startswith("flowchart LR")
    assert "blog-intro" in bundle["text/plain"]
    # JupyterLab ranks Markdown above SVG: no Markdown, the SVG inline in the HTML that wins.
    assert "text/markdown" not in bundle
    assert bundle["image/svg+xml"] in bundle["text/html"]
    assert "mathjax_ignore" in bundle["text/html"]


def _cli(*args: str, cwd: Path) -> CliResult:
    return run_cli(*args, cwd=cwd)


def test_flownb_graph_prints_mermaid_or_writes_svg(blog_flow_path: Path, tmp_path: Path) -> None:
    shown = _cli("graph", str(blog_flow_path), cwd=tmp_path)
    assert shown.returncode == 0 and shown.stdout.startswith("flowchart LR")
    out = tmp_path / "flow.svg"
    written = _cli("graph", str(blog_flow_path), "--svg", str(out), cwd=tmp_path)
    assert written.returncode == 0, written.stderr
    assert len(_nodes(out.read_text())) == 6
    missing = _cli("graph", str(tmp_path / "nope.json"), cwd=tmp_path)
    assert missing.returncode != 0 and len(missing.stderr.strip().splitlines()) == 1
