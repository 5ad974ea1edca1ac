# ruff: noqa: F811  (pytest fixtures imported from openai_fake are parameters here)
"""flownb.evaluate end to end: variants of local flows against the loopback fake (one shared
concurrency limit, cache, run log), local and served flows mixed (real uvicorn), Ctrl-C then a
re-run paying only for what is missing, the report's summary statistics, files and diffs, the
dry run, and the command line and magic surfaces."""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

import flownb
import flownb.frames.preview
from flownb import scorers as S
from flownb.errors import ConfigError
from flownb.evaluation.figures import stats
from flownb.frames.run import INTERRUPTED
from flownb.providers.base import Call, Generation
from flownb.testing.fake_openai import FakeOpenAI, echo
from tests.cli_inprocess import CliResult, run_cli
from tests.conftest import make_flow, write_flow
from tests.openai_fake import fake, fake_server  # noqa: F401 (fixtures)
from tests.serving import InlineScriptedProvider, Running, run_server, sample_flows

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


def test_local_and_served_flows_side_by_side(
    server: Running, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
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
    )
    # The bar counts calls as the preview does: a served flow's run is one.
    assert _bar_totals(capsys.readouterr().err) == (9, 9)
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
    # The head, each variant's price per row (a served flow's is not known here), 3 rows.
    assert "<ins>!</ins>" in html and html.count("<tr>") == 5
    assert "price unknown" in html and '<span class="money">$0</span> (rank 1)' in html


def test_ctrl_c_keeps_finished_rows_and_rerun_pays_only_for_the_rest(
    fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Hanging calls are tried again after each 5 s timeout until the Ctrl-C; after it they end
    # within one attempt's timeout (sent, so paid for), and the re-run waits for them.
    monkeypatch.setenv("FLOWNB_TIMEOUT", "5")
    fake.configure(latency=0.01, fail_markers={"hang": "HANG"})
    base = flownb.load_flow(TWO, concurrency=32)  # room for every hanging call: no starving
    variants = {"a": base, "b": base.with_params(temperature=0.5)}
    data = topics(10, marker=" HANG")  # rows 5..9 hang until interrupted
    running = threading.Event()

    def ctrl_c() -> None:
        # Once the five quick rows of both variants (20 calls) are answered and have reached the
        # run log, which records each row as it is handed to the evaluation.
        deadline = time.monotonic() + 60
        while fake.stats()["answered"] < 20 and time.monotonic() < deadline:
            time.sleep(0.02)
        while len(flownb.runs()) < 10 and time.monotonic() < deadline:
            time.sleep(0.02)
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
    # Thumbnails embedded, PNG or JPEG (whichever is smaller: a gradient's JPEG, here).
    assert len(re.findall(r"data:image/(?:png|jpeg);base64,", html)) >= 4
    assert "file://" not in html
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
    # cold's intro calls are base's (same params and prompt): paid once, and so is the judge
    # of their (equal) outputs.
    assert preview.n_calls == 2 * 3 + 3 + 3 and preview.n_cached == 6
    assert "Title: t1" in preview.calls["prompt"].tolist()
    base.run_batch([{"topic": "t0"}, {"topic": "t1"}])
    fake.reset()
    again = flownb.evaluate(variants, data, [], dry_run=True)
    # base rows 0 and 1 are cached; cold shares every intro call (same params and prompt),
    # row 2's too: the run pays for it once, for both variants.
    assert again.n_cached == 7 and again.n_calls == 5
    assert again.est_tokens > 0 and fake.requests == []
    single = base.preview({"topic": "t2"})
    assert single.n_calls == 2 and "Intro about t2." in str(single)


def cli(*args: str, cwd: Path) -> CliResult:
    return run_cli(*args, cwd=cwd)


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
    assert "flownb: money: $0 spent, $0 saved by the cache" in ok.stderr  # offline: free
    assert "price/row (rank)" in ok.stdout and "$0 (1)" in ok.stdout
    assert (tmp_path / "report.html").read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    gate = cli("eval", *args, "--min-pass", "0.9", cwd=tmp_path)
    assert gate.returncode == 1 and "blog-intro 0.500" in gate.stderr
    dry = cli("run", str(blog_flow_path), "--csv", "rows.csv", "--dry-run", cwd=tmp_path)
    assert dry.returncode == 0 and "4 provider call(s)" in dry.stdout
    # A summary first: the totals, then one line per node, then how to see every prompt.
    lines = dry.stdout.splitlines()
    assert lines[0].startswith("preview: 4 provider call(s)") and lines[2] == "calls per node:"
    assert [x.split(":")[0] for x in lines[3:5]] == [
        "  blog-intro / Blog intro (text)",
        "  blog-intro / Header art (image)",
    ]
    assert "2 call(s), 0 cached" in lines[3] and lines[-1] == "every call's prompt: add --details"
    assert "Write a warm two-sentence intro for a blog post about bees." not in dry.stdout
    full = cli(
        "run", str(blog_flow_path), "--csv", "rows.csv", "--dry-run", "--details", cwd=tmp_path
    )
    assert "Write a warm two-sentence intro for a blog post about bees." in full.stdout


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


# -- the preview counts what the run then does ----------------------------------------------------

_BAR = re.compile(r"(\d+)/(\d+) \[")


def _bar_totals(err: str) -> tuple[int, int]:
    """Return the first total the progress bar showed and the count it ended at."""
    shown = _BAR.findall(err)
    assert shown, err
    return int(shown[0][1]), int(shown[-1][0])


def _requests(fake: FakeOpenAI) -> int:
    return len(fake.requests)


def test_dry_run_count_equals_the_calls_then_made_and_the_bar_total(
    fake: FakeOpenAI, capsys: pytest.CaptureFixture[str]
) -> None:
    base = flownb.load_flow(TWO)
    variants = {"base": base, "ask": base.with_prompts({"intro": "Ask about {topic}?"})}
    data = topics(4)
    scorers = [S.judge("intro", "About {topic}?"), S.pick_best("intro", "Which?")]
    # Part of the cache is warm: two rows of the base variant ran before.
    base.run_batch([{"topic": "t0"}, {"topic": "t1"}])
    for _ in range(2):  # then the same evaluation again: everything is cached
        fake.reset()
        preview = flownb.evaluate(variants, data, scorers, dry_run=True)
        assert isinstance(preview, flownb.frames.preview.Preview) and fake.requests == []
        capsys.readouterr()
        flownb.evaluate(variants, data, scorers)
        assert preview.n_calls == _requests(fake)
        err = capsys.readouterr().err
        if preview.n_calls:
            assert _bar_totals(err) == (preview.n_calls, preview.n_calls)
    assert preview.n_calls == 0 and preview.n_unknown == 0


def test_dry_run_renders_judge_prompts_from_offline_outputs(
    fake: FakeOpenAI, capsys: pytest.CaptureFixture[str]
) -> None:
    flow = flownb.load_flow(TWO, provider="offline")
    variants = {"a": flow, "b": flow.with_prompts({"intro": "Other {topic}."})}
    data = pd.concat([topics(3), topics(1)], ignore_index=True)  # row 3 repeats row 0
    scorers = [
        S.judge("intro", "About {topic}?", provider="openai"),
        S.pick_best("intro", "Which?", provider="openai"),
    ]
    preview = flownb.evaluate(variants, data, scorers, dry_run=True)
    judges = preview.calls[preview.calls["variant"].str.startswith("judge:")]
    assert judges["prompt"].notna().all() and preview.n_unknown == 0
    assert "Intro about t1." in judges["prompt"].iloc[1]
    assert "(rendered at run time)" not in str(preview)
    capsys.readouterr()
    flownb.evaluate(variants, data, scorers)
    paid = judges[~judges["cached"]]
    assert len(paid) == 6 + 3 == _requests(fake)  # the repeated row is asked once
    offline = 2 * len(data) * 2  # offline generations count as calls, as the run makes them
    assert preview.n_calls == offline + len(paid)
    assert _bar_totals(capsys.readouterr().err) == (preview.n_calls, preview.n_calls)
    fake.reset()
    again = flownb.evaluate(variants, data, scorers, dry_run=True)
    assert again.n_calls == offline and again.n_cached == len(judges)  # the judges are cached


def test_dry_run_says_how_many_judge_prompts_are_unknown(fake: FakeOpenAI) -> None:
    base = flownb.load_flow(TWO)
    preview = flownb.evaluate(
        {"a": base, "b": base.with_prompts({"intro": "Ask {topic}?"})},
        topics(3),
        [S.judge("intro", "ok?")],
        dry_run=True,
    )
    # b's title calls are a's (paid once); six judge prompts grade outputs made by the run.
    assert preview.n_unknown == 6 and preview.n_calls == 2 * 3 + 3 + 6
    text = str(preview)
    assert "6 of the calls are judge calls whose prompts are unknown" in text.splitlines()[0]
    assert "(unknown: grades an output not generated yet)" in text


# -- what the saved report says --------------------------------------------------------------------


def _text_of(html_text: str) -> str:
    import html

    return html.unescape(re.sub(r"<[^>]+>", "", html_text))


def test_html_report_says_what_was_evaluated_and_escapes_data(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    fake.configure(replies={S.JUDGE_MARKER: '{"score": 0.5, "reason": "<script>r()</script>"}'})
    flow = flownb.load_flow(TWO, name="intro-flow").with_params(temperature=0.3)
    variants = {
        "base": flow,
        "<script>v()</script>": flow.with_prompts({"intro": "The cat sat on {topic} <b>."}),
    }
    data = pd.DataFrame({"topic": ["<script>alert(1)</script>", "mats", "rugs", "sofas"]})
    data.attrs["name"] = "rooms<script>.csv"
    report = flownb.evaluate(
        variants,
        data,
        [
            S.contains("intro", S.col("topic")),
            S.judge("intro", "Is it <script>good</script>?", threshold=0.4),
            S.pick_best("intro", "Which?"),
        ],
        progress=False,
    )
    assert isinstance(report, flownb.EvalReport)
    page = report.save(tmp_path / "r.html").read_text(encoding="utf-8")
    assert "<script" not in page.lower()  # every value that came from data is escaped
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    text = _text_of(page)
    title = re.search(r"<title>(.*?)</title>", page, re.DOTALL)
    today = time.strftime("%Y-%m-%d", time.gmtime())
    assert title is not None and "intro-flow" in title.group(1) and today in title.group(1)
    assert report.id not in title.group(1)
    # The header: prompts, model parameters, provider and endpoint, model, data set, scorers.
    for expected in (
        "Intro about {topic}.",
        "The cat sat on {topic} <b>.",
        "temperature=0.3",
        "openai at http://127.0.0.1:",
        "model gpt-4o-mini",
        "rooms<script>.csv: 4 rows",
        "contains('intro', col('topic'))",
        "judge('intro', 'Is it <script>good</script>?', threshold=0.4)",
        "pick_best('intro', 'Which?')",
    ):
        assert expected in text, expected
    # The summary with intervals, rates as percentages; the plot as an embedded SVG.
    assert re.search(r"\d+(\.\d+)?% \[\d+(\.\d+)?%, \d+(\.\d+)?%\]", text)
    svg = re.search(r'src="data:image/svg\+xml;base64,([A-Za-z0-9+/=]+)"', page)
    assert svg is not None and b"<svg" in base64.b64decode(svg.group(1))
    assert "width: 100%" in page and "max-width: 420px" not in page
    # pick_best's win rate has a real interval, not [100%, 100%].
    summary = report.summary
    winner = summary["pick_best_intro"].idxmax()
    assert summary.loc[winner, "pick_best_intro_low"] < summary.loc[winner, "pick_best_intro"]
    assert "100% [100%, 100%]" not in text and "0% [0%, 0%]" not in text
    saved = json.loads(report.save(tmp_path / "r.json").read_text(encoding="utf-8"))
    assert saved["context"]["dataset"] == {
        "name": "rooms<script>.csv",
        "rows": 4,
        "columns": ["topic"],
    }
    assert saved["context"]["variants"][1]["nodes"][0]["prompt"] == "The cat sat on {topic} <b>."


def test_html_numbers_have_one_style_and_diffs_keep_their_spaces(tmp_path: Path) -> None:
    flow = flownb.load_flow(
        make_flow({"say": "the cat sat on {text}"}, ["text"]), provider="offline"
    )
    data = pd.DataFrame({"text": [f"row {i}" for i in range(20)]})
    other = flow.with_prompts({"say": "the dog sat on {text} ok"})
    report = flownb.evaluate(
        {"base": flow, "other": other},
        data,
        [S.contains("say", "ok"), S.length("say")],
        progress=False,
    )
    page = report.save(tmp_path / "r.html").read_text(encoding="utf-8")
    summary = page[page.index("<h2>Summary") : page.index("<h2>Side by side")]
    assert "p<0.001" in summary  # McNemar's 2 / 2**20
    assert not re.search(r"\d[eE][-+]?\d", _text_of(summary))  # no exponent notation
    assert "0% [0%, 16.1%]" in summary and "100% [83.9%, 100%]" in summary
    # Lengths 20 (rows 0-9) and 21: the mean and its t interval in 3 significant digits.
    assert "20.5 [20.3, 20.7]" in summary and "23.5 [23.3, 23.7]" in summary
    cell = "the <del>cat</del> <ins>dog</ins> sat on row 0<ins> ok</ins>"
    assert cell in page
    # Reading the marked text without the deletions gives the variant's output, spaces kept.
    kept = re.sub(r"<del>.*?</del> ?", "", cell)
    assert _text_of(kept) == "the dog sat on row 0 ok"


# -- flownb eval on the command line ------------------------------------------------------------


def test_cli_eval_banner_intervals_map_and_help(tmp_path: Path, blog_flow_path: Path) -> None:
    (tmp_path / "ideas.csv").write_text("subject,tone\nowls,dry\nbees,warm\n", encoding="utf-8")
    (tmp_path / "eval.toml").write_text(
        '[[scorers]]\ntype = "contains"\noutput = "intro"\ntext = { col = "subject" }\n'
        '[[scorers]]\ntype = "length"\noutput = "intro"\n',
        encoding="utf-8",
    )
    args = [str(blog_flow_path), "--data", "ideas.csv", "--scorers", "eval.toml", "--no-progress"]
    ok = cli("eval", *args, "--map", "topic=subject", "--out", "r.html", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert "flownb: provider: offline" in ok.stderr.splitlines()[0]
    assert "100% [34.2%, 100%]" in ok.stdout  # contains: a rate with its Wilson interval
    assert re.search(r"\d+\.?\d* \[\d+\.?\d*, \d+\.?\d*\]", ok.stdout)  # length: mean [t]
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert "ideas.csv: 2 rows" in _text_of(page)
    bad = cli("eval", *args, "--map", "topic", cwd=tmp_path)
    assert bad.returncode == 2 and "--map" in bad.stderr and "provider" not in bad.stderr
    judged = tmp_path / "judge.toml"
    judged.write_text('[[scorers]]\ntype = "judge"\noutput = "intro"\nrubric = "ok?"\n')
    refused = cli(
        "eval", *args[:3], "--scorers", str(judged), "--map", "topic=subject", cwd=tmp_path
    )
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1
    assert "offline" in refused.stderr and "provider" in refused.stderr
    help_text = cli("eval", "--help", cwd=tmp_path).stdout
    assert re.search(r"--concurrency N\s+Most provider calls in flight", help_text)
    assert "--map VAR=COLUMN" in help_text
