# ruff: noqa: F811  (pytest fixtures imported from openai_fake are parameters here)
"""evaluate(..., repeats=k): each (variant, row) and its judges run k times, each repeat cached
apart (repeat 0 keeps a plain run's key), so a re-run pays nothing; per-row means, spread, rows
that flip, paired tests on the per-row means; the run log, the batch API, the preview, the HTML
report and the command line carry the repeats."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import ClassVar

import pandas as pd
import pytest

import flownb
from flownb import scorers as S
from flownb.errors import ConfigError
from flownb.evaluation.figures import stats
from flownb.evaluation.record.store import EvalLog
from flownb.providers.base import Call, Generation, Provider
from flownb.providers.offline import OfflineProvider
from flownb.providers.repeat import repeated
from flownb.runtime.cache import CallCache
from flownb.testing.fake_openai import FakeOpenAI
from tests.cli_inprocess import run_cli
from tests.conftest import make_flow, write_flow
from tests.openai_fake import fake, fake_server  # noqa: F401 (fixtures)

pytestmark = pytest.mark.timeout(120)

TWO = make_flow({"intro": "Intro about {topic}.", "title": "Title: {topic}"}, ["topic"])


def test_repeats_pay_k_times_once_and_a_rerun_pays_nothing(fake: FakeOpenAI) -> None:
    fake.configure(replies={S.JUDGE_MARKER: '{"score": {score}, "reason": "r"}'})
    flow = flownb.load_flow(TWO)
    data = pd.DataFrame({"topic": ["owls", "bees", "elks", "bats"]})
    judge = S.judge("intro", "About {topic}?")
    # A plain run first: its calls are repeat 0's, which keeps the key it always had.
    flownb.evaluate({"v": flow}, data, [judge], progress=False)
    single = len(fake.requests)
    assert single == 4 * 2 + 4  # two nodes and one judge call per row
    fake.reset()
    preview = flownb.evaluate({"v": flow}, data, [judge], repeats=3, dry_run=True)
    assert preview.n_calls == 2 * single and preview.n_cached == single
    assert sorted(set(preview.calls["repeat"])) == [0, 1, 2]
    report = flownb.evaluate({"v": flow}, data, [judge], repeats=3, progress=False)
    # The fake answers alike every time: only the repeat in the key made these calls.
    assert len(fake.requests) == preview.n_calls == 2 * single
    assert Counter(b["messages"][-1]["content"] for b in fake.requests).most_common(1)[0][1] == 2
    fake.reset()
    again = flownb.evaluate({"v": flow}, data, [judge], repeats=3, progress=False)
    assert len(fake.requests) == 0
    assert again.repeats == 3 and len(again.runs) == 12 and again.runs["cached"].all()
    # Everything but what this run paid and how long it took, the price per row included.
    paid = ["latency_s", "cached", "total_tokens", "spent_usd", "saved_usd"]
    paid += ["judge_spent_usd", "judge_saved_usd"]
    pd.testing.assert_frame_equal(
        again.results.drop(columns=paid), report.results.drop(columns=paid)
    )
    assert again.runs["repeat"].tolist() == [0, 1, 2] * 4


def test_the_repeat_is_in_the_key_even_where_answers_are_alike() -> None:
    flow = flownb.load_flow(make_flow({"say": "{text}"}, ["text"]), provider="offline")
    offline = flow.provider
    assert isinstance(offline, OfflineProvider) and not offline.cacheable
    keys = {
        r: CallCache.key(
            CallCache.prefix(repeated(offline, r).identity(), "text", {"model": "m"}), "hi"
        )
        for r in range(3)
    }
    plain = CallCache.key(CallCache.prefix(offline.identity(), "text", {"model": "m"}), "hi")
    assert keys[0] == plain and len(set(keys.values())) == 3
    report = flownb.evaluate(
        flow, pd.DataFrame({"text": ["a", "b"]}), S.contains("say", "a"), repeats=2, progress=False
    )
    assert report.runs["say"].tolist() == ["a", "a", "b", "b"]
    assert report.results["passed"].tolist() == [1.0, 0.0] and not report.results["flips"].any()


class Coin(Provider):
    """A cacheable provider whose answer to a prompt alternates: "yes", "no", "yes", ...
    (prompts with "steady" always get "yes"), as a sampled model's might."""

    name: ClassVar[str] = "coin"

    def __init__(self) -> None:
        self.seen: Counter[str] = Counter()

    async def generate(self, call: Call) -> Generation:
        n = self.seen[call.prompt]
        self.seen[call.prompt] += 1
        text = "yes" if "steady" in call.prompt or n % 2 == 0 else "no"
        return Generation(output=text, model="coin-1")


def test_means_spread_flips_and_paired_tests_on_per_row_means() -> None:
    graph = make_flow({"say": "{text}"}, ["text"])
    coin = Coin()
    flow = flownb.load_flow(graph, provider=coin)
    steady = flow.with_prompts({"say": "steady {text}"})
    data = pd.DataFrame({"text": [f"row {i}" for i in range(6)]}, index=list("abcdef"))
    scorer = S.contains("say", "yes")
    report = flownb.evaluate(
        {"coin": flow, "steady": steady}, data, scorer, repeats=3, progress=False
    )
    runs = report.runs
    assert len(runs) == 2 * 6 * 3 and runs["repeat"].tolist() == [0, 1, 2] * 12
    res = report.results.set_index(["variant", "index"])
    # Three draws of each coin row: two "yes" and one "no", in some order.
    assert res.loc["coin", "passed"].tolist() == [pytest.approx(2 / 3)] * 6
    assert res.loc["coin", "contains_say"].tolist() == [pytest.approx(2 / 3)] * 6
    assert res.loc["coin", "flips"].all() and not res.loc["steady", "flips"].any()
    assert res.loc["steady", "passed"].tolist() == [1.0] * 6
    assert len(report.flips) == 6 and set(report.flips["variant"]) == {"coin"}
    spread = report.spread.set_index(["variant", "index"])
    assert spread.loc[("coin", "a"), "passed_std"] == pytest.approx(pd.Series([1, 1, 0]).std())
    assert spread.loc[("coin", "a"), ["passed_min", "passed_max"]].tolist() == [0.0, 1.0]
    assert spread.loc[("steady", "a"), "passed_std"] == 0.0
    summary = report.summary
    assert summary.loc["coin", "pass_rate"] == pytest.approx(2 / 3)
    assert summary.loc["coin", "flips"] == 6 and summary.loc["steady", "flips"] == 0
    # Each repeat's own pass rate over the rows, then their spread.
    per_repeat = runs[runs["variant"] == "coin"].groupby("repeat")["passed"].mean()
    assert summary.loc["coin", "pass_rate_std"] == pytest.approx(per_repeat.std())
    assert summary.loc["coin", "pass_rate_min"] == pytest.approx(per_repeat.min())
    # The paired test compares the per-row means, not the 18 runs as if they were rows.
    means = runs.groupby(["variant", "index"], sort=False)["passed"].mean()
    expected = stats.paired_float_test(means["coin"].tolist(), means["steady"].tolist())
    assert summary.loc["steady", "pass_rate_p"] == pytest.approx(expected)
    # A t interval over the per-row means (every coin row passed 2 of 3 times: no width).
    _, low, high = stats.mean_interval(means["coin"].tolist())
    assert summary.loc["coin", ["pass_rate_low", "pass_rate_high"]].tolist() == [
        pytest.approx(low),
        pytest.approx(high),
    ]
    # Kept in the run log (version 3, every run) and brought back as it was.
    log = EvalLog.read(report.id, report.home)
    assert log.version == 3 and log.repeats == 3
    back = flownb.load_report(report.id)
    assert back.repeats == 3 and len(back.runs) == 36
    pd.testing.assert_series_equal(back.results["passed"], report.results["passed"])
    assert back.results["flips"].tolist() == report.results["flips"].tolist()
    assert back.summary.loc["coin", "flips"] == 6
    # The HTML report shows the spread and the rows that flip.
    html = report.save(Path(report.home) / "r.html").read_text(encoding="utf-8")
    assert "each row ran 3 times" in html and "coin: 6 of 6" in html and "±" in html


def test_bad_repeats_are_refused_in_one_line() -> None:
    flow = flownb.load_flow(make_flow({"say": "{text}"}, ["text"]), provider="offline")
    data = pd.DataFrame({"text": ["a"]})
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ConfigError, match="repeats is a whole number"):
            flownb.evaluate(flow, data, repeats=bad, progress=False)  # type: ignore[arg-type]


def test_batch_api_sends_every_repeat_and_the_run_pays_nothing_live(
    fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake.configure(batch_seconds=0.3, batch_fail_marker="", batch_expire=False)
    monkeypatch.setenv("FLOWNB_BATCH_POLL", "0.05")
    flow = flownb.load_flow(make_flow({"say": "Say {word}"}, ["word"]))
    data = pd.DataFrame({"word": ["owl", "bat"]})
    judge = S.judge("say", "Is it short?", threshold=0.5)
    report = flownb.evaluate(flow, data, judge, batch_api=True, repeats=2, progress=False)
    lines = [json.loads(ln) for up in fake.batches.uploads for ln in up.splitlines()]
    # Two repeats of two rows, and a judge call for each of those outputs.
    assert len(lines) == 8 and len({ln["custom_id"] for ln in lines}) == 8
    assert len(fake.requests) == 0
    assert report.runs["judge_say"].notna().all() and len(report.runs) == 4
    # One batch per repeat for the variant's calls, then one per repeat for the judge's.
    assert fake.batches.created == 4
    again = flownb.evaluate(flow, data, judge, batch_api=True, repeats=2, progress=False)
    assert len(fake.requests) == 0 and fake.batches.created == 4  # all cached: nothing sent
    assert again.results["judge_say"].tolist() == report.results["judge_say"].tolist()


def test_cli_eval_takes_repeats(tmp_path: Path) -> None:
    write_flow(tmp_path / "say.json", make_flow({"say": "{text}"}, ["text"]))
    (tmp_path / "rows.csv").write_text("text\nowl\nbat\n", encoding="utf-8")
    (tmp_path / "eval.toml").write_text(
        '[[scorers]]\ntype = "contains"\noutput = "say"\ntext = "o"\n', encoding="utf-8"
    )
    done = run_cli(
        "eval", "say.json", "--data", "rows.csv", "--scorers", "eval.toml", "--repeats", "2",
        "--no-progress", "--provider", "offline", "--out", "r.json", cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "each row ran 2 times" in done.stdout
    saved = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    assert saved["repeats"] == 2 and [r["repeat"] for r in saved["runs"]] == [0, 1, 0, 1]
