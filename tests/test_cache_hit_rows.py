# ruff: noqa: F811  (pytest fixtures imported from openai_fake are parameters here)
"""Rows whose every call is in the cache are answered in bulk, a chunk at a time, outside the
engine's workers: the same results, cached outputs, prices and run-log rows as a row run on its
own (the row-by-row path), the others still run, and every observer sees each row once."""

from __future__ import annotations

import pytest

import flownb
from flownb.runtime.result import RunResult
from flownb.testing.fake_openai import FakeOpenAI
from tests.conftest import make_flow
from tests.openai_fake import fake, fake_server  # noqa: F401 (fixtures)

PROMPTS = {"intro": "Intro about {topic}.", "title": "Title, {tone}, about {topic}."}
# Columns of the run log that differ from run to run, whatever the path.
_PER_RUN = ["run_id", "finished", "latency"]


def _batch(n: int, tag: str = "") -> list[dict[str, str]]:
    return [{"topic": f"{tag}t{i}", "tone": ("dry", "warm")[i % 2]} for i in range(n)]


def test_a_partly_cached_batch_answers_its_hits_as_the_row_by_row_path_does(
    fake: FakeOpenAI,
) -> None:
    flow = flownb.load_flow(make_flow(PROMPTS, ["topic", "tone"]))
    batch = _batch(300)
    # Every third row cached, and one node of every fifth: those rows are not fully cached.
    flow.run_batch(batch[::3])
    flow.run_batch([{"topic": r["topic"]} | {"tone": "x"} for r in batch[::5]])
    sent = len(fake.requests)
    results = flow.run_batch(batch)
    cached_rows = len(batch[::3])
    assert len(fake.requests) - sent == 2 * (len(batch) - cached_rows) - len(
        [i for i in range(0, len(batch), 5) if i % 3]  # their intro was cached
    )
    # The row-by-row path: each row on its own (a one-row batch is not looked up ahead).
    alone = [flow.run_batch([row])[0] for row in batch[:24]]
    assert len(fake.requests) - sent == 2 * (len(batch) - cached_rows) - len(
        [i for i in range(0, len(batch), 5) if i % 3]
    )
    for i, (got, want) in enumerate(zip(results, alone, strict=False)):
        assert got == want and dict(got.inputs) == dict(want.inputs)
        assert got.price == want.price and got.trace == want.trace and got.truncated == ()
        if i % 3 == 0:  # answered from the cache in both runs
            assert got.cached == want.cached and got.cost == want.cost == 0
            assert got.cache_saving == want.cache_saving
    assert all(results[i].cached == {"intro", "title"} for i in range(0, len(batch), 3))
    # Each row of the batch has answer objects of its own, with a time of its own.
    gens = [g for r in results for g in r.generations]
    assert len({id(g) for g in gens}) == len(gens) == 2 * len(batch)
    assert all(g.latency >= 0 for g in gens) and all(r.latency >= 0 for r in results)

    log = flownb.runs()
    run_ids = list(dict.fromkeys(log["run_id"]))
    bulk = log[log["run_id"] == run_ids[2]].sort_values("index").reset_index(drop=True)
    assert list(bulk["index"]) == list(range(len(batch)))
    one_by_one = log[log["run_id"].isin(run_ids[3:])].reset_index(drop=True)
    assert len(one_by_one) == 24
    for i in range(0, 24, 3):  # fully cached in both runs
        got = bulk.loc[i].drop([*_PER_RUN, "index"]).to_dict()
        want = one_by_one.loc[i].drop([*_PER_RUN, "index"]).to_dict()
        assert _same(got, want), (i, got, want)


def _same(a: dict[str, object], b: dict[str, object]) -> bool:
    """Whether two log rows hold the same values (NaN equal to NaN)."""
    return a.keys() == b.keys() and all(a[k] == b[k] or (a[k] != a[k] and b[k] != b[k]) for k in a)


def test_a_cached_rerun_reports_each_row_once_to_every_kind_of_observer(
    fake: FakeOpenAI, capsys: pytest.CaptureFixture[str]
) -> None:
    flow = flownb.load_flow(make_flow(PROMPTS, ["topic", "tone"]))
    batch = _batch(300, "o")
    first = flow.run_batch(batch)
    sent = len(fake.requests)
    seen: list[int] = []

    def plain(i: int, result: RunResult | None, exc: BaseException | None) -> None:
        assert exc is None and result == first[i]
        seen.append(i)

    flow.run_each(batch, plain)  # a callback of the caller's: one call per row
    assert sorted(seen) == list(range(len(batch)))
    capsys.readouterr()
    again = flow.run_batch(batch, progress=True)  # the bar counts every row
    assert f"{len(batch)}/{len(batch)}" in capsys.readouterr().err
    assert again == first and len(fake.requests) == sent
    assert [r.price for r in again] == [r.price for r in first]
    log = flownb.runs()
    last = log[log["run_id"] == log["run_id"].iloc[-1]]
    assert sorted(last["index"]) == list(range(len(batch))) and last["cached"].all()


def _chained() -> dict:
    """A flow whose title node reads the intro node's output."""
    flow = make_flow({"intro": "Intro about {topic}.", "title": "Title for {intro}."}, ["topic"])
    flow["edges"].append(
        {
            "id": "e-intro-title",
            "source": "node-intro",
            "sourceHandle": "output",
            "target": "node-title",
            "targetHandle": "variables",
        }
    )
    return flow


@pytest.mark.parametrize(
    ("exported", "cached"),
    [
        (_chained(), {"intro", "title"}),
        # An output joining a node and a variable: the results are made the engine's own way.
        (
            make_flow(
                PROMPTS, ["topic", "tone"], outputs={"both": ["intro", "tone"], "title": ["title"]}
            ),
            {"title"},  # "both" joins a variable: not an output of the cache alone
        ),
    ],
    ids=["chained", "joined"],
)
def test_other_flows_rerun_from_the_cache_with_the_same_results(
    fake: FakeOpenAI, exported: dict, cached: set[str]
) -> None:
    flow = flownb.load_flow(exported)
    batch = [{"topic": f"c{i % 5}", "tone": "dry"} for i in range(40)]
    batch = [{k: v for k, v in row.items() if k in flow.variables} for row in batch]
    first = flow.run_batch(batch)
    sent = len(fake.requests)
    assert sent == 10  # 5 topics x 2 nodes, each prompt bought once
    again = flow.run_batch(batch)
    assert again == first and len(fake.requests) == sent
    assert [r.entries for r in again] == [r.entries for r in first]
    assert all(r.cached == cached for r in again)
    assert [r.price for r in again] == [r.price for r in first]
    gens = [g for r in again for g in r.generations]
    assert len({id(g) for g in gens}) == len(gens) == 80
