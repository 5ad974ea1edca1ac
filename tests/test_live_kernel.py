"""The live results view in a real Jupyter kernel (ipykernel via jupyter_client) against a slow
loopback OpenAI server: what a front end receives while a batch runs, and what it is left with.

A kernel started by a Jupyter server has ``JPY_SESSION_NAME`` in its environment (ipykernel then
sets ``__session__``); one started by nbclient (nbval, nbconvert) has not. These tests start
their kernels both ways, so the ``auto`` decision is tested as the front ends make it.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from flownb.testing.fake_openai import FakeOpenAI
from tests.kernels import execute as run
from tests.kernels import kernel_env, running_kernel

pytestmark = pytest.mark.timeout(240)

WIDGET = "application/vnd.jupyter.widget-view+json"
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeOpenAI]:
    # Slow enough that a batch lasts a few seconds: the view must fill in meanwhile.
    server = FakeOpenAI(latency=0.15, fail_markers={"500": "BROKEN"}).start()
    try:
        yield server
    finally:
        server.stop()


@contextmanager
def _kernel(work: Path, fake: FakeOpenAI, **extra: str) -> Iterator[Any]:
    """A kernel in ``work`` with the sample flow loaded as ``flow`` against ``fake``."""
    shutil.copy(ROOT / "notebooks" / "flows" / "blog-intro.json", work / "blog.json")
    env = kernel_env(work, OPENAI_BASE_URL=fake.url, OPENAI_API_KEY="k", **extra)
    with running_kernel(work, env) as kc:
        reply, _ = run(
            kc,
            "import flownb, pandas as pd\n"
            "flow = flownb.load_flow('blog.json', provider='openai', concurrency=2, retries=0)",
            timeout=120,
        )
        assert reply["status"] == "ok"
        yield kc


@pytest.fixture(scope="module")
def lab_kernel(tmp_path_factory: pytest.TempPathFactory, fake: FakeOpenAI) -> Iterator[Any]:
    """A kernel as JupyterLab starts one (its session named in the environment)."""
    with _kernel(tmp_path_factory.mktemp("lab"), fake, JPY_SESSION_NAME="live.ipynb") as kc:
        yield kc


@pytest.fixture(scope="module")
def nbclient_kernel(tmp_path_factory: pytest.TempPathFactory, fake: FakeOpenAI) -> Iterator[Any]:
    """A kernel as nbval / nbconvert start one (no session in the environment)."""
    with _kernel(tmp_path_factory.mktemp("nbclient"), fake) as kc:
        yield kc


def updates(messages: list[dict]) -> list[dict]:
    """The live view's widget updates: comm messages that set an HTML value of ours."""
    return [
        m
        for m in messages
        if m["msg_type"] == "comm_msg"
        and 'class="flownb-live ' in str(m["content"]["data"].get("state", {}).get("value", ""))
    ]


def value(msg: dict) -> str:
    return str(msg["content"]["data"]["state"]["value"])


def saved_outputs(messages: list[dict]) -> list[dict]:
    """The outputs a notebook keeps for the cell: display_data / execute_result, each replaced
    by the later update_display_data of its display id (as JupyterLab and nbclient do)."""
    kept: list[dict] = []
    for m in messages:
        content = m["content"]
        if m["msg_type"] in ("display_data", "execute_result"):
            kept.append({"data": content["data"], "id": content.get("transient", {})})
        elif m["msg_type"] == "update_display_data":
            display_id = content["transient"]["display_id"]
            for out in kept:
                if out["id"].get("display_id") == display_id:
                    out["data"] = content["data"]
    return [out["data"] for out in kept]


def rows_in(html: str) -> int:
    return len(re.findall(r"<tr[ >]", html.split("<tbody>", 1)[-1]))


def test_a_batch_fills_the_view_in_and_ends_as_the_returned_frame(lab_kernel: Any) -> None:
    topics = [f"kelp{i:02d}" for i in range(14)] + ["BROKEN reef"]
    code = (
        f"df = pd.DataFrame({{'topic': {topics!r}, 'tone': 'dry'}})\n"
        "out = flow.run_dataframe(df)\n"
        "html = flownb.display_frame(out)._repr_html_()"
    )
    reply, messages = run(lab_kernel, code)
    assert reply["status"] == "ok", messages
    [shown] = [m for m in messages if m["msg_type"] == "display_data"]
    assert WIDGET in shown["content"]["data"]
    live = updates(messages)
    # Filled in while running: several updates, at most 4 a second over the run (the kernel's
    # own send times), plus the last one drawn as the batch ends.
    assert len(live) >= 2
    sent = [m["header"]["date"].timestamp() for m in live]
    span = sent[-1] - shown["header"]["date"].timestamp()
    assert len(live) <= 4 * span + 1, (len(live), span)
    # Draws while running are a quarter second apart (the last, at the end, may come sooner).
    assert all(b - a >= 0.2 for a, b in itertools.pairwise(sent[:-1])), sent
    assert rows_in(value(live[0])) < len(topics)
    # The last update holds every finished row, the failed one first and highlighted.
    last = value(live[-1])
    assert rows_in(last) == len(topics)
    assert all(t in last for t in topics)
    first_row = last.split("<tbody>", 1)[1].split("</tr>", 1)[0]
    assert "BROKEN reef" in first_row and "background:#fdecea" in first_row
    assert '<img src="data:image/png;base64,' in last  # images as thumbnails
    assert "15/15 rows" in last
    # Then the widget goes, and the cell keeps the static table the returned frame shows.
    assert any(m["msg_type"] == "comm_close" for m in messages)
    [final] = saved_outputs(messages)
    assert WIDGET not in final and "text/html" in final
    # Readers of plain text (a terminal, nbconvert --to markdown) get the bar and the frame.
    assert final["text/plain"].startswith("blog: 15/15 rows")
    assert all(t in final["text/plain"] for t in topics)
    assert "1 failed" in final["text/html"] and "stopped" not in final["text/html"]
    reply, messages = run(lab_kernel, "print(html)")
    assert reply["status"] == "ok"
    frame_html = "".join(m["content"]["text"] for m in messages if m["msg_type"] == "stream")
    assert frame_html.strip() in final["text/html"]
    assert rows_in(frame_html) == len(topics)


def test_ctrl_c_keeps_the_view_with_the_finished_rows(lab_kernel: Any) -> None:
    seen: list[dict] = []

    def stop_after_some_rows(msg: dict[str, Any]) -> None:
        seen.append(msg)

    def interrupter() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            got = updates(seen)
            if got and rows_in(value(got[-1])) >= 3:
                lab_kernel.parent.interrupt_kernel()
                return
            time.sleep(0.05)

    code = (
        "df = pd.DataFrame({'topic': [f'moss{i:02d}' for i in range(60)], 'tone': 'calm'})\n"
        "out = flow.run_dataframe(df)"
    )
    threading.Thread(target=interrupter, daemon=True).start()
    reply, messages = run(lab_kernel, code, stop_after_some_rows)
    assert reply["status"] == "ok", messages  # run_dataframe returns what finished
    reply, printed = run(
        lab_kernel, "print(sorted(out.loc[out['error'].isna(), 'topic']))\nprint(len(out))"
    )
    lines = "".join(m["content"]["text"] for m in printed if m["msg_type"] == "stream").split("\n")
    finished = eval(lines[0])  # a list literal printed by the kernel
    assert 3 <= len(finished) < 60 and lines[1] == "60"
    # The last update held every finished row; the static view keeps them and says it stopped.
    assert all(t in value(updates(messages)[-1]) for t in finished)
    [final] = saved_outputs(messages)
    assert WIDGET not in final
    assert "stopped" in final["text/html"]
    assert all(t in final["text/html"] for t in finished)


def test_a_frame_shown_as_the_cell_value_is_not_shown_twice(lab_kernel: Any) -> None:
    code = "%load_ext flownb\nsmall = pd.DataFrame({'topic': ['elk', 'yak'], 'tone': 'dry'})\n"
    reply, messages = run(lab_kernel, code + "flow.run_dataframe(small)")
    assert reply["status"] == "ok", messages
    view, value = saved_outputs(messages)
    # The view keeps its bar line; the table is the cell's value, below it.
    assert "2/2 rows" in view["text/html"] and "<table" not in view["text/html"]
    assert rows_in(value["text/html"]) == 2
    # Through the magic too (%flow batch runs run_dataframe): -o shows the frame itself, and
    # -q nothing; the view keeps its bar line either way. Kept in a variable: the whole table.
    for line, shown in (("-o kept", 2), ("-q", 1), ("-o kept -q", 1)):
        reply, messages = run(lab_kernel, f"%flow batch blog.json --df small {line}")
        assert reply["status"] == "ok", messages
        assert updates(messages)
        outs = saved_outputs(messages)
        assert len(outs) == shown and "<table" not in outs[0]["text/html"], (line, outs)
        assert "2/2 rows" in outs[0]["text/html"]
    reply, messages = run(lab_kernel, "kept2 = flow.run_dataframe(small)")
    [view] = saved_outputs(messages)
    assert WIDGET not in view and rows_in(view["text/html"]) == 2


def test_run_batch_and_evaluate_show_the_view_too(lab_kernel: Any) -> None:
    rows = "[{'topic': f'owl{i}', 'tone': 'wry'} for i in range(5)]"
    code = f"rs = flow.run_batch({rows}, progress=True)"
    reply, messages = run(lab_kernel, code)
    assert reply["status"] == "ok", messages
    assert updates(messages)
    [final] = saved_outputs(messages)
    assert WIDGET not in final and rows_in(final["text/html"]) == 5
    code = (
        "from flownb import scorers as S\n"
        "data = pd.DataFrame({'topic': [f'fern{i}' for i in range(6)] + ['BROKEN'], 'tone': 'x'})\n"
        "rep = flownb.evaluate({'a': flow, 'b': flow.with_prompts({'Blog intro': 'Say {topic}'})},"
        " data, [S.contains('intro', S.col('topic')), S.length('intro', max=1000)], log=False)\n"
        "print(rep.summary['pass_rate'].to_dict())"
    )
    reply, messages = run(lab_kernel, code)
    assert reply["status"] == "ok", messages
    live = updates(messages)
    assert live
    last = value(live[-1])
    printed = "".join(m["content"]["text"] for m in messages if m["msg_type"] == "stream")
    rates = eval(printed.strip().splitlines()[-1])  # the report's pass rates, a dict literal
    # The running summary per variant: rows done, errors, pass rate so far (as the report's).
    for variant in ("a", "b"):
        row = re.search(rf"<th>{variant}</th>(.*?)</tr>", last)
        assert row is not None, last
        cells = re.findall(r"<td>(.*?)</td>", row.group(1))
        assert cells[:3] == ["7/7", "1", f"{rates[variant]:.0%}"], (cells, rates)
    [final] = saved_outputs(messages)
    assert WIDGET not in final and "<th>a</th>" in final["text/html"]
    assert "stopped" not in final["text/html"]  # failed runs are not a stop


def test_the_final_table_of_an_evaluation_with_a_judge_says_the_reports_pass_rate(
    lab_kernel: Any,
) -> None:
    # The running figures leave the judge out (it grades after every variant); the table the
    # view ends with says what report.summary says, the judge's verdicts included.
    code = (
        "from flownb import scorers as S\n"
        "data = pd.DataFrame({'topic': [f'moss{i}' for i in range(10)], 'tone': 'x'})\n"
        "rep = flownb.evaluate({'a': flow, 'b': flow.with_prompts({'Blog intro': 'Say {topic}'})},"
        " data, [S.contains('intro', S.col('topic')), S.judge('intro', 'Good about {topic}?',"
        " threshold=0.5)], log=False)\n"
        "print(rep.summary['pass_rate'].to_dict())"
    )
    reply, messages = run(lab_kernel, code)
    assert reply["status"] == "ok", messages
    printed = "".join(m["content"]["text"] for m in messages if m["msg_type"] == "stream")
    rates = eval(printed.strip().splitlines()[-1])
    # The fake's judge gives scores spread over 0..1: some rows fail it, so the judge matters.
    assert any(0 < r < 1 for r in rates.values()), rates
    [final] = saved_outputs(messages)
    html = final["text/html"]
    for variant in ("a", "b"):
        row = re.search(rf"<th>{variant}</th>(.*?)</tr>", html)
        assert row is not None, html
        cells = re.findall(r"<td>(.*?)</td>", row.group(1))
        assert cells[2] == f"{rates[variant]:.0%}", (cells, rates)
    assert "judges included" in html and "before the judges" not in html


def test_auto_is_off_in_an_nbclient_kernel_and_the_setting_decides(
    nbclient_kernel: Any, lab_kernel: Any
) -> None:
    code = "r = flow.run_batch([{'topic': 'a', 'tone': 'b'}], progress=True)"
    reply, messages = run(nbclient_kernel, code)
    assert reply["status"] == "ok"
    # No live view: the plain bar's final state, static (no front end would draw a widget).
    assert not updates(messages)
    assert not any("flownb-live" in str(m["content"]) for m in messages)
    assert not any(WIDGET in m["content"].get("data", {}) for m in messages)
    assert any("flownb-bar" in m["content"].get("data", {}).get("text/html", "") for m in messages)
    reply, messages = run(nbclient_kernel, "import os\nos.environ['FLOWNB_LIVE'] = '1'\n" + code)
    assert reply["status"] == "ok"
    assert any("flownb-live" in str(m["content"]) for m in messages)
    reply, messages = run(lab_kernel, "import os\nos.environ['FLOWNB_LIVE'] = '0'\n" + code)
    assert reply["status"] == "ok"
    assert not any("flownb-live" in str(m["content"]) for m in messages)
    run(lab_kernel, "del os.environ['FLOWNB_LIVE']")


def test_outside_a_kernel_nothing_of_the_view_is_loaded(tmp_path: Path) -> None:
    script = (
        "import sys, flownb\n"
        "flow = flownb.load_flow(sys.argv[1])\n"
        "flow.run_batch([{'topic': 'a', 'tone': 'b'}], progress=True)\n"
        "print('flownb.views.live' in sys.modules, 'ipywidgets' in sys.modules)\n"
    )
    env = {**os.environ, "FLOWNB_LIVE": "1", "FLOWNB_HOME": str(tmp_path / "home")}
    env.pop("FLOWNB_PROVIDER", None)
    done = subprocess.run(
        [sys.executable, "-c", script, str(ROOT / "notebooks" / "flows" / "blog-intro.json")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "False False\n"
    assert "1/1" in done.stderr  # the terminal bar, as before


@pytest.mark.parametrize(
    ("raw", "mode"),
    [(None, "auto"), ("", "auto"), (" AUTO ", "auto"), ("1", "on"), ("on", "on"), ("0", "off")],
)
def test_flownb_live_setting(monkeypatch: pytest.MonkeyPatch, raw: str | None, mode: str) -> None:
    from flownb.config.settings import get_settings

    if raw is None:
        monkeypatch.delenv("FLOWNB_LIVE", raising=False)
    else:
        monkeypatch.setenv("FLOWNB_LIVE", raw)
    assert get_settings().live == mode


def test_a_bad_flownb_live_is_one_clear_line(monkeypatch: pytest.MonkeyPatch) -> None:
    from flownb.config.settings import get_settings
    from flownb.errors import ConfigError

    monkeypatch.setenv("FLOWNB_LIVE", "sometimes")
    with pytest.raises(ConfigError, match=r"^FLOWNB_LIVE must be auto, 1 or 0 \(on/off\), got"):
        get_settings()
