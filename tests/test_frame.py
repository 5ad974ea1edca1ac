"""DataFrame batches: shape, index, conversions, missing cells, per-row errors, interruption."""

from __future__ import annotations

import os
import signal

import numpy as np
import pandas as pd
import pytest

import flownb
from flownb.errors import InputError
from flownb.frames.run import INTERRUPTED
from tests.conftest import make_flow
from tests.providers_for_tests import EchoProvider, InlineEcho


def text_flow(provider=None) -> flownb.LocalFlow:
    return flownb.load_flow(make_flow({"out": "{a}|{b}"}, ["a", "b"]), provider=provider)


def test_copy_with_index_input_columns_and_one_column_per_output() -> None:
    df = pd.DataFrame(
        {"b": ["x", "y"], "a": ["1", "2"], "other": [True, False]}, index=["r1", "r2"]
    )
    out = text_flow().run_dataframe(df, progress=False)
    assert list(out.columns) == ["b", "a", "other", "out"]
    assert list(out.index) == ["r1", "r2"]
    assert out["out"].tolist() == ["1|x", "2|y"]
    assert "out" not in df.columns  # the input is untouched


def test_numbers_become_strings() -> None:
    df = pd.DataFrame({"a": [1, 2], "b": [2.5, 3.0]})
    out = text_flow().run_dataframe(df, progress=False)
    assert out["out"].tolist() == ["1|2.5", "2|3"]


def test_missing_cells_are_an_error_naming_the_rows_unless_filled() -> None:
    df = pd.DataFrame({"a": ["1", None, "3"], "b": ["x", "y", np.nan]}, index=[10, 11, 12])
    with pytest.raises(InputError) as err:
        text_flow().run_dataframe(df, progress=False)
    messages = " ".join(p.message for p in err.value.problems)
    assert "index 11" in messages and "index 12" in messages
    out = text_flow().run_dataframe(df, fill="", progress=False)
    assert out["out"].tolist() == ["1|x", "|y", "3|"]


def test_a_filled_numeric_column_comes_back_as_the_text_the_flow_got_as_polars_gives() -> None:
    import polars as pl

    df = pd.DataFrame({"a": [1.0, np.nan, 3.5], "b": ["x", "y", "z"]})
    out = text_flow().run_dataframe(df, fill="none", progress=False)
    assert out["out"].tolist() == ["1|x", "none|y", "3.5|z"]
    # One string column of what the flow was sent, not an object mix of floats and text.
    assert out["a"].dtype == pd.StringDtype() or str(out["a"].dtype) in ("str", "string")
    assert out["a"].tolist() == ["1", "none", "3.5"]
    polars = text_flow().run_dataframe(pl.from_pandas(df), fill="none", progress=False)
    assert polars["a"].dtype == pl.String and polars["a"].to_list() == out["a"].tolist()


def test_columns_map_variables_to_differently_named_columns() -> None:
    df = pd.DataFrame({"A": ["1"], "B": ["2"]})
    out = text_flow().run_dataframe(df, {"a": "A", "b": "B"}, progress=False)
    assert out["out"].tolist() == ["1|2"]


def test_missing_column_and_bad_mapping_are_clear_errors() -> None:
    df = pd.DataFrame({"a": ["1"]})
    with pytest.raises(InputError, match="no column for variable 'b'"):
        text_flow().run_dataframe(df, progress=False)
    with pytest.raises(InputError, match="unknown variable 'zz'"):
        text_flow().run_dataframe(df.assign(b="2"), {"zz": "a"}, progress=False)
    with pytest.raises(InputError, match="lacks"):
        text_flow().run_dataframe(df, {"b": "nope"}, progress=False)


def test_failed_rows_get_an_error_column_and_the_rest_still_run() -> None:
    flow = text_flow(EchoProvider(fail_on="bad"))
    df = pd.DataFrame({"a": ["ok", "bad", "ok2"], "b": ["1", "2", "3"]})
    out = flow.run_dataframe(df, progress=False)
    assert out["out"].tolist()[0] == "text:ok|1"
    assert out["out"].tolist()[2] == "text:ok2|3"
    assert out["out"].isna().tolist() == [False, True, False]
    assert out["error"].isna().tolist() == [True, False, True]
    assert "model refused" in out.loc[1, "error"]
    # Text columns are pandas' string dtype: a failed row's output is <NA>, not None.
    assert out["out"].dtype == pd.StringDtype() and out["error"].dtype == pd.StringDtype()
    assert out.loc[1, "out"] is pd.NA and out.loc[0, "error"] is pd.NA


def test_no_error_column_when_every_row_succeeds() -> None:
    out = text_flow().run_dataframe(pd.DataFrame({"a": ["1"], "b": ["2"]}), progress=False)
    assert "error" not in out.columns


def test_output_named_like_an_input_column_does_not_overwrite_it() -> None:
    flow = flownb.load_flow(make_flow({"a": "<{a}>"}, ["a"]))
    with pytest.warns(UserWarning, match="a_output"):
        out = flow.run_dataframe(pd.DataFrame({"a": ["1"]}), progress=False)
    assert out["a"].tolist() == ["1"] and out["a_output"].tolist() == ["<1>"]


def test_empty_dataframe_gives_empty_output_columns() -> None:
    out = text_flow().run_dataframe(pd.DataFrame({"a": [], "b": []}), progress=False)
    assert len(out) == 0 and "out" in out.columns


def test_interrupt_keeps_finished_rows_inline_path() -> None:
    flow = text_flow(InlineEcho(raise_at=(4, KeyboardInterrupt())))
    df = pd.DataFrame({"a": list("abcdef"), "b": list("123456")})
    with pytest.warns(UserWarning, match="interrupted: 3 of 6 rows"):
        out = flow.run_dataframe(df, progress=False)
    assert out["out"].tolist()[:3] == ["a|1", "b|2", "c|3"]
    assert out["out"][3:].isna().all()
    assert out["error"].tolist()[3:] == [INTERRUPTED] * 3


def test_interrupt_keeps_finished_rows_async_path() -> None:
    def interrupt_after(n: int) -> None:
        if n == 12:  # a real SIGINT: what Ctrl-C in a terminal or "Interrupt kernel" sends
            os.kill(os.getpid(), signal.SIGINT)

    provider = EchoProvider(delay=0.02, on_call=interrupt_after)
    flow = text_flow(provider)
    df = pd.DataFrame({"a": [str(i) for i in range(40)], "b": ["x"] * 40})
    with pytest.warns(UserWarning, match="interrupted"):
        out = flow.run_dataframe(df, progress=False, concurrency=2)
    done = out["error"].isna()
    assert 0 < done.sum() < 40
    finished = out[done]
    assert finished["out"].tolist() == [f"text:{a}|x" for a in finished["a"]]
    assert (out.loc[~done, "error"] == INTERRUPTED).all()


def test_progress_bar_reports_rows(capsys: pytest.CaptureFixture[str]) -> None:
    df = pd.DataFrame({"a": ["1", "2", "3"], "b": ["x", "y", "z"]})
    text_flow().run_dataframe(df, progress=True)
    assert "3/3" in capsys.readouterr().err
