"""The ``flownb`` console script, run as a user runs it: a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd

from tests.conftest import DATA, make_flow, write_flow


def flownb(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "flownb", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env=os.environ.copy(),
    )


def test_info_lists_variables_with_defaults_and_outputs(blog_flow_path: Path) -> None:
    res = flownb("info", str(blog_flow_path))
    assert res.returncode == 0, res.stderr
    assert "topic  (default: 'tide pools')" in res.stdout
    assert res.stdout.index("intro") < res.stdout.index("header_image")


def test_single_run_prints_each_output_and_an_offline_banner(blog_flow_path: Path) -> None:
    res = flownb("run", str(blog_flow_path), "--var", "topic=owls at dusk", "--var", "tone=dry")
    assert res.returncode == 0, res.stderr
    assert "Write a dry two-sentence intro for a blog post about owls at dusk." in res.stdout
    assert "header_image" in res.stdout and "file://" in res.stdout
    assert "offline" in res.stderr and "offline" not in res.stdout


def test_values_may_hold_equals_signs(tmp_path: Path) -> None:
    path = write_flow(tmp_path / "f.json", make_flow({"o": "[{x}]"}, ["x"]))
    res = flownb("run", str(path), "--var", "x=a=b")
    assert "[a=b]" in res.stdout


def test_missing_variable_exits_2_with_one_line(blog_flow_path: Path) -> None:
    res = flownb("run", str(blog_flow_path), "--var", "topic=owls", "--var", "mood=x")
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert lines[-1].startswith("flownb: error:")
    assert "missing variable 'tone'" in lines[-1] and "unknown variable 'mood'" in lines[-1]
    assert "Traceback" not in res.stderr


def test_invalid_flow_file_exits_2_naming_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    res = flownb("info", str(bad))
    assert res.returncode == 2
    assert "bad.json: malformed JSON" in res.stderr and "Traceback" not in res.stderr


def test_csv_batch_to_csv_and_json_outputs(blog_flow_path: Path, tmp_path: Path) -> None:
    source = pd.read_csv(DATA / "topics.csv")
    for ext in ("csv", "json"):
        out = tmp_path / f"out.{ext}"
        res = flownb(
            "run", str(blog_flow_path), "--csv", str(DATA / "topics.csv"), "--out", str(out)
        )
        assert res.returncode == 0, res.stderr
        assert res.stdout == ""  # results went to the file; progress and notes to stderr
        assert f"{len(source)}/{len(source)}" in res.stderr
        got = pd.read_csv(out) if ext == "csv" else pd.DataFrame(json.loads(out.read_text()))
        assert list(got.columns) == ["topic", "tone", "intro", "header_image"]
        assert got["intro"].tolist() == [
            f"Write a {tone} two-sentence intro for a blog post about {topic}."
            for topic, tone in zip(source["topic"], source["tone"], strict=True)
        ]


def test_csv_batch_prints_a_table(blog_flow_path: Path) -> None:
    res = flownb("run", str(blog_flow_path), "--csv", str(DATA / "topics.csv"), "--no-progress")
    assert res.returncode == 0, res.stderr
    header = res.stdout.splitlines()[0].split()
    assert header == ["topic", "tone", "intro", "header_image"]


def test_json_batch_and_request_body_forms(tmp_path: Path) -> None:
    path = write_flow(tmp_path / "f.json", make_flow({"o": "<{x}>"}, ["x"]))
    rows = tmp_path / "rows.json"
    for payload in ([{"x": "1"}, {"x": "2"}], {"variables": [{"x": "1"}, {"x": "2"}]}):
        rows.write_text(json.dumps(payload))
        out = tmp_path / "o.json"
        res = flownb("run", str(path), "--json", str(rows), "--out", str(out))
        assert res.returncode == 0, res.stderr
        assert [r["o"] for r in json.loads(out.read_text())] == ["<1>", "<2>"]


def test_json_batch_is_validated_whole(tmp_path: Path) -> None:
    path = write_flow(tmp_path / "f.json", make_flow({"o": "<{x}>"}, ["x"]))
    rows = tmp_path / "rows.json"
    rows.write_text(json.dumps([{"x": "1"}, {"y": "2"}, {"x": 3}]))
    res = flownb("run", str(path), "--json", str(rows))
    assert res.returncode == 2
    for fragment in ("element 1: missing variable 'x'", "element 2: variable 'x' must be"):
        assert fragment in res.stderr


def test_empty_csv_cells_are_refused_unless_filled(tmp_path: Path) -> None:
    path = write_flow(tmp_path / "f.json", make_flow({"o": "<{x}|{y}>"}, ["x", "y"]))
    csv = tmp_path / "in.csv"
    csv.write_text("x,y\n1,NA\n2,\n")
    res = flownb("run", str(path), "--csv", str(csv), "--no-progress")
    assert res.returncode == 2 and "index 1" in res.stderr
    res = flownb("run", str(path), "--csv", str(csv), "--fill", "?", "--no-progress")
    assert res.returncode == 0 and "<1|NA>" in res.stdout and "<2|?>" in res.stdout


def test_map_takes_a_variable_from_another_column(tmp_path: Path) -> None:
    path = write_flow(tmp_path / "f.json", make_flow({"o": "<{x}>"}, ["x"]))
    csv = tmp_path / "in.csv"
    csv.write_text("Column X\nhello\n")
    res = flownb("run", str(path), "--csv", str(csv), "--map", "x=Column X", "--no-progress")
    assert res.returncode == 0 and "<hello>" in res.stdout


def test_usage_errors_exit_2(blog_flow_path: Path) -> None:
    for args in (
        ["run", str(blog_flow_path), "--var", "novalue"],
        ["run", str(blog_flow_path), "--csv", "a.csv", "--json", "b.json"],
        ["run", str(blog_flow_path), "--var", "topic=x", "--out", "x.txt"],
        ["run", str(blog_flow_path), "--csv", "does-not-exist.csv"],
        ["run", str(blog_flow_path), "--provider", "nope"],
    ):
        res = flownb(*args)
        assert res.returncode == 2, (args, res.stderr)
        assert "Traceback" not in res.stderr
