"""A notebook progress bar in a real kernel (as nbconvert --execute runs one): shown under a
display id, and replaced when it closes by its final state as static output, so a saved notebook
keeps ``6/6 100%`` and the money line as written, not the ``0/6 0%`` the widget started with."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from kernels import execute, kernel_env, running_kernel

from tests.conftest import make_flow


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    work = tmp_path_factory.mktemp("bar")
    (work / "echo.json").write_text(json.dumps(make_flow({"answer": "{x}"}, ["x"])))
    with running_kernel(work, kernel_env(work)) as kc:
        yield kc


def test_a_finished_bar_replaces_its_widget_with_its_final_state(kernel: Any) -> None:
    code = (
        "import flownb\nflow = flownb.load_flow('echo.json')\n"
        "rows = flow.run_batch([{'x': str(i)} for i in range(6)], progress=True)"
    )
    reply, messages = execute(kernel, code)
    assert reply["status"] == "ok"
    shown = [m for m in messages if m["msg_type"] == "display_data"]
    updates = [m for m in messages if m["msg_type"] == "update_display_data"]
    assert (
        len(shown) == 1
        and "application/vnd.jupyter.widget-view+json" in shown[0]["content"]["data"]
    )
    bar_id = shown[0]["content"]["transient"]["display_id"]
    final = [u["content"] for u in updates if u["content"]["transient"]["display_id"] == bar_id]
    assert len(final) == 1  # one update: the final state, after the work
    data = final[0]["data"]
    assert sorted(data) == ["text/html", "text/plain"]  # no widget left to render
    assert "6/6" in data["text/plain"] and "100%" in data["text/plain"]
    assert '<progress value="6" max="6"' in data["text/html"]
    assert "mathjax_ignore" in data["text/html"]
