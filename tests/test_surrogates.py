# ruff: noqa: F811  (pytest fixtures imported from openai_fake are parameters here)
"""Lone surrogates (issue 38 item 5): text that is not valid Unicode.

A vendor's answer holding one (JSON's ``"\\ud800"``) is paid for once and kept, with U+FFFD in
its place and one notice, through the cache, the run log and the server; input holding one
(bytes a command line could not decode, a JSON escape in a batch file, a flow file's label or
output name) is refused with one line naming where."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import requests

import flownb
from flownb.testing.fake_openai import FakeOpenAI
from tests.cli_inprocess import run_cli
from tests.conftest import FLOWS, make_flow, write_flow
from tests.openai_fake import fake, fake_server  # noqa: F401 (fixtures)
from tests.serving import run_server

LONE = "owls \ud800 at night \udc80"
KEPT = "owls \ufffd at night \ufffd"
FLOW = make_flow({"said": "About {topic}."}, ["topic"])


def _notices(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if "not valid Unicode" in str(w.message)]


def test_an_answer_with_lone_surrogates_is_kept_once_and_logged(
    fake: FakeOpenAI, flownb_env: Path
) -> None:
    fake.configure(replies={"About owls": LONE})
    flow = flownb.load_flow(FLOW)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        rows = flow.run_batch([{"topic": "owls"}, {"topic": "owls."}, {"topic": "owls!"}])
    assert [r["said"] for r in rows] == [KEPT] * 3
    assert len(fake.requests) == 3
    assert len(_notices(caught)) == 1  # one notice, not one per answer
    # Stored: the run log holds the rows, and a re-run buys nothing.
    logged = flownb.runs()
    assert [o["said"] for o in logged["outputs"]] == [KEPT] * 3
    again = flow.run(topic="owls")
    assert again["said"] == KEPT and again.cached == {"said"}
    assert len(fake.requests) == 3
    # Streamed, the text shown as it arrives is the text kept.
    events = list(flownb.load_flow(FLOW).stream(topic="owls?"))
    text = "".join(e.delta or "" for e in events[:-1] if e.kind == "text")
    assert text == KEPT and events[-1]["said"] == KEPT


def test_the_server_answers_200_for_an_answer_with_a_lone_surrogate(
    fake: FakeOpenAI, flownb_env: Path, tmp_path: Path
) -> None:
    fake.configure(replies={"About owls": LONE})
    flows = tmp_path / "flows"
    flows.mkdir()
    write_flow(flows / "said.json", FLOW)
    with run_server(flows, tmp_path / "home", provider="openai", cache=True, log=True) as server:
        for _ in range(2):
            res = requests.post(
                f"{server.url}/api/flows/run/said",
                json={"variables": {"topic": "owls"}},
                headers={"x-api-key": server.key},
                timeout=60,
            )
            assert res.status_code == 200, res.text
            assert KEPT in json.dumps(res.json(), ensure_ascii=False)
    assert len(fake.requests) == 1  # the second request was served from the cache


def _argv_bytes(*args: bytes) -> subprocess.CompletedProcess[str]:
    """Run ``python -m flownb`` with ``args`` as raw bytes in argv (as a shell passes bytes
    that are not UTF-8: Python decodes them with surrogateescape)."""
    return subprocess.run(
        [sys.executable.encode(), b"-m", b"flownb", *args],
        capture_output=True,
        text=True,
        errors="backslashreplace",
        timeout=120,
    )


def test_command_line_bytes_that_are_not_utf8_are_refused_in_one_line(tmp_path: Path) -> None:
    flow = str(FLOWS / "blog-intro.json").encode()
    for args, option in (
        ((b"--var", b"topic=ab\xff", b"--var", b"tone=dry"), "--var"),
        ((b"--var", b"to\xffpic=ab", b"--var", b"tone=dry"), "--var"),
        (
            (
                b"--csv",
                str(FLOWS.parent / "data" / "ideas.csv").encode(),
                b"--map",
                b"topic=\xfe",
            ),
            "--map",
        ),
    ):
        res = _argv_bytes(b"run", flow, *args)
        assert res.returncode == 2, res.stderr
        assert "Traceback" not in res.stderr
        (line,) = res.stderr.splitlines()
        assert line.startswith(f"flownb: error: {option}: ") and "not UTF-8" in line, line


def test_batch_files_and_flow_files_with_lone_surrogates_are_refused_naming_where(
    tmp_path: Path,
) -> None:
    batch = tmp_path / "rows.json"
    batch.write_text('[{"topic": "ok", "tone": "dry"}, {"topic": "a\\ud800b", "tone": "dry"}]')
    res = run_cli("run", str(FLOWS / "blog-intro.json"), "--json", str(batch), "--no-progress")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    (line,) = res.stderr.splitlines()
    assert "--json" in line and "[1].topic" in line and "\\ud800" in line, line

    source = (FLOWS / "blog-intro.json").read_text(encoding="utf-8")
    for name, text, field in (
        ("label.json", source.replace('"label": "topic"', '"label": "to\\ud800pic"'), "label"),
        ("output.json", source.replace('"name": "intro"', '"name": "in\\udc80tro"'), "data.name"),
    ):
        path = tmp_path / name
        path.write_text(text)
        for command in (("info", str(path)), ("run", str(path), "--use-defaults")):
            res = run_cli(*command)
            assert res.returncode == 2, res.stderr
            (line,) = res.stderr.splitlines()
            assert "node '" in line and "not valid Unicode" in line and field in line, line
    with pytest.raises(flownb.FlowFileError, match="not valid Unicode"):
        flownb.load_flow(json.loads(source.replace('"name": "intro"', '"name": "in\\udc80tro"')))
