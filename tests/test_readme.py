"""README's code blocks run as written, offline, so the README cannot drift from the code.

- ```python blocks run in order in one IPython shell (so ``%flow`` magics work too), sharing one
  namespace, in a temporary folder holding a copy of ``notebooks/`` (flows and data), with
  FLOWNB_HOME in a temporary folder.
- ```bash / ```shell blocks whose first command starts with ``flownb `` run each command in this
  process (``tests/cli_inprocess.run_cli``, what the console script runs) in that folder and
  must exit 0. Other shell blocks (``pip install``, ``bash scripts/test``, ``export ...``) are
  set-up steps, not flownb usage.
- A block preceded by ``<!-- readme-test: skip -->`` is not run: only for blocks that need an
  OpenAI key or a running server.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.cli_inprocess import run_cli
from tests.conftest import ROOT

README = ROOT / "README.md"
SKIP = "<!-- readme-test: skip -->"
_FENCE = re.compile(r"^```(\w*)\s*$")


@dataclass
class Block:
    """One fenced code block of README: its language, first line number, text, skip marker."""

    lang: str
    line: int
    code: str
    skip: bool


def readme_blocks(text: str) -> list[Block]:
    """Return README's fenced code blocks in order."""
    blocks: list[Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if m is None:
            i += 1
            continue
        start = i
        i += 1
        body: list[str] = []
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i])
            i += 1
        before = [ln for ln in lines[:start] if ln.strip()]
        skip = bool(before) and before[-1].strip() == SKIP
        blocks.append(Block(m.group(1), start + 1, "\n".join(body) + "\n", skip))
        i += 1
    return blocks


def shell_commands(code: str) -> list[list[str]]:
    """Return the commands of a shell block: continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n", " ", code)
    return [argv for ln in joined.splitlines() if (argv := shlex.split(ln, comments=True))]


BLOCKS = readme_blocks(README.read_text(encoding="utf-8"))
PYTHON = [b for b in BLOCKS if b.lang == "python" and not b.skip]
SHELL = [
    b
    for b in BLOCKS
    if b.lang in ("bash", "shell", "sh")
    and not b.skip
    and (cmds := shell_commands(b.code))
    and cmds[0][0] == "flownb"
]


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder holding a copy of notebooks/flows and notebooks/data, as the README's paths
    expect (they are relative to the repository root)."""
    work = tmp_path / "work"
    for part in ("flows", "data"):
        shutil.copytree(ROOT / "notebooks" / part, work / "notebooks" / part)
    monkeypatch.chdir(work)
    return work


@pytest.fixture
def shell(workdir: Path) -> Iterator[Any]:
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.testing.globalipapp import start_ipython

    start_ipython()
    ip = InteractiveShell.instance()
    names = set(ip.user_ns)
    environ = dict(os.environ)  # README blocks may point OPENAI_BASE_URL at a loopback server
    try:
        yield ip
    finally:
        os.environ.clear()
        os.environ.update(environ)
        if "flow" in ip.magics_manager.magics["line"]:
            ip.run_line_magic("unload_ext", "flownb")
        for name in set(ip.user_ns) - names:
            ip.user_ns.pop(name, None)


def test_readme_has_runnable_blocks_and_skips_only_server_or_key_blocks() -> None:
    assert len(PYTHON) >= 5 and len(SHELL) >= 1
    skipped = [b for b in BLOCKS if b.skip]
    for block in skipped:
        needs = ("Client(", "flownb serve", "openai", "OPENAI_API_KEY", "127.0.0.1:8000")
        assert any(n in block.code for n in needs), f"README line {block.line} skipped"


def test_readme_python_blocks_run_in_order(shell: Any) -> None:
    for block in PYTHON:
        result = shell.run_cell(block.code, store_history=False)
        error = result.error_before_exec or result.error_in_exec
        assert error is None, f"README line {block.line}: {type(error).__name__}: {error}"
    # The evaluation example shows real numbers: its judges grade on the flows' (loopback)
    # provider, not offline.
    summary = shell.user_ns["report"].summary
    assert summary["judge_intro"].notna().all() and summary["pick_best_intro"].notna().all()
    assert (summary["pass_rate"] > 0).any() and summary["pick_best_intro"].sum() == 1.0


@pytest.mark.parametrize("block", SHELL, ids=[f"line{b.line}" for b in SHELL])
def test_readme_shell_blocks_run(block: Block, workdir: Path) -> None:
    for argv in shell_commands(block.code):
        assert argv[0] == "flownb", f"README line {block.line}: {argv} is not a flownb command"
        res = run_cli(*argv[1:])  # in this process: what the console script runs
        assert res.returncode == 0, f"README line {block.line}: {shlex.join(argv)}\n{res.stderr}"
