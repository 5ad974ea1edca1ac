"""The vendor decision: speed per variant, price at scale, the frontier and the choice, from a
three-vendor evaluation through the loopback fakes of OpenAI, Anthropic and Gemini (set
latencies, scripted answers, endpoint prices), compared with figures worked out by hand."""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

import flownb
from flownb import Endpoint
from flownb import scorers as S
from flownb.errors import ConfigError
from flownb.evaluation.decision.frontier import POINTS_ID
from flownb.evaluation.figures import stats
from flownb.show.escape import NO_MATH
from flownb.testing.fake_anthropic import FakeAnthropic
from flownb.testing.fake_gemini import FakeGemini
from flownb.testing.fake_openai import FakeOpenAI
from tests.cli_inprocess import run_cli
from tests.conftest import make_flow

# US dollars per million tokens (input, output), set on each endpoint.
PRICES = {"gpt": (1.0, 2.0), "claude": (3.0, 15.0), "gem": (0.5, 1.0)}
MODELS = {"gpt": "gpt-4o-mini", "claude": "claude-haiku-4-5", "gem": "gemini-2.5-flash"}
PROMPT = "Say something about {topic}"  # 4 words with the topic: 4 input tokens at the fakes


@pytest.fixture
def vendors() -> Iterator[dict[str, FakeOpenAI]]:
    """One fake per vendor, answering at once."""
    with FakeOpenAI() as gpt, FakeAnthropic() as claude, FakeGemini() as gem:
        yield {"gpt": gpt, "claude": claude, "gem": gem}


def _flows(
    fakes: dict[str, FakeOpenAI],
    flow: dict | None = None,
    cached_input: dict[str, float] | None = None,
) -> dict[str, flownb.LocalFlow]:
    kinds = {"gpt": "openai", "claude": "anthropic", "gem": "gemini"}
    flows = {}
    for name, fake in fakes.items():
        inp, out = PRICES[name]
        prices = {"input": inp, "output": out}
        if cached_input is not None:
            prices["cached_input"] = cached_input[name]
        endpoint = Endpoint(
            name,
            kinds[name],
            base_url=fake.url,
            api_key="sk-test-key",
            prices={"*": prices},
        )
        loaded = flownb.load_flow(
            flow or make_flow({"A": PROMPT}, ["topic"]), endpoint=endpoint, provider=kinds[name]
        )
        flows[name] = loaded.with_model(MODELS[name])
    return flows


def _script(fakes: dict[str, FakeOpenAI], fails: dict[str, int]) -> None:
    """Make each fake answer "yes", but "no" to its first ``fails[name]`` topics (x00, ...)."""
    for name, fake in fakes.items():
        replies = {f"x{i:02d}": "no" for i in range(fails[name])}
        fake.configure(replies={**replies, "about": "yes"})


def test_p50_and_p95_are_the_providers_set_latencies_and_cached_rows_keep_them() -> None:
    data = pd.DataFrame({"topic": [f"x{i:02d}" for i in range(8)]})
    # Two seconds apart: more than a loaded machine adds to a loopback round trip (the fakes'
    # threads and the client's loop waiting for a core: half a second was seen with the suite's
    # four workers), so their order holds however busy the machine is.
    latencies = {"gpt": 2.0, "claude": 4.0, "gem": 6.0}
    with (
        FakeOpenAI(latency=2.0) as gpt,
        FakeAnthropic(latency=4.0) as claude,
        FakeGemini(latency=6.0) as gem,
    ):
        flows = _flows({"gpt": gpt, "claude": claude, "gem": gem})
        report = flownb.evaluate(flows, data, progress=False)
        again = flownb.evaluate(flows, data, progress=False)  # every answer from the cache
        sent = [len(f.requests) for f in (gpt, claude, gem)]
    assert sent == [8, 8, 8]  # the second run sent nothing
    summary = report.summary
    p50, p95 = summary["latency_p50_s"], summary["latency_p95_s"]
    assert list(p50.sort_values().index) == list(latencies)  # in the providers' order
    for name, waited in latencies.items():
        # Never below what the provider waited before answering, never above the rows' own
        # time here (what a busy machine adds lands in both; no bound on it is asserted).
        rows = report.results[report.results["variant"] == name]
        assert waited <= p50[name] <= p95[name] <= rows["latency_s"].max()
        row = summary.loc[name]
        assert row["latency_rows"] == 8
        assert row["latency_cached_rows"] == 0
        # Output tokens per second of provider time, over the calls sent.
        fresh = report.results[report.results["variant"] == name]
        expected = fresh["output_tokens"].sum() / fresh["fresh_s"].sum()
        assert row["tokens_per_s"] == pytest.approx(expected)
        assert row["tokens_per_s"] > 0
    cached = again.summary
    assert (cached["latency_cached_rows"] == 8).all()
    assert (cached["latency_unknown_rows"] == 0).all()
    # A cached row counts at the time its answers took when they were bought.
    pd.testing.assert_series_equal(
        cached["latency_p50_s"], summary["latency_p50_s"], check_exact=True
    )
    assert cached["tokens_per_s"].isna().all()  # nothing went to a provider this time


def test_a_rows_provider_time_follows_the_critical_path() -> None:
    # A and B run side by side, C reads A: the row takes two calls' time, not three.
    flow = make_flow({"A": PROMPT, "B": "Other " + PROMPT, "C": "Use {A}"}, ["topic"])
    flow["edges"].append({"id": "chain", "source": "node-A", "target": "node-C"})
    data = pd.DataFrame({"topic": ["x00", "x01", "x02"]})
    with FakeOpenAI(latency=2.0) as gpt:
        report = flownb.evaluate(_flows({"gpt": gpt}, flow), data, progress=False)
        assert len(gpt.requests) == 9
    times = report.results["provider_s"]
    assert times.to_list() == pytest.approx([4.0] * 3, rel=0.1)
    assert report.summary.loc["gpt", "latency_p50_s"] == pytest.approx(4.0, rel=0.1)


def _decision_report(vendors: dict[str, FakeOpenAI]) -> flownb.EvalReport:
    # 20 rows. gpt fails 12 (x00-x11), gem 2 (x00-x01, among gpt's), claude none.
    _script(vendors, {"gpt": 12, "claude": 0, "gem": 2})
    data = pd.DataFrame({"topic": [f"x{i:02d}" for i in range(20)]})
    return flownb.evaluate(_flows(vendors), data, [S.equals("A", "yes")], progress=False)


def test_price_at_a_million_rows_is_the_hand_computed_figure(vendors: dict) -> None:
    report = _decision_report(vendors)
    price = report.price(rows=1_000_000)
    # Each row: 4 input tokens ("Say something about x07") and 1 output token ("yes"), at the
    # endpoint's prices per million tokens, so a million rows cost 4 * input + 1 * output
    # dollars; the OpenAI fake counts the 5 words of the echo it would have sent instead.
    tokens = {"gpt": (4, 5), "claude": (4, 1), "gem": (4, 1)}
    expected = {
        name: tokens[name][0] * inp + tokens[name][1] * out for name, (inp, out) in PRICES.items()
    }
    assert expected == {"gpt": 14.0, "claude": 27.0, "gem": 3.0}
    assert price["list_usd"].to_dict() == pytest.approx(expected)
    assert price.loc["gpt", "batch_usd"] == pytest.approx(expected["gpt"] / 2)
    assert price.loc["claude", "batch_usd"] == pytest.approx(expected["claude"] / 2)
    assert math.isnan(price.loc["gem", "batch_usd"])  # Gemini: no batch API in flownb
    assert (price["rows"] == 1_000_000).all()
    # No judge: nothing to pay for judging, and the total is the variant's own price.
    assert "judge_price_per_row" not in report.summary.columns
    assert price["judges_usd"].to_dict() == {"gpt": 0.0, "claude": 0.0, "gem": 0.0}
    assert price["total_usd"].to_dict() == pytest.approx(expected)
    assert report.summary["usd_per_1m_rows"].to_dict() == pytest.approx(expected)
    assert report.price(rows=10)["list_usd"].to_dict() == pytest.approx(
        {k: v / 1e5 for k, v in expected.items()}
    )
    with pytest.raises(ConfigError, match="whole number of rows"):
        report.price(rows=0)


def test_the_frontier_is_the_hand_computed_pareto_set(vendors: dict) -> None:
    report = _decision_report(vendors)
    frontier = report.frontier()
    # Price per row: gem 3e-6, gpt 14e-6, claude 27e-6; pass rate: gem 0.9, gpt 0.4, claude 1.
    # gpt costs more than gem and passes less: dominated. gem and claude are efficient.
    assert frontier.efficient == ["gem", "claude"]
    assert frontier.dominated == ["gpt"]
    # Wilson intervals: gpt [0.22, 0.61], gem [0.70, 0.97], claude [0.84, 1]: only gem and
    # claude overlap; gpt differs from both by McNemar (12 and 10 discordant rows, one way).
    assert [(a, b) for a, b, _ in frontier.ties] == [("claude", "gem")]
    assert "intervals overlap" in frontier.ties[0][2]
    assert "gem, claude" in frontier.sentence
    assert "cannot tell apart claude and gem" in frontier.sentence
    svg = frontier.svg()
    root = ET.fromstring(svg)
    groups = [g for g in root.iter("{http://www.w3.org/2000/svg}g") if g.get("id") == POINTS_ID]
    assert len(groups) == 1
    uses = list(groups[0].iter("{http://www.w3.org/2000/svg}use"))
    assert len(uses) == 3  # one point per variant
    texts = {"".join(t.itertext()) for t in root.iter("{http://www.w3.org/2000/svg}text")}
    assert {"gpt", "claude", "gem"} <= texts
    html = frontier._repr_html_()
    assert "data:image/svg+xml;base64," in html and "<svg" not in html
    with pytest.raises(ConfigError, match="no quality 'nope'"):
        report.frontier(quality="nope")
    # A scorer as the quality: the same figures here (equals is the only pass/fail scorer).
    assert report.frontier(quality="equals_A").efficient == ["gem", "claude"]


def test_choose_is_the_cheapest_that_clears_the_bars_with_confidence(vendors: dict) -> None:
    report = _decision_report(vendors)
    # gem's lower bound (0.70) clears 0.6 and it is the cheapest.
    assert report.choose(min_quality=0.6).variant == "gem"
    # At 0.8 only claude's lower bound (0.84) clears it.
    choice = report.choose(min_quality=0.8, max_price=3e-5)
    assert choice.variant == "claude"
    assert "Rule: the cheapest variant whose 95% lower bound of pass_rate is at least 0.8" in (
        repr(choice)
    )
    # claude too dear: none. gem's mean (0.9) clears 0.8, its interval does not: more rows.
    none = report.choose(min_quality=0.8, max_price=2e-5, max_p95=60)
    assert none.variant is None
    assert "No variant meets the bars" in repr(none)
    assert none.table.loc["claude", "why"] == "price $0.000027 > $0.000020"
    low, _ = stats.wilson(18, 20)
    expected = math.ceil(20 * ((0.9 - low) / (0.9 - 0.8)) ** 2) - 20
    assert none.more_rows == {"gem": expected}
    assert f"about {expected} more rows" in repr(none)
    assert "gpt" not in none.more_rows  # its mean is under the bar: more rows would not help
    with pytest.raises(ConfigError, match="takes a number"):
        report.choose(min_quality="high")  # type: ignore[arg-type]


def test_each_bar_a_variant_misses_is_said_in_words() -> None:
    from flownb.evaluation.decision.choose import choose_variant

    # One variant per way of missing (or meeting) the price and p95 bars.
    table = pd.DataFrame(
        {
            "quality": [0.9] * 4,
            "quality_low": [0.8] * 4,
            "quality_high": [0.95] * 4,
            "price_per_row": [math.nan, 3e-5, 1e-5, 1e-5],
            "latency_p95_s": [1.0, 2.5, math.nan, 1.0],
        },
        index=["unpriced", "dear_slow", "untimed", "fine"],
    )
    choice = choose_variant(
        table, {}, quality="pass_rate", min_quality=0.5, max_price=2e-5, max_p95=2.0
    )
    assert choice.variant == "fine"
    assert choice.table["why"].to_dict() == {
        "unpriced": "price unknown",
        "dear_slow": "price $0.000030 > $0.000020; p95 2.5 s > 2 s",
        "untimed": "p95 latency unknown",
        "fine": "",
    }
    # Without those bars nothing is missed, whatever is unknown.
    free = choose_variant(
        table, {}, quality="pass_rate", min_quality=0.5, max_price=None, max_p95=None
    )
    assert free.table["meets"].all() and free.variant == "untimed"  # cheapest, first listed


def test_names_are_text_in_the_choice_and_the_frontier(vendors: dict, tmp_path: Path) -> None:
    _script(vendors, {"gpt": 0, "claude": 0, "gem": 0})
    flows = _flows(vendors)
    odd = {"<b>gpt</b> *$x*": flows["gpt"], "claude": flows["claude"]}
    data = pd.DataFrame({"topic": ["x00", "x01"]})
    report = flownb.evaluate(odd, data, progress=False)
    choice = report.choose(min_quality=0.1)
    assert "<b>" not in choice._repr_html_() and "&lt;b&gt;gpt" in choice._repr_html_()
    markdown = choice._repr_markdown_()
    # The one Markdown escaper's form (flownb.show.escape.md_text): "\\$" is what JupyterLab
    # shows as a dollar sign ("\$" it reads as a math delimiter).
    assert "<b>" not in markdown and r"\*\\$x\*" in markdown
    assert "<b>gpt" not in report.frontier()._repr_html_()
    # Written as the rest of the report is: in an element the math typesetters skip, every "$"
    # (the name's, the prices') in a span of its own, so none pairs up as a math delimiter.
    for markup in (choice._repr_html_(), report.frontier()._repr_html_()):
        assert NO_MATH in markup[: markup.index(">")], markup[:80]
        assert re.search(r"(?<!<span>)\$", markup) is None, markup
    assert "*<span>$</span>x*" in choice._repr_html_()
    assert "*<span>$</span>x*" in report.frontier()._repr_html_()
    page = report.save(tmp_path / "r.html")
    text = page.read_text()
    assert "Quality, price and speed" in text and "<b>gpt</b>" not in text


def test_flownb_eval_writes_the_frontier_png(vendors: dict, tmp_path: Path) -> None:
    _script(vendors, {"gpt": 1, "claude": 0, "gem": 0})
    data = tmp_path / "rows.csv"
    data.write_text("topic\nx00\nx01\nx02\n")
    flow = tmp_path / "flow.json"
    import json

    flow.write_text(json.dumps(make_flow({"A": PROMPT}, ["topic"])))
    (tmp_path / "eval.toml").write_text(
        '[[scorers]]\ntype = "equals"\noutput = "A"\nexpected = "yes"\n'
        '[variants.claude]\nendpoint = "claude"\nmodel = "claude-haiku-4-5"\n'
    )
    (tmp_path / "flownb.toml").write_text(
        f'[endpoints.gpt]\nprovider = "openai"\nbase_url = "{vendors["gpt"].url}"\n'
        'api_key_env = "FAKE_KEY"\nprices = { "*" = { input = 1.0, output = 2.0 } }\n'
        f'[endpoints.claude]\nprovider = "anthropic"\nbase_url = "{vendors["claude"].url}"\n'
        'api_key_env = "FAKE_KEY"\nprices = { "*" = { input = 3.0, output = 15.0 } }\n'
    )
    out = tmp_path / "frontier.png"
    run = run_cli(
        "eval", f"gpt={flow}", "--endpoint", "gpt", "--data", str(data),
        "--scorers", "eval.toml", "--frontier", str(out), "--no-progress",
        cwd=tmp_path, env={**_unset_vendor_env(), "FAKE_KEY": "sk-x"},
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "On the frontier of pass_rate" in run.stdout
    assert re.search(r"p50 / p95 s", run.stdout)
    scale = "1,000,000 rows at list price: gpt $14.00 (batch $7.00), claude $27.00 (batch $13.50)"
    assert scale in run.stderr


def _unset_vendor_env() -> dict[str, str | None]:
    """Return an environment override unsetting every OPENAI* and ANTHROPIC* variable."""
    import os

    return {k: None for k in os.environ if k.startswith(("OPENAI", "ANTHROPIC"))}


def test_price_at_scale_prices_cached_prompt_tokens_at_their_rate(vendors: dict) -> None:
    # Each fake reports 2 of the prompt's 4 tokens read from the provider's prompt cache.
    _script(vendors, {"gpt": 0, "claude": 0, "gem": 0})
    for fake in vendors.values():
        fake.configure(cached_tokens=2)
    flows = _flows(vendors, cached_input={"gpt": 0.5, "claude": 0.3, "gem": 0.125})
    data = pd.DataFrame({"topic": ["x00", "x01", "x02"]})
    report = flownb.evaluate(flows, data, progress=False)
    # A million rows: 2 fresh input tokens, 2 cached ones at the cached rate, 1 output token
    # (the OpenAI fake: the 5 words of its echo).
    outputs = {"gpt": 5, "claude": 1, "gem": 1}
    cached_rate = {"gpt": 0.5, "claude": 0.3, "gem": 0.125}
    expected = {
        name: 2 * inp + 2 * cached_rate[name] + outputs[name] * out
        for name, (inp, out) in PRICES.items()
    }
    assert expected == {"gpt": 13.0, "claude": 21.6, "gem": 2.25}
    assert report.price(rows=1_000_000)["list_usd"].to_dict() == pytest.approx(expected)


def _contrast_on_white(rgba: tuple[float, ...]) -> float:
    """WCAG contrast ratio of a colour (blended over white by its alpha) against white."""
    r, g, b, a = rgba
    blended = [a * c + (1 - a) for c in (r, g, b)]
    linear = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in blended]
    luminance = 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]
    return 1.05 / (luminance + 0.05)


def test_the_frontier_names_never_overlap_and_every_point_shows_on_white(tmp_path: Path) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from flownb.evaluation.decision.frontier import Frontier, Point

    # Two vendors at the same place, a third close by, the fastest dominated (faded).
    points = [
        Point("openai-gpt-4o-mini", 0.8, 0.7, 0.9, 1e-5, 2.0),
        Point("anthropic-claude-haiku", 0.8, 0.7, 0.9, 1e-5, 4.0),
        Point("gemini-flash", 0.78, 0.7, 0.9, 1.1e-5, 0.5),
        Point("dear", 0.9, 0.8, 1.0, 5e-5, 6.0),
    ]
    frontier = Frontier(points, quality="pass_rate", price="price", speed="s", ties=[])
    assert "gemini-flash" in frontier.dominated
    fig = frontier.figure()
    renderer = FigureCanvasAgg(fig).get_renderer()
    ax = fig.axes[0]
    names = [t for t in ax.texts if t.get_text() in {p.variant for p in points}]
    assert len(names) == 4
    boxes = [t.get_window_extent(renderer) for t in names]
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            assert not a.overlaps(b), (a, b)
    [dots] = [c for c in ax.collections if c.get_gid() == POINTS_ID]
    faces, edges = dots.get_facecolors(), dots.get_edgecolors()
    assert len(faces) == 4
    for k in range(4):
        edge = edges[k if len(edges) > 1 else 0]
        # Each point is seen on white: its fill, or at least its edge, at 3:1 or more.
        assert max(_contrast_on_white(tuple(faces[k])), _contrast_on_white(tuple(edge))) >= 3
    # The fastest point's own fill is no pale yellow: 1.5:1 or more even faded.
    fastest = min(range(4), key=lambda k: points[k].speed)
    assert _contrast_on_white(tuple(faces[fastest])) >= 1.5
    frontier.save(tmp_path / "frontier.png")


def test_untimed_points_are_grey_and_only_a_timed_frontier_has_a_colour_bar() -> None:
    from flownb.evaluation.decision.frontier import Frontier, Point

    nan = math.nan
    untimed = [Point("a", 0.5, 0.4, 0.6, 1e-5, nan), Point("b", 0.7, nan, 0.8, 2e-5, nan)]
    fig = Frontier(untimed, quality="pass_rate", price="price", speed="s", ties=[]).figure()
    assert len(fig.axes) == 1  # no speed known: no colour bar
    [dots] = [c for c in fig.axes[0].collections if c.get_gid() == POINTS_ID]
    assert [tuple(f[:3]) for f in dots.get_facecolors()] == [(0.5, 0.5, 0.5)] * 2
    # One point timed, at the same speed as nobody else: a colour bar, and the timed one coloured.
    timed = [untimed[0], Point("c", 0.9, 0.8, 1.0, 3e-5, 1.5)]
    fig = Frontier(timed, quality="pass_rate", price="price", speed="s", ties=[]).figure()
    assert len(fig.axes) == 2
    [dots] = [c for c in fig.axes[0].collections if c.get_gid() == POINTS_ID]
    grey, coloured = (tuple(f[:3]) for f in dots.get_facecolors())
    assert grey == (0.5, 0.5, 0.5) and coloured != grey
    # Asked for no speed column: no colour bar even when speeds are known.
    fig = Frontier(timed, quality="pass_rate", price="price", speed=None, ties=[]).figure()
    assert len(fig.axes) == 1
    # Nothing placeable: the picture says so.
    nothing = [Point("x", nan, 0.0, 1.0, 1e-5, 1.0)]
    fig = Frontier(nothing, quality="pass_rate", price="price", speed="s", ties=[]).figure()
    assert [t.get_text() for t in fig.axes[0].texts] == [
        "no variant with a known quality and price"
    ]


def test_the_reports_prices_are_never_broken_across_lines(vendors: dict, tmp_path: Path) -> None:
    report = _decision_report(vendors)
    page = report.save(tmp_path / "report.html").read_text(encoding="utf-8")
    shown = report._repr_html_()
    for html in (page, shown):
        # Every money figure sits whole in a span the style keeps on one line.
        assert re.search(r"\.money \{white-space: nowrap", html)
        figures = re.findall(r'(<span class="money">(?:at least )?)?\$[0-9][0-9.,]*', html)
        assert len(figures) > 6
        assert all(figures), "a price outside a money span"


def test_with_no_variant_chosen_the_advice_names_rows_to_add_and_rows_to_label() -> None:
    from flownb.evaluation.decision.choose import choose_variant

    table = pd.DataFrame(
        {
            "n": [20, 20, 20],
            "quality": [0.75, 0.5, 0.9],
            "quality_low": [0.5, 0.3, 0.8],
            "quality_high": [0.9, 0.7, 1.0],
            "price_per_row": [1e-5, 1e-5, 9e-5],
            "latency_p95_s": [1.0, 1.0, 1.0],
        },
        index=["near", "under", "dear"],
    )
    unscored = {"under": list(range(12)), "dear": [1, 2]}
    choice = choose_variant(
        table, unscored, quality="pass_rate", min_quality=0.625, max_price=5e-5, max_p95=None
    )
    assert choice.variant is None
    # near: its mean clears the bar, its lower bound not yet: (0.25 / 0.125)^2 x 20 - 20 rows.
    assert choice.more_rows == {"near": 60}
    # under: under the bar on its mean, but 12 rows lack a score: label those first (10 shown).
    assert choice.label_rows == {"under": list(range(12))}
    assert "Label under's unscored rows first: 0, 1, 2, 3, 4, 5, 6, 7, 8, 9 and 2 more." in (
        choice.advice
    )
    # dear is over the price bar whatever its quality: no advice about it.
    assert not [line for line in choice.advice if "dear" in line]
    assert "price per row at most $0.00005" in choice.rule and "p95 latency at most any" in (
        choice.rule
    )
    # Nothing within the price bar comes near: said so.
    nothing = choose_variant(
        table.loc[["dear"]], {}, quality="pass_rate", min_quality=0.95, max_price=5e-5, max_p95=2
    )
    assert nothing.advice == [
        "No variant within the price and speed bars comes near the quality bar."
    ]
    with pytest.raises(ConfigError, match=r"choose\(max_p95=...\) takes a number, not True"):
        choose_variant(
            table, {}, quality="pass_rate", min_quality=None, max_price=None, max_p95=True
        )
