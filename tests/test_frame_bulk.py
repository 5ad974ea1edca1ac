"""A frame answered at once (offline, no bar): the same frame and the same run-log rows as the
row-by-row run, whatever the cells hold."""

from __future__ import annotations

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import flownb
from flownb.flowfile.template import Template
from flownb.infra import tracing
from flownb.runtime import logtext, runlog
from tests.conftest import make_flow

# Cells that would break a careless bulk path: JSON and str.format syntax, the separators the
# log's encoding splits on, escapes, non-ASCII and line breaks.
AWKWARD = [
    'say "hi", then {tone}',
    '","',
    "back\\slash\\",
    "{0} {} }{ %s",
    "naïve — 東京 😀",
    "two\nlines\ttab",
    "",
    '\\",\\"',
]
PROMPTS = {"intro": "Intro to {topic} in a {tone} voice.", "title": "{tone}: {topic}"}


def frame() -> pd.DataFrame:
    return pd.DataFrame(
        {"topic": AWKWARD, "tone": list(reversed(AWKWARD))}, index=[10 * i for i in range(8)]
    )


def logged_rows() -> list[dict[str, object]]:
    """Every run-log row but for what differs between two runs of one batch."""
    df = flownb.runs().drop(columns=["run_id", "finished", "latency"])
    return df.to_dict("records")


@pytest.mark.parametrize(
    "outputs",
    [
        None,  # one output per node
        {"both": ["intro", "title"], "topic": ["topic"]},  # joined nodes; a variable passed on
        {"same": ["intro"], "same ": ["title"]},
    ],
)
def test_a_frame_at_once_equals_the_row_by_row_run_and_logs_the_same_rows(
    outputs: dict[str, list[str]] | None,
) -> None:
    flow = flownb.load_flow(make_flow(PROMPTS, ["topic", "tone"], outputs=outputs))
    bulk = flow.run_dataframe(frame(), progress=False, trace=True)
    bulk_log = logged_rows()
    assert len(bulk_log) == len(AWKWARD)
    runlog.open_runlog(flow.config.home).clear()
    by_row = flow.run_dataframe(frame(), progress=True, trace=True)
    pd.testing.assert_frame_equal(bulk, by_row)
    assert bulk_log == logged_rows()
    assert bulk.loc[0, "intro" if outputs else "intro (node)"] == (
        f"Intro to {AWKWARD[0]} in a {AWKWARD[-1]} voice."
    )


def test_the_bulk_run_logs_one_run_per_row_with_its_money() -> None:
    flow = flownb.load_flow(make_flow(PROMPTS, ["topic", "tone"]))
    flow.run_dataframe(frame(), progress=False)
    df = flownb.runs()
    assert list(df["index"]) == list(range(8)) and df["run_id"].nunique() == 1
    assert set(df["model"]) == {"offline"} and not df["error"].notna().any()
    assert (df["cost_usd"] == 0).all() and (df["price_usd"] == 0).all()
    assert (df["unpriced_calls"] == 0).all() and (df["latency"] >= 0).all()
    if tracing.tracer() is None:  # traced (a tracer set by another test), it runs by row
        # Answered at once: one finishing time, the batch's time shared out evenly.
        assert df["finished"].nunique() == 1 and df["latency"].nunique() == 1


def test_a_flow_without_variables_answers_every_row() -> None:
    flow = flownb.load_flow(make_flow({"hi": "Say hi."}))
    df = pd.DataFrame({"unused": ["a", "b", "c"]})
    bulk = flow.run_dataframe(df, progress=False)
    assert list(bulk["hi"]) == ["Say hi."] * 3
    pd.testing.assert_frame_equal(bulk, flow.run_dataframe(df, progress=True))
    logged = flownb.runs()
    assert list(logged["index"]) == [0, 1, 2, 0, 1, 2]
    assert list(logged["inputs"]) == [{}] * 6 and logged["outputs"].iloc[2] == {"hi": "Say hi."}


def test_a_prompt_over_the_limit_fails_its_row_as_row_by_row() -> None:
    flow = flownb.load_flow(make_flow(PROMPTS, ["topic", "tone"]))
    df = pd.DataFrame({"topic": ["ok", "x" * 2_000_000], "tone": ["dry", "dry"]})
    out = flow.run_dataframe(df, progress=False)
    assert out.loc[0, "intro"] == "Intro to ok in a dry voice."
    assert out.loc[1, "error"].startswith("prompt_too_long")


@settings(max_examples=200, deadline=None)
@given(
    st.text(alphabet=st.sampled_from("{}ab \\\"'%0,"), max_size=30),
    st.lists(st.tuples(st.text(), st.text()), min_size=1, max_size=5),
)
def test_rendering_columns_equals_rendering_each_row(
    text: str, rows: list[tuple[str, str]]
) -> None:
    template = Template(text + "{a}{b}{a}", ["a", "b"])
    columns = {"a": [a for a, _ in rows], "b": [b for _, b in rows]}
    assert template.render_columns(columns, len(rows)) == [
        template.render({"a": a, "b": b}) for a, b in rows
    ]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(), max_size=20))
def test_the_logs_string_encoding_splits_back_to_each_string(values: list[str]) -> None:
    import orjson

    parts = logtext.json_strings(values)
    assert [orjson.loads(b'"' + part + b'"') for part in parts] == values
