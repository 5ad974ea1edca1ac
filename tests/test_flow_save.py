# ruff: noqa: F811  (pytest fixtures imported from openai_fake are parameters here)
"""A flow saved back in the web tool's export format (``flow.save``), the chosen variant saved
(``report.choose(...).save``, ``flownb eval --save-choice``), and ``flownb diff``.

What is checked is the file itself, read back as JSON: an unchanged flow equals the file it came
from; a variant keeps every id, position and edge, carries its own model, parameters and prompts
in the nodes' own fields, and loads back with the same variables and outputs.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

import flownb
from flownb import scorers as S
from flownb.errors import ConfigError, FlowFileError
from flownb.testing.fake_openai import FakeOpenAI
from tests.cli_inprocess import run_cli
from tests.conftest import FLOWS, ROOT
from tests.openai_fake import fake, fake_server  # noqa: F401 (fixtures)

EXPORTS = [*sorted(FLOWS.glob("*.json")), ROOT.parent / "shared" / "examples" / "blog-intro.json"]
BLOG = FLOWS / "blog-intro.json"
TEXT_NODE = "Blog intro"


def _read(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def _editor_fields(data: dict) -> list:
    """Every node's id, type, position and size, and every edge, as the file has them."""
    keep = ("id", "type", "position", "positionAbsolute", "width", "height")
    return [{k: n.get(k) for k in keep} for n in data["nodes"]] + [data.get("edges")]


@pytest.mark.parametrize("path", [p for p in EXPORTS if p.exists()], ids=lambda p: p.name)
def test_an_unchanged_flow_saves_as_the_json_it_came_from(path: Path, tmp_path: Path) -> None:
    saved = flownb.load_flow(path).save(tmp_path / "out.json")
    assert _read(saved) == _read(path)


def test_a_variant_keeps_every_editor_field_and_carries_its_changes(tmp_path: Path) -> None:
    original = _read(BLOG)
    flow = flownb.load_flow(BLOG)
    variant = flow.with_model("gpt-4.1-mini").with_prompts({TEXT_NODE: "Three words on {topic}."})
    saved = _read(variant.save(tmp_path / "variant.json"))
    assert _editor_fields(saved) == _editor_fields(original)
    node = next(n for n in saved["nodes"] if n["data"].get("name") == TEXT_NODE)
    before = next(n for n in original["nodes"] if n["data"].get("name") == TEXT_NODE)
    assert node["data"]["prompt"] == "Three words on {topic}."
    assert node["data"]["modelParams"]["model"] == "gpt-4.1-mini"
    # Every other parameter as the file spelt it (an int stays an int), in the same order.
    rest = {k: v for k, v in before["data"]["modelParams"].items() if k != "model"}
    assert {k: v for k, v in node["data"]["modelParams"].items() if k != "model"} == rest
    assert list(node["data"]["modelParams"]) == list(before["data"]["modelParams"])
    assert [type(v) for v in node["data"]["modelParams"].values()] == [
        type(v) for v in before["data"]["modelParams"].values()
    ]
    # The web tool's note of which variables the prompt uses follows the new prompt.
    assert [v["label"] for v in node["data"]["variables"]] == ["topic"]
    assert "flownb" not in saved  # nothing the web tool's format lacks a field for
    again = flownb.load_flow(tmp_path / "variant.json")
    assert again.variables == flow.variables and again.outputs == flow.outputs
    assert again.run(topic="owls", tone="dry")["intro"] == "Three words on owls."
    # The original flow and its file are untouched.
    assert flow.save(tmp_path / "same.json").read_text() and _read(tmp_path / "same.json") == (
        original
    )


def test_params_set_and_removed_and_a_system_message_round_trip(tmp_path: Path) -> None:
    flow = flownb.load_flow(BLOG)
    variant = flow.with_params({TEXT_NODE: {"temperature": 0.2, "top_p": None, "seed": 7}})
    variant = variant.with_system({TEXT_NODE: "Answer in French; keep $5 and <b> as written."})
    saved = _read(variant.save(tmp_path / "v.json"))
    params = next(n for n in saved["nodes"] if n["data"].get("name") == TEXT_NODE)["data"][
        "modelParams"
    ]
    assert params["temperature"] == 0.2 and params["seed"] == 7 and "top_p" not in params
    text_id = next(n["id"] for n in saved["nodes"] if n["data"].get("name") == TEXT_NODE)
    assert saved["flownb"] == {"system": {text_id: "Answer in French; keep $5 and <b> as written."}}
    again = flownb.load_flow(tmp_path / "v.json")
    node = next(n for n in again.graph.nodes if n.id == text_id)
    assert node.data.system == "Answer in French; keep $5 and <b> as written."
    assert node.data.modelParams.as_dict() == variant.graph.nodes[2].data.modelParams.as_dict()
    # A second save of the loaded file is the same file: nothing drifts on a round trip.
    assert _read(again.save(tmp_path / "w.json")) == saved
    # Removing the message removes the extra field.
    assert "flownb" not in _read(again.with_system(None).save(tmp_path / "x.json"))


def test_a_bad_flownb_field_is_refused_naming_it(tmp_path: Path) -> None:
    data = _read(BLOG)
    with pytest.raises(FlowFileError, match=r"'flownb' field has unknown key\(s\) 'colour'"):
        flownb.load_flow({**data, "flownb": {"colour": "red"}})
    with pytest.raises(FlowFileError, match=r"flownb.system names 'nope'"):
        flownb.load_flow({**data, "flownb": {"system": {"nope": "x"}}})
    image_id = next(n["id"] for n in data["nodes"] if n["type"] == "imageNode")
    with pytest.raises(FlowFileError, match="not a text generation node"):
        flownb.load_flow({**data, "flownb": {"system": {image_id: "x"}}})
    with pytest.raises(FlowFileError, match=r"flownb\.endpoint must be"):
        flownb.load_flow({**data, "flownb": {"endpoint": ""}})


def test_the_endpoint_is_saved_by_name_and_runs_there_again(
    fake: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KEY_NEAR", "sk-test-near")
    (tmp_path / "flownb.toml").write_text(
        f'[endpoints.near]\nprovider = "openai"\nbase_url = "{fake.url}"\n'
        'api_key_env = "KEY_NEAR"\n'
    )
    flow = flownb.load_flow(BLOG, endpoint="near", cache=False).with_model("gpt-4o-mini")
    saved = _read(flow.save(tmp_path / "chosen.json"))
    assert saved["flownb"] == {"endpoint": "near"}
    assert "sk-test-near" not in json.dumps(saved) and fake.url not in json.dumps(saved)
    again = flownb.load_flow(tmp_path / "chosen.json", cache=False)
    assert again.endpoint is not None and again.endpoint.name == "near"
    again.run(topic="owls", tone="dry")
    assert fake.received and fake.received[-1]["headers"]["Authorization"] == (
        "Bearer sk-test-near"
    )
    # An explicit choice at load wins over the file's.
    assert flownb.load_flow(tmp_path / "chosen.json", provider="offline").endpoint is None
    # endpoint=False leaves it out.
    assert "flownb" not in _read(flow.save(tmp_path / "plain.json", endpoint=False))


def test_an_endpoint_no_flownb_toml_declares_is_refused_at_save(
    fake: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    ad_hoc = flownb.Endpoint("scratch", "openai", base_url=fake.url, api_key="sk-test-literal")
    flow = flownb.load_flow(BLOG, endpoint=ad_hoc)
    with pytest.raises(ConfigError, match=r"endpoint 'scratch', which no flownb.toml declares"):
        flow.save(tmp_path / "x.json")
    assert not (tmp_path / "x.json").exists()
    saved = flow.save(tmp_path / "x.json", endpoint=False).read_text()
    assert "sk-test-literal" not in saved


# -- the chosen variant --------------------------------------------------------------------------


def _evaluated(tmp_path: Path) -> tuple[flownb.LocalFlow, object]:
    flow = flownb.load_flow(BLOG)
    variants = {
        "long": flow,
        "short": flow.with_prompts({TEXT_NODE: "owls {topic} {tone}"}),
    }
    data = pd.DataFrame({"topic": ["a", "b", "c", "d"], "tone": ["x"] * 4})
    check = S.contains("intro", "owls")  # only the short variant's prompt says it
    return variants["short"], flownb.evaluate(variants, data, [check], progress=False)


def test_the_choice_gives_the_chosen_flow_and_saves_it(tmp_path: Path) -> None:
    short, report = _evaluated(tmp_path)
    choice = report.choose(min_quality=0.3)  # type: ignore[attr-defined]
    assert choice.variant == "short"
    assert choice.flow.graph is short.graph  # the very variant the evaluation ran
    assert _read(choice.save(tmp_path / "choice.json")) == short.export()
    # Read back later, the report still knows the flow it chose.
    later = flownb.load_report(report.id)  # type: ignore[attr-defined]
    again = later.choose(min_quality=0.3)
    assert _read(again.save(tmp_path / "later.json")) == short.export()
    nothing = report.choose(min_quality=0.99)  # type: ignore[attr-defined]
    assert nothing.variant is None and nothing.flow is None
    with pytest.raises(ConfigError, match="nothing to save: No variant meets the bars"):
        nothing.save(tmp_path / "none.json")


def test_flownb_eval_save_choice(tmp_path: Path) -> None:
    short = tmp_path / "short.json"
    flownb.load_flow(BLOG).with_prompts({TEXT_NODE: "owls {topic} {tone}"}).save(short)
    (tmp_path / "data.csv").write_text("topic,tone\na,x\nb,x\nc,x\n")
    (tmp_path / "checks.toml").write_text(
        '[[scorers]]\ntype = "contains"\noutput = "intro"\ntext = "owls"\n'
    )
    args = ["eval", f"long={BLOG}", f"short={short}", "--data", str(tmp_path / "data.csv")]
    args += ["--scorers", str(tmp_path / "checks.toml"), "--no-progress"]
    out = tmp_path / "chosen.json"
    result = run_cli(*args, "--min-quality", "0.2", "--save-choice", str(out), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "Choose short" in result.stdout
    assert _read(out) == _read(short)
    none = run_cli(*args, "--min-quality", "0.99", "--save-choice", str(tmp_path / "n.json"))
    assert none.returncode == 1 and "nothing written" in none.stderr
    assert not (tmp_path / "n.json").exists()
    bad = run_cli(*args, "--min-quality", "0.5")
    assert bad.returncode == 2 and "go with --save-choice" in bad.stderr


# -- flownb diff ---------------------------------------------------------------------------------


def test_flownb_diff_says_what_differs_in_words(tmp_path: Path) -> None:
    flow = flownb.load_flow(BLOG)
    a = flow.save(tmp_path / "a.json")
    b = (
        flow.with_model({TEXT_NODE: "gpt-4.1-mini"})
        .with_params({TEXT_NODE: {"temperature": 0.1, "top_p": None}})
        .with_prompts({TEXT_NODE: "Hi {topic}"})
        .save(tmp_path / "b.json")
    )
    same = run_cli("diff", str(a), str(a))
    assert same.returncode == 0 and "no differences" in same.stdout
    moved = _read(a)
    moved["nodes"][0]["position"] = {"x": 999, "y": 999}  # an editor field only
    (tmp_path / "moved.json").write_text(json.dumps(moved))
    assert run_cli("diff", str(a), str(tmp_path / "moved.json")).returncode == 0
    result = run_cli("diff", str(a), str(b))
    assert result.returncode == 1
    lines = result.stdout.splitlines()[2:]
    assert lines == [
        "text node 'Blog intro': prompt: 'Write a {tone} two-sentence intro for a blog post "
        "about {topic}.' -> 'Hi {topic}'",
        "text node 'Blog intro': model 'gpt-4o-mini' -> 'gpt-4.1-mini'",
        "text node 'Blog intro': parameter temperature 0.7 -> 0.1",
        "text node 'Blog intro': parameter top_p 1.0 -> unset",
    ]


def test_flownb_diff_names_nodes_added_and_removed_and_joins(tmp_path: Path) -> None:
    data = _read(BLOG)
    image = next(n for n in data["nodes"] if n["type"] == "imageNode")
    fewer = {
        **data,
        "nodes": [n for n in data["nodes"] if n is not image],
        "edges": [e for e in data["edges"] if image["id"] not in (e["source"], e["target"])],
    }
    (tmp_path / "a.json").write_text(json.dumps(data))
    (tmp_path / "b.json").write_text(json.dumps(fewer))
    result = run_cli("diff", str(tmp_path / "a.json"), str(tmp_path / "b.json"))
    assert result.returncode == 1
    assert "removed image node 'Header art'" in result.stdout
    assert "no longer joined: image node 'Header art' -> output 'header_image'" in result.stdout
    back = run_cli("diff", str(tmp_path / "b.json"), str(tmp_path / "a.json"))
    assert "added image node 'Header art'" in back.stdout
    assert "newly joined: variable 'topic' -> image node 'Header art'" in back.stdout
    (tmp_path / "bad.json").write_text("{}")
    bad = run_cli("diff", str(tmp_path / "a.json"), str(tmp_path / "bad.json"))
    assert bad.returncode == 2 and "bad.json" in bad.stderr
