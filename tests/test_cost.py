"""Cost in money: the price table, the run log's cost_usd and its totals, estimates before a
run, the meter and the CLI's total line, the evaluation report's cost columns."""

# ruff: noqa: F811

from __future__ import annotations

import ast
import math
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner
from genai_prices import Usage, calc_price

import flownb
from flownb.cli.main import cli as main
from flownb.config.pricing import ESTIMATE_OUTPUT_TOKENS, call_cost, estimate_tokens
from flownb.errors import ConfigError
from flownb.show.meter import CostMeter, usd
from flownb.testing.fake_anthropic import FakeAnthropic
from flownb.testing.fake_openai import FakeOpenAI
from tests.conftest import write_flow
from tests.openai_fake import fake, fake_server  # noqa: F401 (fixtures)
from tests.vendor_fakes import (  # noqa: F401 (fixtures, used as parameters)
    anthropic_fake,
    anthropic_server,
    flow_with,
)


def _table(provider_id: str, model: str, inp: int, out: int, **kw: int) -> float:
    usage = Usage(input_tokens=inp, output_tokens=out, **kw)
    return float(calc_price(usage, model, provider_id=provider_id).total_price)


@pytest.mark.parametrize(
    ("kind", "table", "model"),
    [
        ("openai", "openai", "gpt-4o-mini"),
        ("anthropic", "anthropic", "claude-3-5-haiku-latest"),
        ("anthropic", "anthropic", "claude-sonnet-4-5"),  # tiered: priced call by call
        ("gemini", "google", "gemini-2.5-pro"),  # tiered past 200k prompt tokens
        ("gemini", "google", "gemini-2.5-flash"),
    ],
)
@pytest.mark.parametrize(
    ("inp", "out", "cached", "written"),
    [
        (7, 13, 0, 0),
        (1234, 567, 0, 0),
        (250_000, 900, 0, 0),
        (2000, 40, 1500, 0),
        (2000, 40, 0, 1500),  # each prompt-cache term is priced only when there are such tokens
        (3000, 40, 1000, 1500),
    ],
)
def test_call_cost_is_the_table_to_the_last_digit(
    kind: str, table: str, model: str, inp: int, out: int, cached: int, written: int
) -> None:
    usage = {
        "prompt_tokens": inp,
        "completion_tokens": out,
        "cached_tokens": cached,
        "cache_write_tokens": written,
    }
    expected = _table(
        table, model, inp, out, cache_read_tokens=cached or None, cache_write_tokens=written or None
    )
    assert call_cost(kind, model, usage) == expected


def test_unknown_prices_are_nan_and_offline_is_free() -> None:
    usage = {"prompt_tokens": 10, "completion_tokens": 10}
    assert math.isnan(call_cost("openai", "my-local-llama", usage))
    assert math.isnan(call_cost("some-plugin", "gpt-4o-mini", usage))
    assert math.isnan(call_cost("openai", "gpt-4o-mini", None))  # no usage reported
    assert call_cost("offline", None, None) == 0.0
    # An endpoint's prices (USD per million tokens) come first, "*" for every model.
    prices = {"*": {"input": 0, "output": 0}, "big": {"input": 3, "output": 15}}
    assert call_cost("openai", "my-local-llama", usage, prices) == 0.0
    assert call_cost("openai", "big", usage, prices) == pytest.approx((10 * 3 + 10 * 15) / 1e6)


def test_openai_runs_are_priced_in_the_run_log_and_totalled(fake: FakeOpenAI, tmp_path) -> None:
    flow = flow_with({"A": {"model": "gpt-4o-mini"}, "B": {"model": "gpt-4o"}})
    f = flownb.load_flow(flow, name="priced")
    f.run_batch([{"topic": "owls"}, {"topic": "cats"}])
    f.run({"topic": "owls"})  # every call from the cache
    log = flownb.runs()
    # "X about owls": 3 words in; "echo: X about owls": 4 words out (the fake's usage).
    one = _table("openai", "gpt-4o-mini", 3, 4) + _table("openai", "gpt-4o", 3, 4)
    assert list(log["cost_usd"]) == [pytest.approx(one)] * 2 + [0.0]
    assert list(log["saved_usd"]) == [0.0, 0.0, pytest.approx(one)]
    by_flow = flownb.runs(by="flow")
    assert by_flow.loc["priced", "cost_usd"] == pytest.approx(2 * one)
    assert by_flow.loc["priced", "saved_usd"] == pytest.approx(one)
    assert by_flow.loc["priced", "runs"] == 3
    by_day = flownb.runs(by="day")
    assert list(by_day.index) == [pd.Timestamp.now(tz="UTC").strftime("%Y-%m-%d")]
    with pytest.raises(ConfigError, match="flow, model or day"):
        flownb.runs(by="vendor")


def test_totals_never_turn_unknown_into_zero(fake: FakeOpenAI) -> None:
    flownb.load_flow(flow_with({"A": {"model": "my-local-llama"}}), name="local").run(
        {"topic": "x"}
    )
    flownb.load_flow(flow_with({"A": {"model": "gpt-4o-mini"}}), name="known").run({"topic": "x"})
    by_model = flownb.runs(by="model")
    assert math.isnan(by_model.loc["my-local-llama", "cost_usd"])
    assert by_model.loc["my-local-llama", "unpriced"] == 1
    assert by_model.loc["gpt-4o-mini", "cost_usd"] > 0


def test_preview_estimates_cost_from_prompt_tokens_and_max_tokens(fake: FakeOpenAI) -> None:
    flow = flow_with(
        {"A": {"model": "gpt-4o-mini", "max_tokens": 100}, "B": {"model": "gpt-4o-mini"}}
    )
    f = flownb.load_flow(flow)
    preview = f.preview([{"topic": "owls and more owls"}])
    calls = preview.calls.set_index("node")
    a_tokens = estimate_tokens("A about owls and more owls")
    assert calls.loc["A", "est_output_tokens"] == 100
    assert calls.loc["B", "est_output_tokens"] == ESTIMATE_OUTPUT_TOKENS
    assert calls.loc["A", "est_cost_usd"] == pytest.approx(
        _table("openai", "gpt-4o-mini", a_tokens, 100)
    )
    assert preview.est_cost == pytest.approx(calls["est_cost_usd"].sum())
    assert "estimated cost: about $" in str(preview) and "estimate" in str(preview).splitlines()[1]
    assert fake.requests == []  # nothing was called
    # A cached call would cost nothing.
    f.run({"topic": "owls and more owls"})
    again = f.preview([{"topic": "owls and more owls"}])
    assert again.n_calls == 0 and again.est_cost == 0.0


def test_dry_run_prints_the_estimate_and_a_run_ends_with_its_total(
    anthropic_fake: FakeAnthropic, tmp_path
) -> None:
    path = write_flow(tmp_path / "f.json", flow_with({"A": {"model": "claude-3-5-haiku-latest"}}))
    runner = CliRunner()
    dry = runner.invoke(
        main, ["run", str(path), "--provider", "anthropic", "--var", "topic=owls", "--dry-run"]
    )
    assert dry.exit_code == 0, dry.output
    assert "estimated cost: about $" in dry.stdout
    assert anthropic_fake.requests == []
    done = runner.invoke(main, ["run", str(path), "--provider", "anthropic", "--var", "topic=owls"])
    assert done.exit_code == 0, done.output
    expected = _table("anthropic", "claude-3-5-haiku-latest", 3, 4)
    assert done.stderr.strip().splitlines()[-1] == f"flownb: cost: {usd(expected)} for 1 run(s)"
    assert "cost:" not in done.stdout  # stdout stays the results


def test_meter_counts_spent_saved_and_unpriced() -> None:
    class R:
        def __init__(self, cost: float, saving: float) -> None:
            self.cost, self.cache_saving = cost, saving

    meter = CostMeter()
    for r in (R(0.5, 0.0), R(0.0, 0.25), R(math.nan, math.nan), None):
        meter.add(r)
    assert (meter.spent, meter.saved, meter.unpriced, meter.runs) == (0.5, 0.25, 1, 3)
    assert meter.text() == "at least $0.5000 spent, $0.2500 saved by cache, 1 with price unknown"
    assert "1 run(s) with a call of unknown price (not counted)" in meter.total_line()
    judged = CostMeter()
    judged.add(R(0.5, 0.0))
    judged.add(R(0.25, 0.0), judge=True)
    assert judged.text() == "$0.7500 spent (judges $0.2500)"
    assert judged.total_line() == "cost: $0.7500 for 2 run(s), of which judges $0.2500"
    assert usd(math.nan) == "-" and usd(12.345) == "$12.35" and usd(0) == "$0"
    assert usd(0.0000284) == "$0.000028" and usd(0.0123) == "$0.0123"


def test_evaluation_report_has_price_per_row_and_spent_per_variant(fake: FakeOpenAI) -> None:
    base = flownb.load_flow(flow_with({"A": {"model": "gpt-4o-mini"}}))
    big = base.with_params(model="gpt-4o")
    data = pd.DataFrame({"topic": ["owls", "cats"]})
    report = flownb.evaluate({"mini": base, "big": big}, data, progress=False)
    rows = report.results
    mini = _table("openai", "gpt-4o-mini", 3, 4)
    assert list(rows[rows["variant"] == "mini"]["spent_usd"]) == [pytest.approx(mini)] * 2
    assert list(rows[rows["variant"] == "mini"]["price_usd"]) == [pytest.approx(mini)] * 2
    summary = report.summary
    assert summary.loc["mini", "spent_usd"] == pytest.approx(2 * mini)
    assert summary.loc["mini", "price_per_row"] == pytest.approx(mini)
    assert summary.loc["big", "spent_usd"] == pytest.approx(2 * _table("openai", "gpt-4o", 3, 4))
    assert summary["price_rank"].tolist() == [1, 2]
    html = report._repr_html_()
    assert "price per row (rank)" in html and usd(2 * mini) in html


def test_progress_bar_shows_money_spent_and_saved(fake: FakeOpenAI, capsys) -> None:
    f = flownb.load_flow(flow_with({"A": {"model": "gpt-4o-mini"}}))
    rows = [{"topic": "owls"}, {"topic": "cats"}]
    f.run_batch(rows, progress=True)
    first = capsys.readouterr().err
    spent = 2 * _table("openai", "gpt-4o-mini", 3, 4)
    assert f"{usd(spent)} spent" in first
    f.run_batch(rows, progress=True)  # all from the cache
    again = capsys.readouterr().err
    assert f"$0 spent, {usd(spent)} saved by cache" in again


def test_a_result_keeps_its_cost_when_pickled(fake: FakeOpenAI) -> None:
    import pickle

    result = flownb.load_flow(flow_with({"A": {"model": "gpt-4o-mini"}})).run({"topic": "owls"})
    copy = pickle.loads(pickle.dumps(result))
    assert copy.cost == result.cost == _table("openai", "gpt-4o-mini", 3, 4)
    assert copy.cache_saving == 0.0


_IMPORT_WATCH = """
import asyncio, sys, threading
where = []

class Watch:
    def find_spec(self, name, path=None, target=None):
        if name == "genai_prices":
            try:
                asyncio.get_running_loop()
                where.append("event loop")
            except RuntimeError:
                where.append(threading.current_thread().name)
        return None

sys.meta_path.insert(0, Watch())
import flownb
flow = flownb.load_flow(sys.argv[1], provider="openai")
result = flow.run({"product": "a lamp", "audience": "owls"})
assert result.cost > 0, result.cost
print(where)
"""


def test_the_price_table_is_imported_off_the_event_loop(fake: FakeOpenAI, tmp_path) -> None:
    # Its first import takes about a second: on the loop it would hold up every call in flight
    # and streamed text (seen as a 0.5-1.2 s stall in a process's first streamed run).
    flow = Path(__file__).parent.parent / "notebooks" / "flows" / "product-copy.json"
    script = tmp_path / "watch.py"
    script.write_text(_IMPORT_WATCH)
    done = subprocess.run(
        [sys.executable, str(script), str(flow)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "FLOWNB_HOME": str(tmp_path / "home")},
    )
    assert done.returncode == 0, done.stderr
    where = ast.literal_eval(done.stdout.strip().splitlines()[-1])
    assert where and "event loop" not in where, where
