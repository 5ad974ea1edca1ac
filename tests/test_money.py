"""Money that survives the cache: a three-vendor evaluation (OpenAI, Anthropic and Gemini
loopback fakes) judged on a fourth endpoint, run cold, half cached and fully cached; the
judges' bill apart; provider prompt caching priced at its rates; images priced per image; a
partly priced run shown as "at least"."""

# ruff: noqa: F811

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner
from genai_prices import Usage, calc_price

import flownb
from flownb import scorers as S
from flownb.config.image_prices import AS_OF, IMAGE_PRICES, SOURCE, image_price
from flownb.evaluation.figures.money import money_text
from flownb.providers.anthropic.provider import AnthropicProvider
from flownb.runtime.cache import open_cache
from flownb.show.meter import CostMeter, usd
from flownb.testing.fake_anthropic import FakeAnthropic
from flownb.testing.fake_gemini import FakeGemini
from flownb.testing.fake_openai import FakeOpenAI
from tests.conftest import make_flow, write_flow
from tests.openai_fake import fake, fake_server  # noqa: F401 (fixtures)
from tests.vendor_fakes import (  # noqa: F401 (fixtures, used as parameters)
    anthropic_fake,
    anthropic_server,
    flow_with,
    gemini_fake,
    gemini_server,
)

TOPICS = ["owls", "cats", "moss", "tides"]
MODELS = {"gpt": "gpt-4o-mini", "claude": "claude-haiku-4-5", "gemini": "gemini-2.5-flash"}
JUDGE_MODEL = "claude-sonnet-4-6"


def _price(provider_id: str, model: str, inp: int, out: int, **kw: int) -> float:
    usage = Usage(input_tokens=inp, output_tokens=out, **kw)
    return float(calc_price(usage, model, provider_id=provider_id).total_price)


@pytest.fixture
def judge_fake() -> Iterator[FakeAnthropic]:
    """A fourth endpoint, for the judge: another Anthropic fake."""
    with FakeAnthropic() as server:
        yield server


def _variants() -> dict[str, flownb.LocalFlow]:
    flow = flow_with({"A": {}})
    return {
        "gpt": flownb.load_flow(flow, provider="openai").with_params(model=MODELS["gpt"]),
        "claude": flownb.load_flow(flow, provider="anthropic").with_params(model=MODELS["claude"]),
        "gemini": flownb.load_flow(flow, provider="gemini").with_params(model=MODELS["gemini"]),
    }


def _evaluate(judge_fake: FakeAnthropic, rows: int = len(TOPICS)) -> flownb.EvalReport:
    judge = S.judge(
        "A",
        "Is this about {topic}?",
        provider=AnthropicProvider(api_key="not-a-real-key", base_url=judge_fake.url),
        model=JUDGE_MODEL,
        threshold=0.5,
    )
    data = pd.DataFrame({"topic": TOPICS[:rows]})
    report = flownb.evaluate(_variants(), data, [judge], progress=False)
    assert isinstance(report, flownb.EvalReport)
    return report


@pytest.fixture
def three_vendors(
    fake: FakeOpenAI,
    anthropic_fake: FakeAnthropic,
    gemini_fake: FakeGemini,
    judge_fake: FakeAnthropic,
) -> tuple[FakeOpenAI, FakeAnthropic, FakeGemini, FakeAnthropic]:
    """The three vendors' fakes, each answering its own text (so no two variants' outputs, and
    no two judge prompts, are alike) and reporting one cached prompt token per answer."""
    fake.configure(replies={"about": "a GPT line"}, cached_tokens=1)
    anthropic_fake.configure(replies={"about": "a Claude line of copy"}, cached_tokens=1)
    gemini_fake.configure(replies={"about": "Gemini says this"}, cached_tokens=1)
    judge_fake.configure(replies={S.JUDGE_MARKER: '{"score": {score}, "reason": "graded"}'})
    return fake, anthropic_fake, gemini_fake, judge_fake


MONEY = ["price_per_row", "judge_price_per_row", "prompt_cache_saved_per_row"]


def test_price_per_row_is_the_same_cold_half_cached_and_fully_cached(
    three_vendors: tuple[FakeOpenAI, FakeAnthropic, FakeGemini, FakeAnthropic],
    flownb_env: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    judge_fake = three_vendors[3]
    cold = _evaluate(judge_fake)  # a first run: every call paid
    # Another FLOWNB_HOME (an empty cache): half the rows first, then all of them, twice.
    monkeypatch.setenv("FLOWNB_HOME", str(tmp_path / "second-home"))
    _evaluate(judge_fake, rows=2)
    for server in three_vendors:
        server.reset()
    half = _evaluate(judge_fake)
    assert [len(s.requests) for s in three_vendors] == [2, 2, 2, 6]  # only the new rows paid
    full = _evaluate(judge_fake)
    assert [len(s.requests) for s in three_vendors] == [2, 2, 2, 6]  # nothing more

    s_cold, s_half, s_full = cold.summary, half.summary, full.summary
    for name in MONEY:
        assert list(s_half[name]) == pytest.approx(list(s_cold[name]), rel=1e-12)
        assert list(s_full[name]) == pytest.approx(list(s_cold[name]), rel=1e-12)
        assert (s_cold[name] > 0).all()
    # The list price by hand: OpenAI's 3 prompt tokens ("A about owls"), 1 of them a cache read
    # at its rate, and 4 answer tokens (the fake counts its echo's words).
    gpt_row = _price("openai", MODELS["gpt"], 3, 4, cache_read_tokens=1)
    assert s_full.loc["gpt", "price_per_row"] == pytest.approx(gpt_row, rel=1e-12)
    # What OpenAI's prompt cache saved on the row: the cached token at the fresh input rate.
    gpt_saved = _price("openai", MODELS["gpt"], 3, 4) - gpt_row
    assert s_full.loc["gpt", "prompt_cache_saved_per_row"] == pytest.approx(gpt_saved, rel=1e-9)
    # Claude's 4-word answer; Anthropic reports the cached token apart from input_tokens.
    claude_row = _price("anthropic", MODELS["claude"], 3, 5, cache_read_tokens=1)
    assert s_full.loc["claude", "price_per_row"] == pytest.approx(claude_row, rel=1e-12)
    # Ranked by price per row, 1 the cheapest.
    assert s_full["price_rank"].tolist() == list(s_cold["price_per_row"].rank().astype(int))

    # Spent falls to 0, saved rises; the judges' apart from the variants' and in the total.
    spent = [r.money.loc["total", "spent_usd"] for r in (cold, half, full)]
    saved = [r.money.loc["total", "saved_usd"] for r in (cold, half, full)]
    assert spent[0] > spent[1] > spent[2] == 0.0
    assert saved[0] == 0.0 < saved[1] < saved[2]
    assert saved[2] == pytest.approx(spent[0], rel=1e-12)  # the cache saved what was paid
    bill = cold.money
    assert list(bill.index) == ["gpt", "claude", "gemini", "judges", "total"]
    judge_spent = float(s_cold["judge_spent_usd"].sum())
    assert judge_spent > 0 and bill.loc["judges", "spent_usd"] == pytest.approx(judge_spent)
    assert bill.loc["total", "spent_usd"] == pytest.approx(
        float(s_cold["spent_usd"].sum()) + judge_spent
    )
    # One judge call per variant and row, priced as bought.
    assert (cold.results["judge_calls"] == 1).all()
    for _, row in s_cold.iterrows():
        assert row["judge_price_per_row"] == pytest.approx(row["judge_spent_usd"] / len(TOPICS))
        assert row["price_per_row"] == pytest.approx(row["spent_usd"] / len(TOPICS))
    assert (full.results["price_usd"] == cold.results["price_usd"]).all()


def test_the_report_the_comparison_and_the_cli_show_the_three_figures_apart(
    three_vendors: tuple[FakeOpenAI, FakeAnthropic, FakeGemini, FakeAnthropic],
) -> None:
    judge_fake = three_vendors[3]
    _evaluate(judge_fake)
    report = _evaluate(judge_fake)  # fully cached: spent 0, the price per row unchanged
    summary = report.summary
    html = report._repr_html_()
    assert "price per row (rank)" in html and "judges: price per row" in html
    assert "variants ranked by it" in html
    for _, row in summary.iterrows():
        # Each figure whole in a span kept on one line.
        price = f'<span class="money">{usd(row["price_per_row"])}</span>'
        assert f"<b>{price}</b> ({int(row['price_rank'])})" in html
        judged = f'<span class="money">{usd(row["judge_price_per_row"])}</span>'
        assert f"<td>{judged}</td>" in html
    total = report.money.loc["total"]
    shown = re.sub(r'<span class="money">(.*?)</span>', r"\1", html)
    assert f"total: $0 spent, {usd(total['saved_usd'])} saved by the cache" in shown
    compare = re.sub(r'<span class="money">(.*?)</span>', r"\1", report.compare().data)
    assert "price per row (list price, cached or not; 1 the cheapest)" in compare
    cheapest = summary["price_per_row"].idxmin()
    assert f"{usd(summary.loc[cheapest, 'price_per_row'])} (rank 1)" in compare

    from flownb.cli.eval import money_line, summary_text

    text = summary_text(report)
    assert "price/row (rank)" in text and "judges: price/row" in text
    assert f"{usd(summary.loc[cheapest, 'price_per_row'])} (1)" in text
    assert money_line(report) == (
        f"money: $0 spent, {usd(total['saved_usd'])} saved by the cache (judges: $0 spent, "
        f"{usd(report.money.loc['judges', 'saved_usd'])} saved)"
    )


def test_flownb_eval_prints_the_money_line(fake: FakeOpenAI, tmp_path: Path) -> None:
    path = write_flow(tmp_path / "f.json", flow_with({"A": {"model": "gpt-4o-mini"}}))
    data = tmp_path / "rows.csv"
    data.write_text("topic\nowls\ncats\n")
    config = tmp_path / "eval.toml"
    config.write_text('[[scorers]]\ntype = "length"\noutput = "A"\n')
    args = ["eval", str(path), "--data", str(data), "--scorers", str(config)]
    from flownb.cli.main import cli

    first = CliRunner().invoke(cli, args)
    assert first.exit_code == 0, first.output
    again = CliRunner().invoke(cli, args)
    assert again.exit_code == 0, again.output
    row = _price("openai", "gpt-4o-mini", 3, 4)
    assert f"flownb: money: {usd(2 * row)} spent, $0 saved by the cache" in first.stderr
    assert f"flownb: money: $0 spent, {usd(2 * row)} saved by the cache" in again.stderr
    # The table shows the same price per row on both runs.
    assert f"{usd(row)} (1)" in first.stdout and f"{usd(row)} (1)" in again.stdout


def test_the_live_meter_keeps_the_judges_apart(
    three_vendors: tuple[FakeOpenAI, FakeAnthropic, FakeGemini, FakeAnthropic],
    capsys: pytest.CaptureFixture[str],
) -> None:
    judge_fake = three_vendors[3]
    judge = S.judge(
        "A",
        "Is this about {topic}?",
        provider=AnthropicProvider(api_key="not-a-real-key", base_url=judge_fake.url),
        model=JUDGE_MODEL,
    )
    data = pd.DataFrame({"topic": TOPICS[:2]})
    report = flownb.evaluate(_variants(), data, [judge], progress=True)
    err = capsys.readouterr().err
    bill = report.money
    judges = bill.loc["judges", "spent_usd"]
    assert f"{usd(bill.loc['total', 'spent_usd'])} spent (judges {usd(judges)})" in err


# -- provider prompt caching ----------------------------------------------------------------------


def test_openai_cached_tokens_are_read_and_priced(fake: FakeOpenAI) -> None:
    fake.configure(cached_tokens=2)
    f = flownb.load_flow(flow_with({"A": {"model": "gpt-4o-mini"}}))
    result = f.run({"topic": "owls"})
    assert fake.requests and result.generations[0].usage["cached_tokens"] == 2
    expected = _price("openai", "gpt-4o-mini", 3, 4, cache_read_tokens=2)
    assert expected < _price("openai", "gpt-4o-mini", 3, 4)  # the cache read is cheaper
    assert result.cost == pytest.approx(expected, rel=1e-12)
    again = f.run({"topic": "owls"})  # a hit: nothing spent, the same price
    assert again.cost == 0.0 and again.price == pytest.approx(expected, rel=1e-12)
    log = flownb.runs()
    assert list(log["price_usd"]) == [pytest.approx(expected)] * 2
    assert log["usage_details"].iloc[0]["cached_tokens"] == 2


def test_anthropic_cache_reads_and_writes_are_priced(anthropic_fake: FakeAnthropic) -> None:
    anthropic_fake.configure(cached_tokens=1, cache_write_tokens=1)
    f = flownb.load_flow(flow_with({"A": {"model": "claude-haiku-4-5"}}), provider="anthropic")
    result = f.run({"topic": "owls"})
    body = anthropic_fake.requests[0]
    assert body["model"] == "claude-haiku-4-5"
    usage = result.generations[0].usage
    counts = (usage["prompt_tokens"], usage["cached_tokens"], usage["cache_write_tokens"])
    assert counts == (3, 1, 1)
    expected = _price(
        "anthropic", "claude-haiku-4-5", 3, 4, cache_read_tokens=1, cache_write_tokens=1
    )
    assert result.cost == pytest.approx(expected, rel=1e-12)
    uncached = _price("anthropic", "claude-haiku-4-5", 3, 4)
    assert expected != uncached
    # The read saved, the write cost more than fresh input: what caching saved, either way.
    saved = result.generations[0].prompt_cache_saved
    assert saved == pytest.approx(uncached - expected, rel=1e-9, abs=1e-15)


def test_gemini_cached_content_tokens_are_priced(gemini_fake: FakeGemini) -> None:
    gemini_fake.configure(cached_tokens=2)
    f = flownb.load_flow(flow_with({"A": {"model": "gemini-2.5-flash"}}), provider="gemini")
    result = f.run({"topic": "owls"})
    assert result.generations[0].usage["cached_tokens"] == 2
    expected = _price("google", "gemini-2.5-flash", 3, 4, cache_read_tokens=2)
    assert expected < _price("google", "gemini-2.5-flash", 3, 4)
    assert result.cost == pytest.approx(expected, rel=1e-12)


def test_a_cached_answer_kept_without_its_price_is_priced_from_its_usage(
    fake: FakeOpenAI, flownb_env: Path
) -> None:
    f = flownb.load_flow(flow_with({"A": {"model": "gpt-4o-mini"}}))
    f.run({"topic": "owls"})
    cache = open_cache(flownb_env)
    (key,) = [row[0] for row in cache._db.execute("SELECT key FROM calls")]
    old = cache.get(key)
    assert old is not None
    old.cost = None  # as flownb stored answers before it kept their prices
    cache.put(key, old)
    again = f.run({"topic": "owls"})
    assert again.cost == 0.0
    assert again.price == pytest.approx(_price("openai", "gpt-4o-mini", 3, 4), rel=1e-12)


# -- images ------------------------------------------------------------------------------------


def test_the_image_table_has_its_source_and_the_published_prices() -> None:
    assert SOURCE.startswith("https://platform.openai.com/") and AS_OF
    assert image_price("dall-e-3", {}) == 0.04  # standard 1024x1024, the API's defaults
    assert image_price("dall-e-3", {"quality": "hd", "size": "1792x1024"}) == 0.12
    assert image_price("dall-e-3", {"size": "1024x1792"}) == 0.08
    assert image_price("dall-e-2", {"size": "512x512", "n": 3}) == pytest.approx(3 * 0.018)
    assert image_price("gpt-image-1", {"quality": "high", "size": "1536x1024"}) == 0.25
    assert image_price("gpt-image-1", {"quality": "low", "size": "1024x1024"}) == 0.011
    # What the table cannot know is unknown, never guessed.
    assert math.isnan(image_price("gpt-image-1", {}))  # quality "auto": the API decides
    assert math.isnan(image_price("dall-e-3", {"size": "512x512"}))
    assert math.isnan(image_price("my-image-model", {}))
    assert set(IMAGE_PRICES) == {"dall-e-2", "dall-e-3", "gpt-image-1"}


def test_the_blog_intro_run_is_priced_text_and_image(
    fake: FakeOpenAI, blog_flow_path: Path
) -> None:
    f = flownb.load_flow(blog_flow_path)
    result = f.run({"topic": "owls", "tone": "dry"})
    image, text = (g for g in sorted(result.generations, key=lambda g: g.media is None))
    assert image.model == "dall-e-3" and image.cost == 0.04
    tokens = (text.usage["prompt_tokens"], text.usage["completion_tokens"])
    assert text.cost == pytest.approx(_price("openai", "gpt-4o-mini", *tokens))
    assert result.cost == pytest.approx(0.04 + text.cost) and result.unpriced == 0
    again = f.run({"topic": "owls", "tone": "dry"})
    assert again.cost == 0.0 and again.price == pytest.approx(result.cost)
    by_model = flownb.runs(by="model")
    assert by_model["unpriced"].sum() == 0
    assert by_model["cost_usd"].sum() == pytest.approx(result.cost)
    preview = f.preview([{"topic": "cats", "tone": "dry"}])
    assert preview.calls.set_index("node").loc["Header art", "est_cost_usd"] == 0.04


def test_a_partly_priced_run_shows_at_least_its_priced_part(fake: FakeOpenAI) -> None:
    flow = make_flow({"A": "A about {topic}", "Art": "art of {topic}"}, ["topic"], images=("Art",))
    for node in flow["nodes"]:
        if node["data"].get("name") == "A":
            node["data"]["modelParams"] = {"model": "gpt-4o-mini"}
        elif node["data"].get("name") == "Art":
            node["data"]["modelParams"] = {"model": "my-image-model"}
    f = flownb.load_flow(flow)
    result = f.run({"topic": "owls"})
    text = _price("openai", "gpt-4o-mini", 3, 4)
    assert result.cost == pytest.approx(text) and result.unpriced == 1  # not NaN
    assert result.price == pytest.approx(text)
    log = flownb.runs()
    assert log["cost_usd"].iloc[-1] == pytest.approx(text) and log["unpriced_calls"].iloc[-1] == 1
    assert flownb.runs(by="flow")["unpriced"].iloc[0] == 1
    meter = CostMeter()
    meter.add(result)
    assert meter.text().startswith(f"at least {usd(text)} spent")
    assert money_text(text, 1) == f"at least {usd(text)}"
    assert money_text(math.nan, 0) == "price unknown"


def test_streamed_answers_report_their_cached_tokens_too(
    fake: FakeOpenAI, anthropic_fake: FakeAnthropic, gemini_fake: FakeGemini
) -> None:
    flows = {
        ("openai", "gpt-4o-mini"): flownb.load_flow(flow_with({"A": {"model": "gpt-4o-mini"}})),
        ("anthropic", "claude-haiku-4-5"): flownb.load_flow(
            flow_with({"A": {"model": "claude-haiku-4-5"}}), provider="anthropic", cache=False
        ),
        ("google", "gemini-2.5-flash"): flownb.load_flow(
            flow_with({"A": {"model": "gemini-2.5-flash"}}), provider="gemini", cache=False
        ),
    }
    for server in (fake, anthropic_fake, gemini_fake):
        server.configure(cached_tokens=2)
    for (vendor, model), flow in flows.items():
        *_, result = flow.stream({"topic": "owls"})
        (gen,) = result.generations
        assert gen.usage["cached_tokens"] == 2, vendor
        out = gen.usage["completion_tokens"]
        expected = _price(vendor, model, 3, out, cache_read_tokens=2)
        assert result.cost == pytest.approx(expected, rel=1e-12), vendor
    assert any(b.get("stream") for b in fake.requests)
    assert any(b.get("stream") for b in anthropic_fake.requests)
    assert any(":streamGenerateContent" in p for p in gemini_fake.state.paths)
