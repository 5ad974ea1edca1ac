"""The notebook view of provider batches, in a real Jupyter kernel (ipykernel via
jupyter_client): a table of the batches shown once and updated in place through its display id,
its last state a plain HTML table (what a saved notebook keeps)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import make_flow
from tests.kernels import execute, kernel_env, running_kernel

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    work = tmp_path_factory.mktemp("batch-view")
    (work / "echo.json").write_text(json.dumps(make_flow({"echo": "Say {word}"}, ["word"])))
    with running_kernel(work, kernel_env(work)) as kc:
        yield kc


SETUP = """
import os
import pandas as pd
import flownb
from flownb.testing.fake_openai import FakeOpenAI

fake = FakeOpenAI(batch_seconds=1.0).start()
os.environ.update(FLOWNB_PROVIDER="openai", OPENAI_BASE_URL=fake.url, FLOWNB_BATCH_POLL="0.1")
flow = flownb.load_flow("echo.json")
"""


def test_the_batches_table_is_updated_in_place_and_ends_as_plain_html(kernel: Any) -> None:
    reply, _ = execute(kernel, SETUP)
    assert reply["status"] == "ok", reply
    reply, messages = execute(
        kernel,
        "out = flow.run_dataframe(pd.DataFrame({'word': ['a', 'b', 'c']}), batch_api=True)\n"
        "print(out['echo'].tolist())",
    )
    assert reply["status"] == "ok", reply
    tables = [
        m
        for m in messages
        if m["msg_type"] in ("display_data", "update_display_data")
        and "flownb-batches" in m["content"]["data"].get("text/html", "")
    ]
    shown = [m for m in tables if m["msg_type"] == "display_data"]
    updates = [m for m in tables if m["msg_type"] == "update_display_data"]
    assert len(shown) == 1 and updates  # shown once, then replaced in place
    display_id = shown[0]["content"]["transient"]["display_id"]
    assert {m["content"]["transient"]["display_id"] for m in updates} == {display_id}
    states = [m["content"]["data"]["text/plain"] for m in tables]
    assert "validating" in states[0] or "in_progress" in states[0]
    last = tables[-1]["content"]["data"]
    assert "<td>completed</td>" in last["text/html"] and "<td>3/3</td>" in last["text/html"]
    assert "completed" in last["text/plain"]
    # Only static HTML and text: nothing a saved notebook needs a widget for.
    assert set(last) == {"text/plain", "text/html"}
    printed = "".join(m["content"]["text"] for m in messages if m["msg_type"] == "stream")
    assert "['echo: Say a', 'echo: Say b', 'echo: Say c']" in printed


def test_without_progress_nothing_is_shown(kernel: Any) -> None:
    reply, messages = execute(
        kernel,
        "flow.run_dataframe(pd.DataFrame({'word': ['d']}), batch_api=True, progress=False);",
    )
    assert reply["status"] == "ok", reply
    assert not [m for m in messages if m["msg_type"] in ("display_data", "update_display_data")]
