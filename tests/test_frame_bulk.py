"""A frame answered at once (offline, with or without a bar or a meter): the same frame, the same
run-log rows and the same money as the row-by-row run, whatever the flow and the cells hold."""

from __future__ import annotations

from collections.abc import Iterator

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import flownb
from flownb.flowfile.template import Template
from flownb.frames.run import run_dataframe
from flownb.infra import tracing
from flownb.providers.base import Call
from flownb.providers.offline import OfflineProvider
from flownb.providers.registry import PROVIDERS
from flownb.runtime import columns, logtext, runlog
from flownb.show.meter import CostMeter
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


class RowByRow(OfflineProvider):
    """The offline provider's answers, asked for one call at a time: the row path."""

    def texts_inline(self, call: Call, prompts: list[str]) -> tuple[list[str], str | None] | None:
        return None


@pytest.fixture(autouse=True)
def row_by_row() -> Iterator[None]:
    PROVIDERS.register("offline-rows", RowByRow)
    yield
    PROVIDERS.reset()


def paths(flow_json: dict, df: pd.DataFrame) -> dict[str, tuple[pd.DataFrame, list, str]]:
    """Run ``df`` through every path (the row path, and at once with and without a bar and a
    meter); return each path's frame, run-log rows and meter line."""
    done = {}
    for name, provider, progress in [
        ("rows", "offline-rows", True),
        ("bulk", "offline", False),
        ("bulk+bar", "offline", True),
    ]:
        flow = flownb.load_flow(flow_json, provider=provider)
        meter = CostMeter()
        frame = run_dataframe(flow, df, progress=progress, trace=True, meter=meter)
        done[name] = (frame, logged_rows(), meter.total_line())
        runlog.open_runlog(flow.config.home).clear()
    return done


def assert_same(done: dict[str, tuple[pd.DataFrame, list, str]]) -> None:
    frame, logged, line = done.pop("rows")
    for got, got_logged, got_line in done.values():
        pd.testing.assert_frame_equal(got, frame)
        assert got_logged == logged and got_line == line


NAMES = ["a", "b", "c"]
CELLS = st.text(max_size=12) | st.sampled_from(AWKWARD)


@st.composite
def flows_and_frames(draw: st.DrawFn) -> tuple[dict, pd.DataFrame]:
    """A flow of 1-3 text nodes reading 0-3 variables (in any text, with str.format and JSON
    syntax), its outputs one per node, several nodes joined or a variable passed on; and a
    frame of 1-12 rows of any cells."""
    variables = draw(st.lists(st.sampled_from(NAMES), max_size=3, unique=True))
    slot = st.sampled_from([f"{{{v}}}" for v in variables]) if variables else st.just("")
    piece = st.text(alphabet=st.sampled_from('ab {}",\\n'), max_size=6) | slot
    prompts = {
        f"n{k}": "P" + "".join(draw(st.lists(piece, max_size=5)))
        for k in range(draw(st.integers(1, 3)))
    }
    outputs = None
    if draw(st.booleans()):
        nodes = list(prompts)
        outputs = {"joined": nodes, "first": nodes[:1]}
        if variables:
            outputs["passed"] = [variables[0]]
    rows = draw(st.integers(1, 12))
    df = pd.DataFrame(
        {v: draw(st.lists(CELLS, min_size=rows, max_size=rows)) for v in variables or ["x"]},
        index=draw(st.sampled_from([list(range(rows)), [f"r{i}" for i in range(rows)]])),
    )
    return make_flow(prompts, variables, outputs=outputs), df


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(flows_and_frames())
def test_every_path_gives_the_row_paths_frame_log_and_money(
    case: tuple[dict, pd.DataFrame],
) -> None:
    assert tracing.tracer() is None  # untraced (conftest): a traced run has only the row path
    flow_json, df = case
    assert_same(paths(flow_json, df))


def test_a_batch_of_several_chunks_equals_the_row_path_and_logs_one_run() -> None:
    rows = 2 * columns.CHUNK_MIN + 500  # three chunks
    df = pd.DataFrame({"topic": [f"t{i} {AWKWARD[i % 8]}" for i in range(rows)], "tone": "dry"})
    done = paths(make_flow(PROMPTS, ["topic", "tone"]), df)
    assert len(done["bulk"][1]) == rows
    assert_same(done)
    flownb.load_flow(make_flow(PROMPTS, ["topic", "tone"])).run_dataframe(df)
    logged = flownb.runs()
    assert logged["run_id"].nunique() == 1 and list(logged["index"]) == list(range(rows))


def test_the_chunk_size_rule() -> None:
    assert columns.chunk_rows(10) == columns.CHUNK_MIN
    assert columns.chunk_rows(100_000) == 5_000  # a twentieth: the bar moves by 5%
    assert columns.chunk_rows(10_000_000) == columns.CHUNK_MAX


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
    rowwise = flownb.load_flow(
        make_flow(PROMPTS, ["topic", "tone"], outputs=outputs), provider="offline-rows"
    )
    by_row = rowwise.run_dataframe(frame(), progress=True, trace=True)
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
    # Answered at once: one finishing time, the batch's time shared out evenly.
    assert df["finished"].nunique() == 1 and df["latency"].nunique() == 1


def test_a_flow_without_variables_answers_every_row() -> None:
    flow = flownb.load_flow(make_flow({"hi": "Say hi."}))
    df = pd.DataFrame({"unused": ["a", "b", "c"]})
    bulk = flow.run_dataframe(df, progress=False)
    assert list(bulk["hi"]) == ["Say hi."] * 3
    rowwise = flownb.load_flow(make_flow({"hi": "Say hi."}), provider="offline-rows")
    pd.testing.assert_frame_equal(bulk, rowwise.run_dataframe(df, progress=True))
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


@settings(max_examples=100, deadline=None)
@given(
    st.dictionaries(st.text(max_size=5), st.text(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.text(), max_size=3),
    st.integers(0, 10**6),
)
def test_rows_stored_as_columns_read_back_as_the_rows(
    given_values: dict[str, str], answers: dict[str, str], first: int
) -> None:
    import orjson

    n = 3
    text = logtext.columns_text(
        {k: [v] * n for k, v in given_values.items()},
        {k: [v] * n for k, v in answers.items()},
        [1.5, "m"],
        [0.1, None],
        first=first,
        rows=n,
    )
    rows = logtext.expand(orjson.loads(text))
    assert rows == [[first + i, 1.5, "m", given_values, answers, 0.1, None] for i in range(n)]
    assert rows[0][3] is not rows[1][3]  # each row's dicts its own
