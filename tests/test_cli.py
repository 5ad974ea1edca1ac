"""The ``flownb`` command: in this process (``tests/cli_inprocess.py``, what the console script
runs, under click's ``CliRunner`` isolation), and as a user runs it, a subprocess, where only a
process proves it: the installed console script and Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from tests.cli_inprocess import CliResult, run_cli
from tests.conftest import DATA, FLOWS, make_flow, write_flow


def flownb(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> CliResult:
    return run_cli(*args, cwd=cwd, env=env)


def console_script(*args: str) -> subprocess.CompletedProcess[str]:
    """Run the installed ``flownb`` console script (next to this venv's python) as a user does."""
    script = Path(sys.executable).parent / "flownb"
    return subprocess.run(
        [str(script), *args], capture_output=True, text=True, timeout=120, env={**os.environ}
    )


def test_info_lists_variables_with_defaults_and_outputs(blog_flow_path: Path) -> None:
    res = flownb("info", str(blog_flow_path))
    assert res.returncode == 0, res.stderr
    assert "topic  (default: 'tide pools')" in res.stdout
    assert res.stdout.index("intro") < res.stdout.index("header_image")


def test_the_installed_console_script_runs_a_flow(blog_flow_path: Path) -> None:
    res = console_script("run", str(blog_flow_path), "--var", "topic=owls", "--var", "tone=dry")
    assert res.returncode == 0, res.stderr
    assert "Write a dry two-sentence intro for a blog post about owls." in res.stdout
    assert "offline" in res.stderr and "offline" not in res.stdout


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
    assert (
        "bad.json: the flow file is not JSON: malformed JSON" in res.stderr
        and "Traceback" not in res.stderr
    )


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


@pytest.mark.parametrize(
    "args",
    [
        ["--var", "dish"],
        ["--bogus"],
        ["--csv", "does-not-exist.csv"],
        ["--var", "topic=x", "--out", "x.txt"],
        ["--csv", "a.csv", "--json", "b.json"],
        ["--provider", "nope"],
        ["--var", "topic=a", "--var", "tpne=b"],
        ["--var", "topic=a", "--var", "topic=b", "--var", "tone=c"],
        ["--format", "csv"],
    ],
)
def test_usage_and_input_errors_are_one_line_exit_2_without_banner(
    blog_flow_path: Path, args: list[str]
) -> None:
    res = flownb("run", str(blog_flow_path), *args)
    assert res.returncode == 2, (args, res.stderr)
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("flownb: error: "), res.stderr
    assert res.stdout == ""


def test_input_error_names_every_problem_with_a_did_you_mean(blog_flow_path: Path) -> None:
    res = flownb("run", str(blog_flow_path), "--var", "topic=ramen", "--var", "tonee=dry")
    assert res.returncode == 2
    assert res.stderr == (
        "flownb: error: missing variable 'tone'; unknown variable 'tonee' (did you mean 'tone'?)\n"
    )


def test_csv_errors_give_command_line_advice(tmp_path: Path) -> None:
    path = write_flow(
        tmp_path / "f.json", make_flow({"o": "<{dish}|{diet}|{x}>"}, ["dish", "diet", "x"])
    )
    csv = tmp_path / "in.csv"
    csv.write_text("dish,food\nramen,\n")
    res = flownb("run", str(path), "--csv", str(csv), "--no-progress")
    assert res.returncode == 2
    assert "--map diet=COLUMN" in res.stderr and "'dish', 'food'" in res.stderr
    assert "columns=" not in res.stderr
    csv.write_text("dish,diet,x\nramen,,\n")
    res = flownb("run", str(path), "--csv", str(csv), "--no-progress")
    assert res.returncode == 2
    assert res.stderr.count('--fill ""') == 1 and "fill=''" not in res.stderr
    assert "variable 'diet'" in res.stderr and "variable 'x'" in res.stderr


def test_flow_id_without_a_server_or_key_gets_command_line_advice(tmp_path: Path) -> None:
    res = flownb("info", "abc123", cwd=tmp_path)
    assert res.returncode == 2
    assert "--base-url URL" in res.stderr and "base_url=" not in res.stderr
    res = flownb("info", "abc123", "--base-url", "http://127.0.0.1:9", cwd=tmp_path)
    assert res.returncode == 2
    assert "set FLOWNB_API_KEY" in res.stderr and "api_key=" not in res.stderr


def test_a_directory_as_flow_gets_its_own_error(tmp_path: Path) -> None:
    (tmp_path / "flows").mkdir()
    write_flow(tmp_path / "flows" / "f.json", make_flow({"o": "<{x}>"}, ["x"]))
    for flow in ("flows", str(tmp_path / "flows")):
        res = flownb("run", flow, "--var", "x=1", cwd=tmp_path)
        assert res.returncode == 2
        assert res.stderr.startswith("flownb: error: ") and "is a directory" in res.stderr
        assert "f.json" in res.stderr


def test_backslash_flow_is_a_path_as_in_the_magics(tmp_path: Path) -> None:
    res = flownb("info", "flows\\missing", cwd=tmp_path)
    assert res.returncode == 2
    assert "cannot read flow file" in res.stderr or "no such" in res.stderr.lower()
    assert "FLOWNB_BASE_URL" not in res.stderr


def test_base_url_option_and_unknown_flow_id_exits_2(flow_dir: Path, tmp_path: Path) -> None:
    from tests.serving import run_server

    with run_server(flow_dir, tmp_path / "server-home") as server:
        env = {"FLOWNB_API_KEY": server.key}
        res = flownb("info", "blog-intro", "--base-url", server.url, env=env)
        assert res.returncode == 0, res.stderr
        assert "topic" in res.stdout and "header_image" in res.stdout
        res = flownb(
            "run", "blog-intro", "--base-url", server.url, "--var", "topic=a", "--var",
            "tone=b", env=env,
        )  # fmt: skip
        assert res.returncode == 0, res.stderr
        assert "Write a b two-sentence intro for a blog post about a." in res.stdout
        res = flownb("run", "nope", "--base-url", server.url, "--var", "x=1", env=env)
        assert res.returncode == 2, res.stderr
        assert len(res.stderr.splitlines()) == 1


def test_single_run_with_out_writes_only_the_file(blog_flow_path: Path, tmp_path: Path) -> None:
    out = tmp_path / "one.json"
    res = flownb(
        "run", str(blog_flow_path), "--var", "topic=a/b", "--var", "tone=dry", "--out", str(out)
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout == ""
    text = out.read_text(encoding="utf-8")
    assert "a/b" in text and "\\/" not in text  # JSON does not escape '/'
    assert json.loads(text)[0]["topic"] == "a/b"


def test_out_dash_writes_json_or_csv_to_stdout(blog_flow_path: Path) -> None:
    csv = str(DATA / "topics.csv")
    res = flownb("run", str(blog_flow_path), "--csv", csv, "--out", "-", "--no-progress")
    assert res.returncode == 0, res.stderr
    rows = json.loads(res.stdout)
    assert [r["topic"] for r in rows] == pd.read_csv(DATA / "topics.csv")["topic"].tolist()
    assert "é" not in res.stdout or "\\u" not in res.stdout
    res = flownb(
        "run", str(blog_flow_path), "--csv", csv, "--out", "-", "--format", "csv", "--no-progress"
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[0] == "topic,tone,intro,header_image"
    res = flownb("run", str(blog_flow_path), "--var", "topic=ö/ü", "--var", "tone=x", "--out", "-")
    assert res.returncode == 0, res.stderr
    assert '"topic": "ö/ü"' in res.stdout


def test_use_defaults_fills_the_variables_not_given(blog_flow_path: Path) -> None:
    res = flownb("run", str(blog_flow_path), "--var", "tone=dry")
    assert res.returncode == 2 and "missing variable 'topic'" in res.stderr
    res = flownb("run", str(blog_flow_path), "--use-defaults", "--var", "tone=dry")
    assert res.returncode == 0, res.stderr
    assert "Write a dry two-sentence intro for a blog post about tide pools." in res.stdout


def test_ctrl_c_notice_is_one_clean_line(tmp_path: Path) -> None:
    from flownb.testing.fake_openai import FakeOpenAI

    data = tmp_path / "rows.csv"
    data.write_text("topic,tone\n" + "".join(f"t{i},dry\n" for i in range(30)))
    with FakeOpenAI(latency=0.2) as fake:
        env = {**os.environ, "OPENAI_BASE_URL": fake.url, "OPENAI_API_KEY": "sk-test"}
        cmd = [
            sys.executable, "-m", "flownb", "run", str(FLOWS / "blog-intro.json"), "--csv",
            str(data), "--provider", "openai", "--concurrency", "1", "--no-progress",
        ]  # fmt: skip
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 60
        while fake.stats().get("answered", 0) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    stderr = err.decode()
    assert proc.returncode == 130, stderr
    notices = [line for line in stderr.splitlines() if "interrupted" in line]
    assert len(notices) == 1, stderr
    assert notices[0].startswith("flownb: interrupted: ") and "rows finished" in notices[0]
    assert "Warning" not in stderr and ".py:" not in stderr


def test_input_error_lists_ten_problems_then_a_count(tmp_path: Path) -> None:
    path = write_flow(tmp_path / "f.json", make_flow({"o": "<{x}>"}, ["x"]))
    rows = tmp_path / "rows.json"
    rows.write_text(json.dumps([{"y": str(i)} for i in range(8)]))  # 16 problems
    res = flownb("run", str(path), "--json", str(rows))
    assert res.returncode == 2
    message = res.stderr.removeprefix("flownb: error: ").strip()
    parts = message.split("; ")
    assert parts[:2] == [
        "element 0: missing variable 'x'",
        "element 0: unknown variable 'y' (the flow's variables: 'x')",
    ]
    assert len(parts) == 11 and parts[-1] == "and 6 more problems"


def test_an_empty_fill_shows_and_writes_empty_text_not_nan(tmp_path: Path) -> None:
    path = write_flow(tmp_path / "f.json", make_flow({"o": "<{x}|{y}>"}, ["x", "y"]))
    csv = tmp_path / "in.csv"
    csv.write_text("x,y\n1,\n,2\n")
    res = flownb("run", str(path), "--csv", str(csv), "--fill", "", "--out", "-", "--no-progress")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout) == [
        {"x": "1", "y": "", "o": "<1|>"},
        {"x": "", "y": "2", "o": "<|2>"},
    ]
    res = flownb("run", str(path), "--csv", str(csv), "--fill", "", "--no-progress")
    assert res.returncode == 0 and "NaN" not in res.stdout and "<1|>" in res.stdout
    res = flownb("run", str(path), "--csv", str(csv), "--fill", "-", "--out", "-", "--no-progress")
    assert [row["y"] for row in json.loads(res.stdout)] == ["-", "2"]


def test_help_lists_each_command_with_its_whole_first_sentence() -> None:
    res = flownb("--help", env={"COLUMNS": "80"})
    assert res.returncode == 0
    commands = res.stdout.split("Commands:")[1]
    assert "..." not in commands
    text = " ".join(commands.split())
    for sentence in (
        "info Show a flow's variables and outputs (FLOW: a .json file or a flow id).",
        "keys Create, list and revoke the API keys `flownb serve` accepts (stored in FLOWNB_HOME).",
        "serve Serve the flows of a folder over HTTP, as the flow execution service does.",
        "check Check flow files for mistakes a valid graph can hold.",
    ):
        assert sentence in text, text
    assert max(len(line) for line in res.stdout.splitlines()) <= 80
    res = flownb("keys", "--help", env={"COLUMNS": "80"})
    commands = res.stdout.split("Commands:")[1]
    assert "..." not in commands and "starts with this prefix)." in " ".join(commands.split())
