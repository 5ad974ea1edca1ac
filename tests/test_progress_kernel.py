"""A notebook progress bar in a real kernel (as nbconvert --execute runs one): shown under a
display id, and replaced when it closes by its final state as static output, so a saved notebook
keeps ``6/6 100%`` and the money line as written, not the ``0/6 0%`` the widget started with."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import make_flow
from tests.kernels import execute, kernel_env, running_kernel


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    work = tmp_path_factory.mktemp("bar")
    (work / "echo.json").write_text(json.dumps(make_flow({"answer": "{x}"}, ["x"])))
    with running_kernel(work, kernel_env(work)) as kc:
        # flow loaded here, not by the first test: each test may run first (--shuffle).
        reply, _ = execute(kc, "import flownb\nflow = flownb.load_flow('echo.json')")
        assert reply["status"] == "ok"
        yield kc


def _bar_run(kernel: Any, code: str) -> list[dict[str, Any]]:
    reply, messages = execute(kernel, code)
    assert reply["status"] == "ok", messages
    return [m for m in messages if m["msg_type"] in ("display_data", "update_display_data")]


RUN = "rows = flow.run_batch([{'x': str(i)} for i in range(6)], progress=True)"


def _final(data: dict[str, Any]) -> None:
    assert sorted(data) == ["text/html", "text/plain"]  # no widget left to render
    assert data["text/plain"].startswith("echo: 6/6 rows in ")
    assert '<progress value="6" max="6"' in data["text/html"]
    assert "mathjax_ignore" in data["text/html"]


def test_without_a_front_end_the_bar_is_its_final_state_only(kernel: Any) -> None:
    # As under nbconvert --execute or nbval: nothing to draw a widget, one static output.
    shown = _bar_run(kernel, RUN)
    assert [m["msg_type"] for m in shown] == ["display_data"]
    _final(shown[0]["content"]["data"])


def test_in_a_front_end_the_finished_bar_replaces_its_widget(kernel: Any) -> None:
    # JupyterLab's kernels have __session__ (the live results view off: the plain bar): the
    # widget moves, then its final state replaces it.
    # Undone however the run ends: the kernel is the module's, and a __session__ left behind
    # would make the other test's kernel a front end's.
    code = (
        "import os\nos.environ['FLOWNB_LIVE'] = '0'\n__session__ = 'bar.ipynb'\ntry:\n"
        f"    {RUN}\nfinally:\n    del __session__, os.environ['FLOWNB_LIVE']"
    )
    shown = _bar_run(kernel, code)
    assert [m["msg_type"] for m in shown] == ["display_data", "update_display_data"]
    widget, final = (m["content"] for m in shown)
    assert "application/vnd.jupyter.widget-view+json" in widget["data"]
    assert final["transient"]["display_id"] == widget["transient"]["display_id"]
    _final(final["data"])


def test_a_bar_with_nothing_left_to_do_ends_full_and_its_money_is_not_math() -> None:
    import io

    from tqdm import tqdm

    from flownb.show.progress import Progress

    bar = Progress(tqdm(total=3, desc="evaluate", unit="call", file=io.StringIO()))
    bar.set_postfix_str("$0 spent, $0.0081 saved by cache")
    bar.close(end_at_count=True)  # every call was cached: none made
    final = bar.final_bundle()
    # The total stays what was counted (totals never shrink); the bar says what was not made.
    assert final["text/plain"].startswith("evaluate: 0/3 calls in ")
    assert " · 3 counted calls not made (failed runs, answers shared) · " in final["text/plain"]
    assert final["text/plain"].endswith(" · $0 spent, $0.0081 saved by cache")
    assert '<progress value="1" max="1"' in final["text/html"]
    assert "<span>$</span>0 spent, <span>$</span>0.0081" in final["text/html"]


def test_a_bars_total_never_shrinks_while_it_runs_nor_when_it_ends() -> None:
    import io
    import time

    from tqdm import tqdm

    from flownb.show.progress import Progress

    inner = tqdm(total=9, desc="evaluate", unit="call", file=io.StringIO())
    bar = Progress(inner, interval=0.01)
    totals = []
    for step in (3, 4, 5):  # 12 steps of 9 counted: the total grows to the count
        bar.update(step)
        deadline = time.monotonic() + 30
        while inner.n < sum((3, 4, 5)[: (3, 4, 5).index(step) + 1]):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        totals.append(inner.total)
    bar.close(end_at_count=True)
    totals.append(inner.total)
    assert totals == sorted(totals) and totals[-1] == 12
    ended = Progress(tqdm(total=90, desc="evaluate", unit="call", file=io.StringIO()))
    ended.update(70)
    ended.close(end_at_count=True)  # 20 counted calls were not needed
    assert ended.bar.total == 90
    final = ended.final_bundle()
    assert final["text/plain"].startswith("evaluate: 70/90 calls in ")
    assert "20 counted calls not made" in final["text/plain"]
    assert '<progress value="1" max="1"' in final["text/html"]  # the work is over: full
