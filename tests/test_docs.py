"""The code blocks of README.md and of every docs page run as written, offline, so the docs
cannot drift from the code; and the docs site builds with warnings as errors.

The pages are read in the order of mkdocs.yml's nav, after README.md:

- Each page's ```python blocks run in order in an IPython shell (so ``%flow`` magics work too),
  in a namespace of the page's own (a reader may land on any page and copy its code: no page
  borrows a name from another), in a temporary folder holding a copy of ``notebooks/`` (flows
  and data), with FLOWNB_HOME in a temporary folder of its own.
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
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.cli_inprocess import run_cli
from tests.conftest import ROOT

README = ROOT / "README.md"
DOCS = ROOT / "docs"
SKIP = "<!-- readme-test: skip -->"
_FENCE = re.compile(r"^```(\w*)\s*$")


@dataclass
class Block:
    """One fenced code block: its page, language, first line number, text, skip marker."""

    lang: str
    line: int
    code: str
    skip: bool
    page: str = "README.md"

    @property
    def where(self) -> str:
        """``page line N``: where a failing block stands."""
        return f"{self.page} line {self.line}"


def pages() -> list[Path]:
    """README.md, then the docs pages in the order of mkdocs.yml's nav."""
    nav = re.findall(r"^\s+- [^:]+: (\S+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(), re.M)
    return [README, *(DOCS / name for name in nav)]


def readme_blocks(text: str, page: str = "README.md") -> list[Block]:
    """Return a page's fenced code blocks in order."""
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
        blocks.append(Block(m.group(1), start + 1, "\n".join(body) + "\n", skip, page))
        i += 1
    return blocks


def shell_commands(code: str) -> list[list[str]]:
    """Return the commands of a shell block: continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n", " ", code)
    return [argv for ln in joined.splitlines() if (argv := shlex.split(ln, comments=True))]


BLOCKS = [
    block
    for path in pages()
    for block in readme_blocks(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))
]
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
        assert any(n in block.code for n in needs), f"{block.where} skipped"


PAGES = list(dict.fromkeys(b.page for b in PYTHON))


@pytest.mark.parametrize("page", PAGES, ids=[Path(p).stem for p in PAGES])
def test_each_pages_python_blocks_run_in_order_on_their_own(page: str, shell: Any) -> None:
    for block in (b for b in PYTHON if b.page == page):
        result = shell.run_cell(block.code, store_history=False)
        error = result.error_before_exec or result.error_in_exec
        assert error is None, f"{block.where}: {type(error).__name__}: {error}"
    if page == "docs/evaluation.md":
        # The evaluation example shows real numbers: its judges grade on the flows' (loopback)
        # provider, not offline.
        summary = shell.user_ns["report"].summary
        assert summary["judge_intro"].notna().all() and summary["pick_best_intro"].notna().all()
        assert (summary["pass_rate"] > 0).any() and summary["pick_best_intro"].sum() == 1.0


@pytest.mark.parametrize("block", SHELL, ids=[f"{Path(b.page).stem}-line{b.line}" for b in SHELL])
def test_readme_shell_blocks_run(block: Block, workdir: Path) -> None:
    for argv in shell_commands(block.code):
        assert argv[0] == "flownb", f"{block.where}: {argv} is not a flownb command"
        res = run_cli(*argv[1:])  # in this process: what the console script runs
        assert res.returncode == 0, f"{block.where}: {shlex.join(argv)}\n{res.stderr}"


def test_every_docs_page_is_in_the_nav() -> None:
    listed = {p.name for p in pages()[1:]}
    on_disk = {p.name for p in DOCS.glob("*.md")}
    assert listed == on_disk


def test_readme_is_the_front_door() -> None:
    """The README is the pitch, the two set-up commands, a short tour and links: 200 lines at
    most; everything else lives on a docs page."""
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200
    for path in pages()[1:]:
        assert f"docs/{path.name}" in text, f"README does not link docs/{path.name}"


def test_the_docs_site_builds_with_warnings_as_errors(tmp_path: Path) -> None:
    res = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},  # Material's banner about its successor
    )
    assert res.returncode == 0, res.stderr[-4000:]
    assert (tmp_path / "site" / "reference" / "index.html").exists()


# The scorers files shown on the pages (other TOML blocks are flownb.toml's endpoints).
TOML = [b for b in BLOCKS if b.lang == "toml" and not b.skip and "[[scorers]]" in b.code]


@pytest.mark.parametrize("block", TOML, ids=[f"{Path(b.page).stem}-line{b.line}" for b in TOML])
def test_docs_scorers_toml_blocks_make_the_scorers_they_say(block: Block) -> None:
    import tomllib

    from flownb.evaluation.running.config import make_scorer

    data = tomllib.loads(block.code)
    for spec in data["scorers"]:
        scorer = make_scorer(spec)  # every key the page names is one the scorer takes
        described = scorer.describe()
        for key, value in spec.items():
            if key != "type" and isinstance(value, str | int | float):
                assert f"{key}={value!r}" in described, (block.where, key, described)
