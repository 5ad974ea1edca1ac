"""polars frames through run_dataframe: the same run as on pandas, returned as polars."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys

import pandas as pd
import polars as pl
import pytest

import flownb
from flownb.errors import InputError
from flownb.frames.run import INTERRUPTED, run_dataframe
from flownb.providers.base import Call, Generation
from tests.conftest import ROOT, make_flow
from tests.providers_for_tests import EchoProvider


def text_flow(provider=None) -> flownb.LocalFlow:
    return flownb.load_flow(make_flow({"out": "{a}|{b}"}, ["a", "b"]), provider=provider)


def test_a_polars_frame_comes_back_as_polars_with_the_rows_in_order() -> None:
    df = pl.DataFrame({"b": ["x", "y", "z"], "a": [1, 2, 3], "other": [True, False, True]})
    out = text_flow().run_dataframe(df, progress=False)
    assert isinstance(out, pl.DataFrame)
    assert out.columns == ["b", "a", "other", "out"]
    assert out.schema["out"] == pl.String
    # The input columns keep their polars types; the rows stay in the frame's order.
    assert out.schema["a"] == pl.Int64 and out.schema["other"] == pl.Boolean
    assert out["out"].to_list() == ["1|x", "2|y", "3|z"]
    assert "out" not in df.columns  # the input is untouched


def test_outputs_equal_the_pandas_runs() -> None:
    flow = text_flow(EchoProvider(fail_on="bad"))
    data = {"a": ["ok", "bad", "ok2", None], "b": [1.5, 2.0, None, 4.0]}
    from_polars = flow.run_dataframe(pl.DataFrame(data), fill="-", progress=False)
    from_pandas = flow.run_dataframe(pd.DataFrame(data), fill="-", progress=False)
    assert isinstance(from_polars, pl.DataFrame)
    for col in ("out", "error"):
        expected = from_pandas[col].astype(object).where(from_pandas[col].notna(), None)
        assert from_polars[col].to_list() == expected.tolist()
    assert from_polars["out"].to_list() == ["text:ok|1.5", None, "text:ok2|-", "text:-|4"]
    assert from_polars["error"].null_count() == 3
    assert "model refused" in from_polars["error"][1]
    # The filled input columns show the text the flow got.
    assert from_polars["a"].to_list() == ["ok", "bad", "ok2", "-"]
    assert from_polars["b"].to_list() == ["1.5", "2", "-", "4"]


def test_empty_cells_are_refused_naming_the_rows_unless_filled() -> None:
    df = pl.DataFrame({"a": ["1", None, "3"], "b": ["x", "y", None]})
    with pytest.raises(InputError, match=r"'a'.* 1 row, index 1.*'b'.* 1 row, index 2"):
        text_flow().run_dataframe(df, progress=False)
    out = run_dataframe(text_flow(), df, fill="", progress=False)
    assert out["out"].to_list() == ["1|x", "|y", "3|"]


def test_trace_columns_come_back_too() -> None:
    data = make_flow({"outline": "Outline {t}", "draft": "Draft {outline}"}, ["t"])
    data["edges"].append({"id": "chain", "source": "node-outline", "target": "node-draft"})
    flow = flownb.load_flow(data, provider="offline")
    out = flow.run_dataframe(pl.DataFrame({"t": ["owls"]}), trace=True, progress=False)
    expected = flow.run_dataframe(pd.DataFrame({"t": ["owls"]}), trace=True, progress=False)
    assert out.columns == list(expected.columns)
    assert out.row(0) == tuple(expected.iloc[0].tolist())


def test_lazy_frames_and_other_objects_are_refused_with_one_clear_line() -> None:
    df = pl.DataFrame({"a": ["1"], "b": ["2"]})
    with pytest.raises(TypeError, match="lazy polars LazyFrame; collect it first"):
        text_flow().run_dataframe(df.lazy(), progress=False)
    with pytest.raises(TypeError, match="takes a pandas or polars DataFrame, got list"):
        run_dataframe(text_flow(), [{"a": "1", "b": "2"}], progress=False)


def test_ctrl_c_stops_a_polars_batch_part_way() -> None:
    # polars runs threads of its own; a SIGINT landing on one of them must still stop the
    # batch (it did not while the caller slept in one blocking wait for the whole batch).
    def interrupt_after(n: int) -> None:
        if n == 12:  # a real SIGINT: what Ctrl-C in a terminal or "Interrupt kernel" sends
            os.kill(os.getpid(), signal.SIGINT)

    text_flow().run_dataframe(pl.DataFrame({"a": ["1"], "b": ["2"]}), progress=False)
    flow = text_flow(EchoProvider(delay=0.02, on_call=interrupt_after))
    df = pl.DataFrame({"a": [str(i) for i in range(60)], "b": ["x"] * 60})
    with pytest.warns(UserWarning, match="interrupted"):
        out = flow.run_dataframe(df, progress=False, concurrency=2)
    done = out["error"].is_null()
    assert 0 < done.sum() < 60
    assert out.filter(done)["out"].to_list() == [f"text:{a}|x" for a in out.filter(done)["a"]]
    assert out.filter(~done)["error"].to_list() == [INTERRUPTED] * (60 - done.sum())


class _LastFirst(EchoProvider):
    """Answers the row numbered ``i`` of ``n`` after ``(n - i) * 20 ms``: the last row ends
    first."""

    async def generate(self, call: Call) -> Generation:
        await asyncio.sleep((10 - int(call.prompt.split("|")[0])) * 0.02)
        return Generation(f"done {call.prompt}")


def test_rows_come_back_in_the_frames_order_though_they_finish_in_reverse() -> None:
    flow = text_flow(_LastFirst())
    df = pl.DataFrame({"a": list(range(10)), "b": ["x"] * 10})
    out = flow.run_dataframe(df, progress=False, concurrency=10)
    assert out["a"].to_list() == list(range(10))
    assert out["out"].to_list() == [f"done {i}|x" for i in range(10)]


def test_the_core_imports_neither_polars_nor_narwhals() -> None:
    code = (
        "import sys, pandas as pd, flownb\n"
        "flow = flownb.load_flow('notebooks/flows/blog-intro.json')\n"
        "flow.run_dataframe(pd.DataFrame({'topic': ['owls'], 'tone': ['dry']}), progress=False)\n"
        "print(sorted(m for m in ('polars', 'narwhals') if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    assert done.stdout.strip() == "[]"


def test_a_polars_frame_flownb_hands_back_shows_each_dollar_as_written() -> None:
    from flownb.show.escape import NO_MATH
    from flownb.show.polars_frame import polars_html

    df = pl.DataFrame({"a": ["costs $5 and $10"], "b": ["<b>"]})
    out = text_flow().run_dataframe(df, progress=False)
    html = polars_html(out)
    assert html is not None and NO_MATH in html
    assert "costs <span>$</span>5 and <span>$</span>10|&lt;b&gt;" in html  # the output cell
    assert html.count("$") == 4  # the input cell's two and the output's two, each in a span
    # Frames flownb did not hand back, derived ones included, look as polars shows them.
    assert polars_html(df) == df._repr_html_()
    assert polars_html(out.head()) == out.head()._repr_html_()
