"""Flow lint: ``flownb check`` and the warnings a flow file's load gives, once per file; an
empty flow refused everywhere."""

from __future__ import annotations

import inspect
import warnings
from pathlib import Path

import pytest
import requests

import flownb
from flownb.flowfile.lint import lint
from flownb.flowfile.model import parse_flow
from tests.cli_inprocess import CliResult, run_cli
from tests.conftest import FLOWS, make_flow, write_flow
from tests.serving import run_server


def codes(flow: dict) -> list[tuple[str, str]]:
    return [(f.level, f.code) for f in lint(parse_flow(flow))]


def check(*args: str) -> CliResult:
    return run_cli("check", *args)


def test_a_clean_flow_has_no_findings() -> None:
    assert lint(parse_flow(__import__("json").loads((FLOWS / "blog-intro.json").read_text()))) == []


def test_an_unknown_label_names_the_close_variable() -> None:
    findings = lint(parse_flow(make_flow({"o": "About {topc}, {tone}."}, ["topic", "tone"])))
    assert [(f.level, f.code) for f in findings] == [
        ("warning", "unknown_label"),
        ("warning", "unused_variable"),  # topic: the typo was its only use
    ]
    assert findings[0].message == (
        "node 'o': {topc} names no variable and is left as written; did you mean {topic}?"
    )
    assert "'topic'" in findings[1].message


def test_literal_braces_and_chained_node_names_are_not_labels() -> None:
    flow = make_flow(
        {"first": 'JSON {"k": 1}, a set {1, 2}, code { return x; }: {a}', "second": "{first}!"},
        ["a"],
        outputs={"out": ["second"]},
    )
    flow["edges"].append({"source": "node-first", "target": "node-second"})
    assert codes(flow) == []


def test_spaces_inside_braces_are_reported_with_the_fix() -> None:
    (finding,) = lint(parse_flow(make_flow({"o": "{a} and { a }"}, ["a"])))
    assert finding.code == "unknown_label" and "write {a}" in finding.message


def test_empty_prompt_unused_variable_unfed_output_and_no_outputs() -> None:
    flow = make_flow({"o": "  ", "p": "{a}"}, ["a", "b"], outputs={"o": ["o"], "none": []})
    assert codes(flow) == [
        ("error", "empty_prompt"),
        ("warning", "unfed_output"),
        ("warning", "unused_variable"),
    ]
    assert codes(make_flow({"o": "{a}"}, ["a"], outputs={})) == [("error", "no_outputs")]
    # A variable shown by an output directly is used.
    assert codes(make_flow({"o": "{a}"}, ["a", "b"], outputs={"o": ["o"], "b": ["b"]})) == []


def test_load_warns_once_per_file_at_the_callers_line_and_runs_as_written(
    tmp_path: Path,
) -> None:
    path = write_flow(tmp_path / "typo.json", make_flow({"o": "About {topc}."}, ["topic"]))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        line = inspect.currentframe().f_lineno + 1  # type: ignore[union-attr]
        flow = flownb.load_flow(path)
        flownb.load_flow(str(tmp_path / "." / "typo.json"))  # the same file: no second warning
    # Only flownb's own: whatever another test left for the collector to report (an unclosed
    # socket, a ResourceWarning) may be collected, and reported, while these are recorded.
    caught = [w for w in caught if not issubclass(w.category, ResourceWarning)]
    messages = [str(w.message) for w in caught]
    assert messages == [
        f"{path}: node 'o': {{topc}} names no variable and is left as written; "
        "did you mean {topic}?",
        f"{path}: variable 'topic' is used by no prompt or output: a run must supply it and "
        "ignores it",
    ]
    assert {(w.filename, w.lineno) for w in caught} == {(__file__, line)}
    assert flow.run(topic="owls")["o"] == "About {topc}."  # the contract: left as written


def test_check_exits_1_on_errors_0_with_warnings_printed(tmp_path: Path) -> None:
    typo = write_flow(tmp_path / "typo.json", make_flow({"o": "About {topc}."}, ["topic"]))
    res = check(str(typo))
    assert res.returncode == 0, res.stderr
    assert f"{typo}: warning: node 'o': {{topc}} names no variable" in res.stdout
    assert "did you mean {topic}?" in res.stdout
    blank = write_flow(tmp_path / "blank.json", make_flow({"o": ""}, []))
    res = check(str(blank), str(FLOWS / "blog-intro.json"))
    assert res.returncode == 1
    assert res.stdout.splitlines() == [
        f"{blank}: error: node 'o' has an empty prompt",
        f"{FLOWS / 'blog-intro.json'}: ok",
    ]
    none = write_flow(tmp_path / "none.json", make_flow({"o": "x"}, [], outputs={}))
    res = check(str(none))
    assert res.returncode == 1 and "error: the flow has no output node" in res.stdout
    res = check("abc123")
    assert res.returncode == 2 and "check takes a flow file" in res.stderr


def test_an_empty_flow_is_an_error_everywhere(tmp_path: Path) -> None:
    flows = tmp_path / "flows"
    flows.mkdir()
    empty = flows / "empty.json"
    empty.write_text('{"nodes": [], "edges": []}', encoding="utf-8")
    with pytest.raises(flownb.FlowFileError, match="the flow is empty: it has no nodes"):
        flownb.load_flow(empty)
    with pytest.raises(flownb.FlowFileError, match="the flow is empty"):
        flownb.load_flow({"nodes": []})
    res = check(str(empty))
    assert res.returncode == 1
    assert res.stdout.strip() == f"{empty}: error: the flow is empty: it has no nodes"
    for args in (["run", str(empty)], ["info", str(empty)]):
        res = run_cli(*args)
        assert res.returncode == 2 and res.stderr.strip().endswith(
            "the flow is empty: it has no nodes"
        )
    with run_server(flows, tmp_path / "home") as server:
        resp = requests.get(
            f"{server.url}/api/flows/getFlowInfo/empty",
            headers={"x-api-key": server.key},
            timeout=10,
        )
        assert resp.status_code == 500
        # A broken flow's details go to the server log, never into the answer (issue 20).
        assert resp.json()["message"] == "flow 'empty' cannot be loaded; see the server log"
