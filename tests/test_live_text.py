"""A single run's text growing in a notebook while the provider streams it: in a real kernel
(ipykernel via jupyter_client) started as a Jupyter server starts one for a notebook
(``JPY_SESSION_NAME``), against the fake OpenAI streaming one word per 100 ms; and the throttle
of the live area."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

import flownb
from flownb.runtime.events import StreamEvent
from flownb.testing.fake_openai import FakeOpenAI
from flownb.views.live_text import LiveText, consume
from tests.conftest import make_flow
from tests.kernels import execute as run_cell
from tests.kernels import kernel_env, running_kernel

pytestmark = pytest.mark.timeout(240)

WORDS = "one two three four five six seven eight nine ten"


@pytest.fixture(scope="module")
def streaming_fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(stream_delay=0.1) as fake:
        yield fake


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory, streaming_fake: FakeOpenAI) -> Iterator[Any]:
    """A real kernel started with JPY_SESSION_NAME (as JupyterLab starts one), the OpenAI
    environment pointing at the streaming fake; yields a ready client, ``flow`` loaded (each
    test may run first)."""
    work = tmp_path_factory.mktemp("live")
    (work / "story.json").write_text(json.dumps(make_flow({"story": "{x}"}, ["x"])))
    env = kernel_env(
        work,
        JPY_SESSION_NAME=str(work / "live.ipynb"),
        OPENAI_BASE_URL=streaming_fake.url,
        OPENAI_API_KEY="sk-test",
        FLOWNB_PROVIDER="openai",
        FLOWNB_CACHE="0",
    )
    with running_kernel(work, env) as kc:
        reply, _ = run_cell(kc, "import flownb\nflow = flownb.load_flow('story.json')", timeout=120)
        assert reply["status"] == "ok"
        yield kc


def execute(kc: Any, code: str) -> tuple[dict[str, Any], list[tuple[float, dict[str, Any]]]]:
    """Run ``code``; return the reply's content and the iopub messages it caused, each with
    the perf_counter time this process received it."""
    messages: list[tuple[float, dict[str, Any]]] = []
    reply, _ = run_cell(
        kc, code, on_message=lambda m: messages.append((time.perf_counter(), m)), timeout=120
    )
    return reply, messages


def live_messages(
    messages: list[tuple[float, dict[str, Any]]],
) -> tuple[str, list[tuple[float, dict[str, Any]]]]:
    """Return the live area's display id and every message that showed or updated it."""
    first = next(
        m
        for _, m in messages
        if m["msg_type"] == "display_data" and m["content"].get("transient", {}).get("display_id")
    )
    display_id = first["content"]["transient"]["display_id"]
    shown = [
        (t, m["content"])
        for t, m in messages
        if m["msg_type"] in ("display_data", "update_display_data")
        and m["content"].get("transient", {}).get("display_id") == display_id
    ]
    return display_id, shown


def check_growing_text(
    messages: list[tuple[float, dict[str, Any]]], fake: FakeOpenAI, answer: str
) -> None:
    """The live area showed the text growing while the fake sent it, then was emptied."""
    _, shown = live_messages(messages)
    texts = [c["data"]["text/plain"] for _, c in shown[:-1]]
    assert len(texts) >= 2  # it grew in steps (about five a second over the ~1 s stream)
    assert all(b.startswith(a.rstrip("▌")) for a, b in itertools.pairwise(texts))
    # The last update may be throttled away: the result's display comes next anyway.
    assert f"story: {answer}".startswith(texts[-1]) and len(texts[-1]) > len("story: ")
    assert shown[-1][1]["data"] == {}  # emptied: the result's own display follows
    sent = fake.streams[-1]
    assert shown[0][0] < sent[-1][0]  # on screen before the last word left the fake


def test_flow_run_as_the_cells_value_shows_text_growing(
    kernel: Any, streaming_fake: FakeOpenAI
) -> None:
    streaming_fake.reset()
    reply, messages = execute(
        kernel, f"flow = flownb.load_flow('story.json')\nflow.run(x={WORDS!r})"
    )
    assert reply["status"] == "ok"
    check_growing_text(messages, streaming_fake, f"echo: {WORDS}")
    # Then the result, exactly as without streaming (one named block, the text as written).
    after = [m for _, m in messages if m["msg_type"] == "display_data"][1:]
    assert [m["content"]["data"]["text/plain"] for m in after] == [f"story:\necho: {WORDS}"]


def test_flow_run_magic_shows_text_growing(kernel: Any, streaming_fake: FakeOpenAI) -> None:
    streaming_fake.reset()
    execute(kernel, "%load_ext flownb")
    reply, messages = execute(kernel, f"%flow run story.json x='{WORDS} magic'")
    assert reply["status"] == "ok"
    check_growing_text(messages, streaming_fake, f"echo: {WORDS} magic")


def test_flownb_live_0_shows_only_the_result(kernel: Any, streaming_fake: FakeOpenAI) -> None:
    reply, messages = execute(
        kernel,
        "import os\nos.environ['FLOWNB_LIVE'] = '0'\n"
        "try:\n    flow.run(x='quiet please')\nfinally:\n    del os.environ['FLOWNB_LIVE']",
    )
    assert reply["status"] == "ok"
    kinds = [m["msg_type"] for _, m in messages]
    assert "update_display_data" not in kinds
    transient = [m for _, m in messages if m["content"].get("transient")]
    assert transient == []


def test_the_forms_live_area_grows_then_empties(kernel: Any, streaming_fake: FakeOpenAI) -> None:
    streaming_fake.reset()
    code = f"""
import time
form = flow.form()
form.inputs['x'].value = {WORDS!r}
seen = []
form.button.click()
deadline = time.monotonic() + 60
while (form.running or not seen) and time.monotonic() < deadline:
    value = form.live.value
    if value and (not seen or seen[-1] != value):
        seen.append(value)
    time.sleep(0.01)
print(len(seen), repr(form.live.value), dict(form.result or {{}}))
print(all('flownb-live' in v for v in seen), 'ten' not in seen[0])
"""
    reply, messages = execute(kernel, code)
    assert reply["status"] == "ok", reply
    out = "".join(m["content"]["text"] for _, m in messages if m["msg_type"] == "stream")
    count, rest = out.split(" ", 1)
    assert int(count) >= 2  # the area changed while the text came
    assert rest.splitlines() == [f"'' {{'story': 'echo: {WORDS}'}}", "True True"]


def test_the_live_area_is_throttled_and_shows_the_first_text_at_once() -> None:
    flow = flownb.load_flow(make_flow({"a": "{x}"}, ["x"]), provider="offline")
    shown: list[str] = []
    view = LiveText(lambda markup, plain: shown.append(plain), interval=3600)
    result = consume(flow.stream(x=" ".join(["word"] * 200)), view)
    assert shown == ["a: word "]  # the first piece at once, then nothing within the interval
    view.flush()
    assert shown[-1] == f"a: {result['a']}" and view.updates == 2
    view.add(StreamEvent("restart", "a", ("a",)))
    view.flush()
    assert shown[-1] == "a: "


def test_runs_in_a_loop_share_one_live_area(kernel: Any, streaming_fake: FakeOpenAI) -> None:
    reply, messages = execute(
        kernel, "results = [flow.run(x=f'loop {i} of words') for i in range(3)]"
    )
    assert reply["status"] == "ok"
    created = [m for _, m in messages if m["msg_type"] == "display_data"]
    assert len(created) == 1  # one area, updated by every run, emptied after each
    display_id = created[0]["content"]["transient"]["display_id"]
    updates = [m for _, m in messages if m["msg_type"] == "update_display_data"]
    assert {m["content"]["transient"]["display_id"] for m in updates} == {display_id}
    assert [m["content"]["data"] for m in updates].count({}) == 3
