"""Shared fixtures: every test gets a temporary FLOWNB_HOME and an environment without flownb,
OpenAI or proxy variables, so no test sees the developer's keys, cache or network settings; and
the leak check: a test that leaves the process changed (tests/leaks.py names what is checked)
fails, and what it left is put back, so no test depends on which ran before it."""

from __future__ import annotations

import json
import shutil
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.leaks import Snapshot, check, snapshot

if TYPE_CHECKING:
    from tests.browser.chromium import Chromium
    from tests.browser.lab import Lab

ROOT = Path(__file__).resolve().parent.parent
FLOWS = ROOT / "notebooks" / "flows"
DATA = ROOT / "notebooks" / "data"

_CLEARED_PREFIXES = ("FLOWNB_", "OPENAI_", "AZURE_OPENAI_", "ANTHROPIC_", "GEMINI_", "GOOGLE_")
_CLEARED = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")


@pytest.fixture(autouse=True)
def flownb_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A clean environment with FLOWNB_HOME in a temporary folder; returns that folder."""
    import os

    for name in list(os.environ):
        if name.startswith(_CLEARED_PREFIXES) or name in _CLEARED:
            monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    home = tmp_path / "flownb-home"
    monkeypatch.setenv("FLOWNB_HOME", str(home))
    return home


# --- The leak check (tests/leaks.py): whatever a test, or a module's fixtures, changed of the
# process and left so fails that test's teardown, and is put back for the tests after it.
# Each node (session, package, module, class, test) is read just before its own fixtures are
# set up: pytest sets up the fixtures of wider scope first, so that is before the first fixture
# of its scope or a narrower one (or before the test's call, when there is none). Each node is
# checked after it was torn down, so what a module's fixture restores at the module's end is
# no leak of its first test, and what it never restores is charged to the module.

_before: dict[str, Snapshot | None] = {}  # node id -> its snapshot, for each node set up now
_pending: list[tuple[int, str]] = []  # (scope rank, node id) of nodes not read yet, outer first


def _rank(node: pytest.Item | pytest.Collector) -> int:
    """Return the node's scope as a fixture scope's rank (0: session ... 4: function)."""
    if isinstance(node, pytest.Item):
        return 4
    if isinstance(node, pytest.Class):
        return 3
    if isinstance(node, pytest.File):
        return 2
    return 0 if isinstance(node, pytest.Session) else 1


_SCOPE_RANK = {"session": 0, "package": 1, "module": 2, "class": 3, "function": 4}


def _read_pending(rank: int) -> None:
    """Read the snapshot of every pending node of scope ``rank`` or wider."""
    while _pending and _pending[0][0] <= rank:
        _before[_pending.pop(0)[1]] = snapshot()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    """Mark the nodes this test sets up as pending (see above)."""
    _pending.clear()
    for node in item.listchain():
        if node.nodeid not in _before:
            _before[node.nodeid] = None
            _pending.append((_rank(node), node.nodeid))
    return (yield)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_fixture_setup(fixturedef: pytest.FixtureDef[Any], request: Any) -> Iterator[Any]:
    """Read the pending nodes whose fixtures start with this one (see above)."""
    if _pending:
        _read_pending(_SCOPE_RANK.get(fixturedef.scope, 4))
    return (yield)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """Read the nodes still pending: they have no fixtures of their own."""
    _read_pending(4)
    return (yield)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Check the outermost node torn down against its snapshot; fail the teardown naming
    what it left changed (after putting that back)."""
    _pending.clear()
    try:
        result = yield
    except BaseException:
        _end_browser_session(nextitem)
        _check_torn(item, nextitem)  # put back what it left; the teardown's own error stands
        raise
    _end_browser_session(nextitem)
    problems, whose = _check_torn(item, nextitem)
    if problems:
        pytest.fail(
            f"{whose} left global state changed (now put back):\n  " + "\n  ".join(problems),
            pytrace=False,
        )
    return result


def _end_browser_session(nextitem: pytest.Item | None) -> None:
    """End the Playwright session the browser tests share (tests/browser/chromium.py's
    ``Driver``) once the next test does not drive the browser: the tests after it run without
    its driver process and the JupyterLab tab it keeps."""
    # A notebook cell (nbval's item) has no fixtures: it never drives the browser.
    if nextitem is not None and "chromium" in getattr(nextitem, "fixturenames", ()):
        return
    chromium = sys.modules.get("tests.browser.chromium")  # never imported: no session
    if chromium is not None:
        chromium.stop_drivers()


def _check_torn(item: pytest.Item, nextitem: pytest.Item | None) -> tuple[list[str], str]:
    """Check the outermost node ``item``'s teardown took down; return the problems and which
    node (and kind) they are charged to."""
    kept = set() if nextitem is None else {n.nodeid for n in nextitem.listchain()}
    torn = [n for n in item.listchain() if n.nodeid not in kept]
    before = [_before.pop(n.nodeid, None) for n in torn]
    if not before or before[0] is None:
        return [], ""  # its setup failed before it was read
    kind = "the test" if torn[0] is item else "with its fixtures"
    return check(before[0]), f"{torn[0].nodeid or 'the session'} ({kind})"


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Every ``time.sleep`` the test's own thread asks for, in order (each still sleeps): what a
    retry waited, read from the request itself instead of timing the test."""
    real = time.sleep
    mine = threading.get_ident()
    asked: list[float] = []

    def sleep(seconds: float) -> None:
        if threading.get_ident() == mine:
            asked.append(seconds)
        real(seconds)

    monkeypatch.setattr(time, "sleep", sleep)
    return asked


@pytest.fixture(scope="session")
def chromium(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Chromium]:
    """Debian's chromium, headless, started once per pytest process for every real-browser
    test (each reaches it through one Playwright session, in a context of its own or in the
    JupyterLab tab the tests share: tests/browser/chromium.py, tests/browser/notebook.py). A
    test asking for it fails when it is missing (the same way in every browser test, never
    skipped)."""
    from tests.browser.chromium import require_chromium, running_chromium

    with running_chromium(require_chromium(), tmp_path_factory.mktemp("chromium")) as running:
        yield running


@pytest.fixture(scope="session")
def jupyterlab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """JupyterLab, started once per pytest process for every test that drives it in a browser,
    serving this process's temporary folder (each test's ``tmp_path`` lies under it) in the
    environment every test starts from; a test's kernels get its own environment through a
    kernelspec of their own (``tests.browser.notebook.lab_page``, tests/browser/lab.py)."""
    import os

    from tests.browser.lab import running_lab

    env = {
        name: value
        for name, value in os.environ.items()
        if not (name.startswith(_CLEARED_PREFIXES) or name in _CLEARED)
        and name != "PYTEST_CURRENT_TEST"  # pytest's own, a new value for every test
    }
    env["NO_PROXY"] = "127.0.0.1,localhost"  # as flownb_env sets it
    root = tmp_path_factory.getbasetemp()
    with running_lab(root, tmp_path_factory.mktemp("jupyterlab"), env) as lab:
        yield lab


@pytest.fixture
def blog_flow_path() -> Path:
    """Path of the sample blog-intro flow (two variables, a text and an image node)."""
    return FLOWS / "blog-intro.json"


@pytest.fixture
def flow_dir(tmp_path: Path) -> Path:
    """A folder holding copies of the sample flows, named ``<flow_id>.json``."""
    d = tmp_path / "flows"
    d.mkdir()
    for f in FLOWS.glob("*.json"):
        shutil.copy(f, d / f.name)
    return d


def make_flow(
    prompts: dict[str, str],
    variables: list[str] | tuple[str, ...] = (),
    *,
    images: tuple[str, ...] = (),
    outputs: dict[str, list[str]] | None = None,
    defaults: dict[str, str] | None = None,
) -> dict:
    """Build an exported-flow dict: one variableNode per variable, one actionNode (imageNode for
    names in ``images``) per prompt, and outputs mapping output name -> feeding node names
    (default: one output per node, named like it)."""
    nodes: list[dict] = []
    edges: list[dict] = []
    for v in variables:
        nodes.append(
            {
                "id": f"var-{v}",
                "type": "variableNode",
                "position": {"x": 0, "y": 0},
                "data": {"variable": {"label": v, "value": (defaults or {}).get(v, "")}},
            }
        )
    for name, prompt in prompts.items():
        nodes.append(
            {
                "id": f"node-{name}",
                "type": "imageNode" if name in images else "actionNode",
                "position": {"x": 1, "y": 1},
                "data": {
                    "name": name,
                    "prompt": prompt,
                    "modelParams": {"model": "dall-e-3" if name in images else "gpt-4o-mini"},
                    "variables": [],
                    "output": "",
                },
            }
        )
        for v in variables:
            edges.append(
                {
                    "id": f"e-{v}-{name}",
                    "source": f"var-{v}",
                    "sourceHandle": "output",
                    "target": f"node-{name}",
                    "targetHandle": "variables",
                }
            )
    outputs = outputs if outputs is not None else {name: [name] for name in prompts}
    for out, feeders in outputs.items():
        nodes.append(
            {
                "id": f"out-{out}",
                "type": "outputNode",
                "position": {"x": 2, "y": 2},
                "data": {"name": out, "output": {}},
            }
        )
        for feeder in feeders:
            src = (
                f"var-{feeder}"
                if feeder in variables and feeder not in prompts
                else f"node-{feeder}"
            )
            edges.append(
                {
                    "id": f"e-{feeder}-{out}",
                    "source": src,
                    "sourceHandle": "output",
                    "target": f"out-{out}",
                    "targetHandle": "input",
                }
            )
    return {"nodes": nodes, "edges": edges}


def write_flow(path: Path, flow: dict) -> Path:
    """Write an exported-flow dict as JSON to ``path`` and return the path."""
    path.write_text(json.dumps(flow, indent=2), encoding="utf-8")
    return path
