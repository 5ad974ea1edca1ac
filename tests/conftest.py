"""Shared fixtures: every test gets a temporary FLOWNB_HOME and an environment without flownb,
OpenAI or proxy variables, so no test sees the developer's keys, cache or network settings."""

from __future__ import annotations

import json
import shutil
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

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


@pytest.fixture(autouse=True)
def untraced() -> Iterator[None]:
    """Leave OpenTelemetry's global tracer provider unset after each test. A docs page's
    tracing example sets one for the rest of its process, and a traced run answers no call
    from the cache by lookup (its hits are spans), so a test after it on the same worker
    would see another run than the one it describes."""
    yield
    trace = sys.modules.get("opentelemetry.trace")
    if trace is not None and getattr(trace, "_TRACER_PROVIDER", None) is not None:
        provider = trace._TRACER_PROVIDER
        shutdown = getattr(provider, "shutdown", None)
        if shutdown is not None:
            shutdown()
        trace._TRACER_PROVIDER = None
        trace._TRACER_PROVIDER_SET_ONCE._done = False


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


@pytest.fixture
def chromium() -> Path:
    """Debian's chromium for a real-browser test; the test fails when it is missing (the same
    way in every browser test, never skipped: see tests/browser/chromium.py)."""
    from tests.browser.chromium import require_chromium

    return require_chromium()


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
