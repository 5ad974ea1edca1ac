"""Warnings point at the caller's line, not into flownb, and are prefixed ``flownb:`` once."""

from __future__ import annotations

import inspect
import json
import sys
import warnings
from pathlib import Path

import pandas as pd
import pytest

import flownb
from flownb.show.notices import PACKAGE_DIR, warn
from tests.cli_inprocess import run_cli
from tests.conftest import make_flow, write_flow


def _line() -> int:
    """Return the line number of the caller's next line."""
    frame = inspect.currentframe()
    assert frame is not None and frame.f_back is not None
    return frame.f_back.f_lineno + 1


def test_warn_names_the_first_frame_outside_the_package() -> None:
    assert PACKAGE_DIR.endswith(f"flownb{'/' if sys.platform != 'win32' else chr(92)}")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        line = _line()
        warn("here", RuntimeWarning)
    (w,) = caught
    assert (w.filename, w.lineno, w.category) == (__file__, line, RuntimeWarning)


def test_a_warning_deep_in_run_dataframe_points_at_the_callers_line() -> None:
    flow = flownb.load_flow(make_flow({"a": "<{a}>"}, ["a"]))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        line = _line()
        flow.run_dataframe(pd.DataFrame({"a": ["1"]}), progress=False)
    (w,) = caught
    assert "also an input column" in str(w.message)
    assert (w.filename, w.lineno) == (__file__, line)


def _dropping_flow(tmp_path: Path) -> Path:
    flow = make_flow({"out": "About {topic}."}, ["topic"])
    for node in flow["nodes"]:
        if node["type"] == "actionNode":
            node["data"]["modelParams"] = {"model": "gpt-4o-mini", "frobnicate": True}
    return write_flow(tmp_path / "drop.json", flow)


def test_a_provider_warning_points_at_the_line_that_previews_or_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")  # never called
    path = _dropping_flow(tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        flow = flownb.load_flow(path, provider="openai", cache=False)
        # Said about what is sent, not at load (with_model may follow). Only what is said of
        # this flow counts: the record is process-wide, so a collection or another thread
        # during the load may add an earlier test's warnings (seen once in CI: 7 of them).
        said = [f"{w.category.__name__}: {w.message}" for w in caught]
        assert [s for s in said if "frobnicate" in s or "'out'" in s] == [], said
        line = _line()
        flow.preview({"topic": "owls"})
        flow.preview({"topic": "bats"})  # said once
    (w,) = [w for w in caught if "frobnicate" in str(w.message)]
    assert (w.filename, w.lineno) == (__file__, line)
    assert not str(w.message).startswith("flownb")


def test_the_cli_prefixes_a_warning_once(tmp_path: Path) -> None:
    path = _dropping_flow(tmp_path)
    env = {"OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}
    res = run_cli(
        "run", str(path), "--var", "topic=owls", "--provider", "openai", "--dry-run", env=env
    )
    assert res.returncode == 0, res.stderr
    (line,) = [x for x in res.stderr.splitlines() if "frobnicate" in x]
    assert line.startswith("flownb: openai: node 'out': frobnicate dropped")
    assert "flownb: flownb" not in res.stderr and ".py:" not in res.stderr


def test_dir_of_the_package_is_its_public_api() -> None:
    assert dir(flownb) == sorted(flownb.__all__)
    assert "annotations" not in dir(flownb) and "client" not in dir(flownb)
    assert json.dumps(dir(flownb))  # plain strings
