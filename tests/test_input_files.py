"""Input files a user names (``--csv``, ``--json``, ``--data``, ``--scorers`` and the magics'
files) are read as flow files are: a regular file under a size cap (``FLOWNB_INPUT_MAX``), else
one clear line at once; ``/dev/zero`` and a FIFO with no writer are never read or waited on."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from IPython.core.error import UsageError

from flownb.config.settings import DEFAULT_INPUT_MAX, get_settings
from flownb.errors import ConfigError
from tests.cli_inprocess import CliResult, run_cli
from tests.test_magics import ip, magic  # noqa: F401  (the shell fixture)

# A FIFO with no writer, /dev/zero: a reader that waited or read on would never end; the
# timeout turns that into a failure instead of a hung suite.
pytestmark = pytest.mark.timeout(120)

SCORERS = {"scorers": [{"type": "contains", "output": {"col": "intro"}, "text": "owl"}]}


def _endless(tmp_path: Path) -> dict[str, Path]:
    """Paths no input may be read from: /dev/zero itself, a link to it, a FIFO nobody writes."""
    link = tmp_path / "zero.csv"
    link.symlink_to("/dev/zero")
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    return {"dev": Path("/dev/zero"), "link": link, "fifo": fifo}


def _one_line(res: CliResult, option: str, *words: str) -> str:
    assert res.returncode == 2, res.stderr
    lines = res.stderr.splitlines()
    assert len(lines) == 1, res.stderr
    assert "Traceback" not in res.stderr
    assert option in lines[0], lines[0]
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("option", ["--csv", "--json"])
def test_run_refuses_endless_inputs_at_once(
    blog_flow_path: Path, tmp_path: Path, option: str
) -> None:
    for path in _endless(tmp_path).values():
        res = run_cli("run", str(blog_flow_path), option, str(path), "--no-progress")
        _one_line(res, option, str(path), "not a regular file")


def test_eval_refuses_endless_data_and_scorers(blog_flow_path: Path, tmp_path: Path) -> None:
    scorers = tmp_path / "scorers.json"
    scorers.write_text(json.dumps(SCORERS))
    data = tmp_path / "rows.csv"
    data.write_text("topic,tone\nowls,dry\n")
    for path in _endless(tmp_path).values():
        res = run_cli("eval", str(blog_flow_path), "--data", str(path), "--scorers", str(scorers))
        _one_line(res, "--data", "not a regular file")
        res = run_cli("eval", str(blog_flow_path), "--data", str(data), "--scorers", str(path))
        _one_line(res, "--scorers", "not a regular file", str(path))


def test_a_file_over_the_cap_is_refused_unread_and_the_cap_is_settable(
    blog_flow_path: Path, tmp_path: Path
) -> None:
    rows = tmp_path / "rows.csv"
    rows.write_text("topic,tone\n" + "owls,dry\n" * 200)  # 1,811 bytes
    body = tmp_path / "rows.json"
    body.write_text(json.dumps([{"topic": "owls", "tone": "dry"}] * 100))
    small = {"FLOWNB_INPUT_MAX": "1K"}
    for option, path in (("--csv", rows), ("--json", body)):
        res = run_cli("run", str(blog_flow_path), option, str(path), "--no-progress", env=small)
        line = _one_line(res, option, f"{path.stat().st_size} bytes", "1024", "FLOWNB_INPUT_MAX")
        assert line.startswith("flownb: error: ")
        # The same file under a cap it fits: read and run.
        res = run_cli("run", str(blog_flow_path), option, str(path), "--no-progress", "--out", "-")
        assert res.returncode == 0, res.stderr
    scorers = tmp_path / "scorers.json"
    scorers.write_text(json.dumps(SCORERS))
    res = run_cli(
        "eval", str(blog_flow_path), "--data", str(rows), "--scorers", str(scorers), env=small
    )
    _one_line(res, "--data", "over the limit of 1024 bytes")
    res = run_cli(
        "eval", str(blog_flow_path), "--data", str(rows), "--scorers", str(body), env=small
    )
    _one_line(res, "--scorers", "over the limit of 1024 bytes")


def test_the_cap_setting_has_a_default_and_refuses_nonsense(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("FLOWNB_INPUT_MAX", raising=False)
    assert get_settings().input_max == DEFAULT_INPUT_MAX == 256 * 1024**2
    monkeypatch.setenv("FLOWNB_INPUT_MAX", "2G")
    assert get_settings().input_max == 2 * 1024**3
    for bad in ("lots", "0"):
        monkeypatch.setenv("FLOWNB_INPUT_MAX", bad)
        with pytest.raises(ConfigError, match="FLOWNB_INPUT_MAX must be a size"):
            get_settings()
    help_text = run_cli("run", "--help").stdout
    assert "FLOWNB_INPUT_MAX" in help_text and "256M" in help_text


@pytest.mark.parametrize(
    ("line", "option"),
    [
        (lambda p: f"%flow batch blog.json --df {p} --no-progress -q", "--df"),
        (lambda p: f"%flow eval blog.json --df {p} --scorers s.json", "--df"),
    ],
)
def test_the_magics_refuse_endless_inputs_at_once(
    ip: Any,  # noqa: F811  (the fixture imported above)
    tmp_path: Path,
    line: Callable[[str], str],
    option: str,
) -> None:
    (tmp_path / "s.json").write_text(json.dumps(SCORERS))
    fifo = tmp_path / "fifo.csv"
    os.mkfifo(fifo)
    link = tmp_path / "zero.csv"
    link.symlink_to("/dev/zero")
    for path in (fifo, link):
        with pytest.raises(UsageError, match="not a regular file") as caught:
            magic(ip, line(str(path)).removeprefix("%flow "))
        assert option in str(caught.value)


def test_the_eval_magic_refuses_an_endless_scorers_file(ip: Any, tmp_path: Path) -> None:  # noqa: F811
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    ip.user_ns["df"] = __import__("pandas").DataFrame({"topic": ["owls"], "tone": ["dry"]})
    with pytest.raises((UsageError, ConfigError), match="not a regular file"):
        magic(ip, f"eval blog.json --df df --scorers {fifo}")
