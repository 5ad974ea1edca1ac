# ruff: noqa: F811  (pytest fixtures imported from openai_fake are parameters here)
"""flownb.evaluate end to end: variants of local flows against the loopback fake (one shared
concurrency limit, cache, run log), local and served flows mixed (real uvicorn), Ctrl-C then a
re-run paying only for what is missing, the report's summary statistics, files and diffs, the
dry run, and the command line and magic surfaces."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
from openai_fake import fake, fake_server  # noqa: F401 (fixtures)
from serving import InlineScriptedProvider, Running, run_server, sample_flows

import flownb
from flownb import scorers as S
from flownb.errors import ConfigError
from flownb.evaluation import stats
from flownb.frame import INTERRUPTED
from flownb.providers.base import Call, Generation
from flownb.testing.fake_openai import FakeOpenAI, echo
from tests.conftest import make_flow, write_flow

pytestmark = pytest.mark.timeout(120)

TWO = make_flow({"intro": "Intro about {topic}.", "title": "Title: {topic}"}, ["topic"])


def topics(n: int, marker: str = "") -> pd.DataFrame:
    return pd.DataFrame({"topic": [f"t{i}{marker if i >= n // 2 else ''}" for i in range(n)]})


def test_variants_share_one_limit_and_a_rerun_is_free(fake: FakeOpenAI) -> None:
    fake.configure(latency=0.05, replies={S.JUDGE_MARKER: '{"score": {score}, "reason": "r"}'})
    base = flownb.load_flow(TWO)
    variants = {"base": base, "warm": base.with_params(temperature=0.9)}
    data = topics(8)
    judge = S.judge("intro", "About {topic}?")
    report = flownb.evaluate(variants, data, [judge], concurrency=3, progress=False)
    # 2 variants x 8 rows x 2 nodes, then one judge call per distinct output (the fake echoes
    # the prompt, so both variants' intros are equal and their judge calls are shared).
    assert len(fake.requests) == 32 + 8
    assert fake.peak_in_flight == 3
    res = report.results
    assert res["variant"].tolist() == ["base"] * 8 + ["warm"] * 8
    assert res["intro"].tolist() == [echo(f"Intro about t{i}.") for i in range(8)] * 2
    assert (res["total_tokens"] > 0).all() and not res["cached"].any()
    assert [b.get("temperature") for b in fake.requests[:32]].count(0.9) == 16
    fake.reset()
    again = flownb.evaluate(variants, data, [judge], concurrency=3, progress=False)
    assert fake.requests == []
    assert again.results["cached"].all()
    assert again.results["judge_intro"].tolist() == res["judge_intro"].tolist()
    assert again.diff(report).empty and again.diff(report.id).empty
    logged = flownb.runs()
    assert logged["flow"].value_counts().to_dict() == {
        "flow:base": 16,
        "flow:warm": 16,
        "judge:judge_intro": 32,
    }


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    root = tmp_path_factory.mktemp("eval-serve")
    with run_server(sample_flows(root), root / "home") as running:
        yield running


def test_local_and_served_flows_side_by_side(server: Running, tmp_path: Path) -> None:
    local = flownb.load_flow(
        write_flow(tmp_path / "echo.json", make_flow({"say": "A={a} B={b}"}, ["a", "b"]))
    )
    remote = flownb.Client(server.url, server.key).flow("echo")
    shouty = local.with_prompts({"say": "A={a}! B={b}!"})
    data = pd.DataFrame({"a": ["1", "2", "3"], "b": ["x", "y", "z"], "want": ["1 B", "2 B", "9 B"]})
    report = flownb.evaluate(
        {"local": local, "served": remote, "shouty": shouty},
        data,
        [S.contains("say", S.col("want"))],
        progress=False,
    )
    res = report.results.set_index(["variant", "index"])
    assert res.loc["served", "say"].tolist() == ["A=1 B=x", "A=2 B=y", "A=3 B=z"]
    assert res.loc["served", "say"].tolist() == res.loc["local", "say"].tolist()
    assert res.loc["shouty", "say"].tolist() == ["A=1! B=x!", "A=2! B=y!", "A=3! B=z!"]
    assert res.loc["served", "contains_say"].tolist() == [True, True, False]
    assert res.loc["shouty", "contains_say"].tolist() == [False, False, False]
    summary = report.summary
    assert summary.loc["served", "pass_rate"] == pytest.approx(2 / 3)
    assert summary.loc["served", "errors"] == 0
    html = report.compare()._repr_html_()
    assert "<ins>!</ins>" in html and html.count("<tr>") == 4


def test_ctrl_c_keeps_finished_rows_and_rerun_pays_only_for_the_rest(
    fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLOWNB_TIMEOUT", "60")
    fake.configure(latency=0.01, fail_markers={"hang": "HANG"})
    base = flownb.load_flow(TWO, concurrency=32)  # room for every hanging call: no starving
    variants = {"a": base, "b": base.with_params(temperature=0.5)}
    data = topics(10, marker=" HANG")  # rows 5..9 hang until interrupted
    running = threading.Event()

    def ctrl_c() -> None:
        deadline = time.monotonic() + 30
        while fake.stats()["answered"] < 20 and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.5)
        if running.is_set():
            os.kill(os.getpid(), signal.SIGINT)  # a real Ctrl-C, as the terminal sends it

    threading.Thread(target=ctrl_c, daemon=True).start()
    running.set()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            report = flownb.evaluate(variants, data, [S.contains("intro", "t")], progress=False)
        finally:
            running.clear()
    assert any("interrupted" in str(w.message) for w in caught)
    res = report.results
    finished = res["error"].isna()
    assert finished.sum() == 10 and (res.loc[~finished, "error"] == INTERRUPTED).all()
    assert res.loc[finished, "contains_intro"].all()
    assert not res.loc[~finished, "passed"].any()

    fake.reset()
    fake.configure(fail_markers={})
    again = flownb.evaluate(variants, data, [S.contains("intro", "t")], progress=False)
    asked = [b["messages"][-1]["content"] for b in fake.requests]
    assert len(asked) == 20 and all("HANG" in p for p in asked)  # only the unfinished rows
    assert again.results["passed"].all()
    changed = again.diff(report)
    assert len(changed) == 10 and changed["passed_after"].all()


def test_summary_intervals_and_paired_tests() -> None:
    flow = flownb.load_flow(make_flow({"say": "{text}"}, ["text"]), provider="offline")
    data = pd.DataFrame({"text": [f"row {i}" for i in range(20)]})
    better = flow.with_prompts({"say": "{text} ok"})
    report = flownb.evaluate(
        {"base": flow, "better": better},
        data,
        [S.contains("say", "ok"), S.length("say")],
        progress=False,
    )
    summary = report.summary
    assert summary.loc["base", "contains_say"] == 0.0
    assert summary.loc["better", "contains_say"] == 1.0
    # McNemar exact: 20 discordant pairs all one way, p = 2 / 2**20.
    assert summary.loc["better", "contains_say_p"] == pytest.approx(2 / 2**20)
    assert bool(summary.loc["better", "contains_say_differs"]) is True
    assert summary.loc["better", "length_say"] == summary.loc["base", "length_say"] + 3
    assert bool(summary.loc["better", "length_say_differs"]) is True
    assert pd.isna(summary.loc["base", "contains_say_p"])
    low, high = stats.wilson(5, 10)
    assert (round(low, 4), round(high, 4)) == (0.2366, 0.7634)
    mean, _, hi = stats.mean_interval([1.0, 2.0, 3.0, 4.0])
    assert mean == 2.5 and hi - mean == pytest.approx(3.182 * (1.6666667 / 4) ** 0.5, rel=1e-4)
    assert stats.mcnemar_exact([True, False], [True, False]) == 1.0


def test_save_html_csv_json_and_diff_from_the_run_log(tmp_path: Path, blog_flow_path: Path) -> None:
    flow = flownb.load_flow(blog_flow_path)
    data = pd.DataFrame({"topic": ["owls", "bees"], "tone": ["dry", "warm"]})
    scorers = [S.contains("intro", "dry"), S.length("intro", max=60)]
    first = flownb.evaluate(
        {"a": flow, "b": flow.with_prompts({"Blog intro": "Short {tone}"})},
        data,
        scorers,
        progress=False,
    )
    html = first.save(tmp_path / "r.html").read_text(encoding="utf-8")
    assert html.count("data:image/png;base64,") >= 4 and "file://" not in html
    assert "Content-Security-Policy" in html and "http://" not in html and "https://" not in html
    csv = pd.read_csv(first.save(tmp_path / "r.csv"))
    assert len(csv) == 4 and "contains_intro" in csv.columns
    data_json = json.loads(first.save(tmp_path / "r.json").read_text(encoding="utf-8"))
    assert data_json["id"] == first.id and len(data_json["results"]) == 4
    with pytest.raises(ConfigError, match=r"\.html, \.csv or \.json"):
        first.save(tmp_path / "r.txt")
    # Later, a changed prompt: the diff against the stored evaluation names what changed.
    second = flownb.evaluate(
        {"a": flow, "b": flow.with_prompts({"Blog intro": "A dry intro"})},
        data,
        scorers,
        progress=False,
    )
    changed = second.diff(first.id)
    assert changed[["variant", "index"]].values.tolist() == [["b", 1]]
    assert changed["contains_intro_before"].tolist() == [False]
    assert changed["contains_intro_after"].tolist() == [True]
    with pytest.raises(ConfigError, match="no evaluation 'nope'"):
        second.diff("nope")


def test_dry_run_calls_nothing_and_counts_cache_hits(fake: FakeOpenAI) -> None:
    base = flownb.load_flow(TWO)
    variants = {"base": base, "cold": base.with_params({"title": {"temperature": 0}})}
    data = topics(3)
    preview = flownb.evaluate(variants, data, [S.judge("intro", "ok?")], dry_run=True)
    assert fake.requests == []
    assert preview.n_calls == 2 * 3 * 2 + 2 * 3 and preview.n_cached == 0
    assert "Title: t1" in preview.calls["prompt"].tolist()
    base.run_batch([{"topic": "t0"}, {"topic": "t1"}])
    fake.reset()
    again = flownb.evaluate(variants, data, [], dry_run=True)
    # base rows 0 and 1 are cached; cold shares their intro calls (same params and prompt).
    assert again.n_cached == 6 and again.n_calls == 6
    assert again.est_tokens > 0 and fake.requests == []
    single = base.preview({"topic": "t2"})
    assert single.n_calls == 2 and "Intro about t2." in str(single)


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "flownb", *args],
        capture_output=True, text=True, timeout=120, cwd=cwd, env=os.environ.copy(),
    )  # fmt: skip


def test_cli_eval_gates_on_min_pass_and_run_dry_run(tmp_path: Path, blog_flow_path: Path) -> None:
    (tmp_path / "rows.csv").write_text("topic,tone\nowls,dry\nbees,warm\n", encoding="utf-8")
    (tmp_path / "eval.toml").write_text(
        '[[scorers]]\ntype = "contains"\noutput = "intro"\ntext = { col = "topic" }\n'
        '[[scorers]]\ntype = "contains"\noutput = "intro"\ntext = "dry"\nname = "is_dry"\n'
        '[variants.short]\nprompts = { "Blog intro" = "A dry note on {topic}" }\n',
        encoding="utf-8",
    )
    args = [str(blog_flow_path), "--data", "rows.csv", "--scorers", "eval.toml", "--no-progress"]
    ok = cli("eval", *args, "--out", "report.html", "--min-pass", "0.5", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert "short" in ok.stdout and "is_dry" in ok.stdout
    assert "flownb: cost per variant: blog-intro $0, short $0" in ok.stderr  # offline: free
    assert (tmp_path / "report.html").read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    gate = cli("eval", *args, "--min-pass", "0.9", cwd=tmp_path)
    assert gate.returncode == 1 and "blog-intro 0.500" in gate.stderr
    dry = cli("run", str(blog_flow_path), "--csv", "rows.csv", "--dry-run", cwd=tmp_path)
    assert dry.returncode == 0 and "4 provider call(s)" in dry.stdout
    assert "Write a warm two-sentence intro for a blog post about bees." in dry.stdout


def test_flow_eval_magic(
    tmp_path: Path, blog_flow_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from IPython.core.error import UsageError
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.testing.globalipapp import start_ipython

    start_ipython()
    ip = InteractiveShell.instance()
    monkeypatch.chdir(tmp_path)
    ip.run_line_magic("load_ext", "flownb")
    try:
        flow = flownb.load_flow(blog_flow_path)
        ip.user_ns.update(
            variants={"a": flow, "b": flow.with_prompts({"Blog intro": "dry {topic}"})},
            df=pd.DataFrame({"topic": ["owls"], "tone": ["dry"]}),
            checks=[S.contains("intro", "dry")],
        )
        report = ip.run_line_magic(
            "flow", "eval $variants --df $df --scorers $checks --no-progress -o rep --out r.html"
        )
        assert isinstance(report, flownb.EvalReport) and ip.user_ns["rep"] is report
        assert report.results["contains_intro"].tolist() == [True, True]
        assert (tmp_path / "r.html").is_file()
        with pytest.raises(UsageError, match="not a scorer"):
            ip.run_line_magic("flow", "eval $variants --df $df --scorers $df")
    finally:
        ip.run_line_magic("unload_ext", "flownb")
        for name in ("variants", "df", "checks", "rep"):
            ip.user_ns.pop(name, None)


class StopAt(InlineScriptedProvider):
    """Answers inline like the offline provider; Ctrl-C arrives while row "STOP" runs."""

    def generate_inline(self, call: Call) -> Generation:
        if "STOP" in call.prompt:
            raise KeyboardInterrupt
        return Generation(call.prompt)


@pytest.mark.filterwarnings("ignore:scorer 'judge_intro' runs on the offline provider")
def test_interrupt_before_the_judges_keeps_rows_and_leaves_judges_unscored() -> None:
    flow = flownb.load_flow(TWO, provider=StopAt())
    data = pd.DataFrame({"topic": ["a", "b", "STOP", "d"]})
    with pytest.warns(UserWarning, match="interrupted: 2 of 8 runs finished"):
        report = flownb.evaluate(
            [flow, flow],
            data,
            [S.judge("intro", "ok?"), S.contains("intro", "Intro")],
            progress=False,
        )
    res = report.results
    assert res["variant"].unique().tolist() == ["flow", "flow_1"]
    assert res["error"].isna().tolist() == [True, True, False, False, False, False, False, False]
    assert res["judge_intro"].isna().all()
    assert res["judge_intro_reason"].tolist()[0].startswith("not judged")
    assert res["contains_intro"].tolist()[:2] == [True, True]
