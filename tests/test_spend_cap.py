"""max_spend=: a call is sent only if what was spent plus the most every call in flight could
still cost stays within the cap, at any concurrency; the rows it stops are marked, and a re-run
with a higher cap buys only what is missing. Against the loopback OpenAI fake, whose usage
(words as tokens) and the price table give each answer's cost."""

# ruff: noqa: F811

from __future__ import annotations

import math
import warnings
from typing import Any

import pandas as pd
import pytest

import flownb
from flownb.config.pricing import call_cost
from flownb.errors import ConfigError, SpendCapReached
from flownb.testing.fake_openai import FakeOpenAI
from tests.openai_fake import fake, fake_server  # noqa: F401 (fixtures)
from tests.test_magics import ip, magic  # noqa: F401 (a real IPython shell with %flow)
from tests.vendor_fakes import flow_with

MODEL = "gpt-4o-mini"
# Every answer reports 250 output tokens, close to max_tokens: a call's real cost is near the
# most it could cost, as a long answer's is.
LONG = {"usage_details": {"completion_tokens": 250}}


def _bought(fake: FakeOpenAI) -> tuple[int, float, list[str]]:
    """Return the calls the fake answered, what they cost from the usage it reported, and their
    prompts."""
    requests = [r for r in fake.requests if "messages" in r]
    prompts = [r["messages"][-1]["content"] for r in requests]
    cost = 0.0
    for prompt in prompts:  # the usage the fake reported: words as tokens
        usage = {"prompt_tokens": len(prompt.split()), "completion_tokens": 250}
        cost += call_cost("openai", MODEL, usage)
    return len(requests), cost, prompts


def _one_call() -> float:
    return call_cost("openai", MODEL, {"prompt_tokens": 3, "completion_tokens": 250})


def _frame(n: int = 60) -> pd.DataFrame:
    return pd.DataFrame({"topic": [f"topic-{i}" for i in range(n)]})


def _flow() -> flownb.LocalFlow:
    params = {"model": MODEL, "max_tokens": 256}
    return flownb.load_flow(flow_with({"A": params, "B": params}), name="capped")


@pytest.mark.parametrize("concurrency", [1, 8, 32])
def test_the_cap_is_never_passed_and_a_higher_cap_completes_from_the_cache(
    fake: FakeOpenAI, concurrency: int
) -> None:
    fake.configure(**LONG)
    cap = 17 * _one_call()  # worth 17 calls
    flow = _flow()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the preview's notice: tested below
        out = flow.run_dataframe(_frame(), concurrency=concurrency, max_spend=cap, progress=False)
    n, spent, prompts = _bought(fake)
    assert spent <= cap
    assert n >= 12
    # Each row is complete or marked with why not; the marked ones are those the cap stopped.
    missing = out["A"].isna() | out["B"].isna()
    assert missing.sum() > 0
    assert out.loc[missing, "error"].str.contains("spend_cap_reached").all()
    assert out.loc[~missing, "error"].isna().all()
    # A higher cap finishes the frame from the cache: each distinct prompt bought once in all.
    out2 = flow.run_dataframe(_frame(), concurrency=concurrency, max_spend=1.0, progress=False)
    assert "error" not in out2.columns and out2["A"].notna().all() and out2["B"].notna().all()
    n2, _, prompts2 = _bought(fake)
    assert n2 == 120 and len(set(prompts2)) == 120
    assert prompts2[:n] == prompts


def test_an_unpriced_model_is_refused_before_anything_is_sent(fake: FakeOpenAI) -> None:
    flow = flownb.load_flow(flow_with({"A": {"model": "my-local-llama", "max_tokens": 50}}))
    with pytest.raises(ConfigError, match=r"max_spend cannot cap node .A..*no known price"):
        flow.run_dataframe(_frame(3), max_spend=5, progress=False)
    with pytest.raises(ConfigError, match="no known price"):
        flow.run_batch([{"topic": "x"}], max_spend=5)
    assert fake.requests == []


def test_a_preview_over_the_cap_is_said_first_and_the_run_proceeds(fake: FakeOpenAI) -> None:
    fake.configure(**LONG)
    flow = _flow()
    with pytest.warns(UserWarning, match=r"preview estimates about \$.* over the spend cap"):
        out = flow.run_dataframe(_frame(10), max_spend=3 * _one_call(), progress=False)
    assert 1 <= _bought(fake)[0] <= 3
    assert out["error"].notna().any()


def test_a_run_over_the_cap_raises_spend_cap_reached_and_says_what_is_left(
    fake: FakeOpenAI, capfd: pytest.CaptureFixture[str]
) -> None:
    flow = _flow()
    with (
        pytest.raises(SpendCapReached) as caught,
        pytest.warns(UserWarning, match="over the spend cap"),
    ):
        flow.run({"topic": "owls"}, max_spend=1e-6)
    assert caught.value.cap == 1e-6 and caught.value.left == pytest.approx(1e-6)
    assert fake.requests == []
    assert "spend cap: $0 of $0.000001 used; 2 call(s) not sent" in capfd.readouterr().err
    # Cache hits cost nothing and are always served.
    flow.run({"topic": "owls"})
    assert flow.run({"topic": "owls"}, max_spend=0)["A"] == "echo: A about owls"


def test_a_failed_call_hands_its_reservation_back_when_the_vendor_answered(
    fake: FakeOpenAI,
) -> None:
    # A 400 for one prompt (no retry): the vendor billed nothing, so the cap is not used up.
    fake.configure(**LONG, answers={"bad-0": {"status": 400}})
    flow = _flow()
    # Worth 9 calls: the 8 good ones fit only if the 2 refused ones hold nothing of it.
    cap = 9 * _one_call()
    batch = [{"topic": "bad-0"}, *({"topic": f"t{i}"} for i in range(4))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(flownb.BatchError) as caught:
            flow.run_batch(batch, max_spend=cap, concurrency=1)
    assert list(caught.value.errors) == [0]
    assert _bought(fake)[0] == 10  # the two refused by the vendor, the eight good ones


def test_evaluate_caps_variants_and_judges_together(fake: FakeOpenAI) -> None:
    from flownb.scorers import judge

    fake.configure(**LONG)
    flow = flownb.load_flow(flow_with({"A": {"model": MODEL, "max_tokens": 256}}))
    grader = judge("A", "Is it about {topic}?", model=MODEL, provider="openai")
    flow.run({"topic": "topic-0"})  # bought before: served from the cache under any cap
    judged_before = flownb.evaluate(flow, _frame(1), [grader], progress=False, log=False)
    assert judged_before.results["judge_A"].notna().all()
    fake.reset()
    cap = 6 * _one_call()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = flownb.evaluate(
            flow, _frame(20), [grader], max_spend=cap, progress=False, log=False
        )
    n, spent, _ = _bought(fake)
    assert n >= 1 and spent <= cap
    text = report.results.astype(str)
    assert text.apply(lambda c: c.str.contains("spend_cap_reached")).any().any()
    # Row 0's variant call and judge call came from the cache: graded whatever the cap.
    assert not math.isnan(report.results["judge_A"].iloc[0])


def test_max_spend_must_be_a_number_of_dollars(fake: FakeOpenAI) -> None:
    with pytest.raises(ConfigError, match="max_spend must be a number"):
        _flow().run_batch([{"topic": "x"}], max_spend=-1)
    assert fake.requests == []


def test_the_cli_runs_and_evaluates_within_max_spend(fake: FakeOpenAI, tmp_path) -> None:
    from click.testing import CliRunner

    from flownb.cli.main import cli
    from tests.conftest import write_flow

    fake.configure(**LONG)
    params = {"model": MODEL, "max_tokens": 256}
    path = write_flow(tmp_path / "flow.json", flow_with({"A": params, "B": params}))
    _frame(10).to_csv(tmp_path / "rows.csv", index=False)
    cap = 5 * _one_call()
    runner = CliRunner()
    done = runner.invoke(
        cli,
        [
            "run",
            str(path),
            "--csv",
            str(tmp_path / "rows.csv"),
            "--no-progress",
            "--max-spend",
            repr(cap),
        ],
    )
    assert done.exit_code == 1, done.output  # rows failed: the ones the cap stopped
    n, spent, _ = _bought(fake)
    assert 1 <= n <= 5 and spent <= cap
    assert "spend_cap_reached" in done.stdout
    assert "flownb: spend cap: $" in done.stderr and " used; " in done.stderr
    scorers = tmp_path / "scorers.toml"
    scorers.write_text('[[scorers]]\ntype = "contains"\noutput = "A"\ntext = "echo"\n')
    fake.reset()
    evaluated = runner.invoke(
        cli,
        [
            *("eval", str(path), "--data", str(tmp_path / "rows.csv"), "--scorers", str(scorers)),
            *("--no-progress", "--max-spend", repr(cap)),
        ],
    )
    assert evaluated.exit_code == 0, evaluated.output
    assert _bought(fake)[1] <= cap
    assert "flownb: spend cap: $" in evaluated.stderr
    refused = runner.invoke(cli, ["run", str(path), "--var", "topic=x", "--max-spend", "-1"])
    assert refused.exit_code == 2 and "--max-spend" in refused.output


def test_flow_batch_and_flow_eval_take_max_spend(fake: FakeOpenAI, ip: Any) -> None:
    from IPython.utils.capture import capture_output

    from flownb.scorers import contains

    fake.configure(**LONG)
    ip.user_ns["f"] = _flow()
    ip.user_ns["df"] = _frame(10)
    cap = 5 * _one_call()
    with capture_output() as captured, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = magic(ip, f"batch $f --df df --no-progress --max-spend {cap!r}")
    n, spent, _ = _bought(fake)
    assert 1 <= n <= 5 and spent <= cap
    assert out["error"].str.contains("spend_cap_reached").any()
    assert "flownb: spend cap: $" in captured.stderr
    fake.reset()
    ip.user_ns["s"] = contains("A", "echo")
    with capture_output(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        magic(ip, f"eval $f --df df --scorers $s --no-progress --max-spend {cap!r}")
    assert _bought(fake)[0] >= 1 and _bought(fake)[1] <= cap


def test_a_served_key_s_cap_answers_402_with_what_is_left_across_a_restart(
    fake: FakeOpenAI, tmp_path
) -> None:
    import os
    from dataclasses import replace
    from pathlib import Path

    from click.testing import CliRunner

    from flownb.cli.main import cli
    from tests.conftest import write_flow
    from tests.serving import post_run, run_server

    fake.configure(**LONG)
    flows = tmp_path / "flows"
    flows.mkdir()
    write_flow(flows / "one.json", flow_with({"A": {"model": MODEL, "max_tokens": 256}}))
    home = Path(os.environ["FLOWNB_HOME"])
    cap = 3.5 * _one_call()
    created = CliRunner().invoke(cli, ["keys", "create", "--name", "ci", "--max-spend", repr(cap)])
    assert created.exit_code == 0, created.output
    key = created.stdout.strip()
    answers = []
    with run_server(flows, home, create_key=False, provider="openai") as running:
        running = replace(running, key=key)
        for i in range(6):
            answers.append(post_run(running, "one", {"topic": f"t{i}"}))
    statuses = [r.status_code for r in answers]
    assert statuses[0] == 200 and 402 in statuses
    bought, spent, _ = _bought(fake)
    assert bought == statuses.count(200) and spent <= cap
    refused = answers[statuses.index(402)].json()
    assert refused["code"] == "spend_cap_reached" and "left" in refused["message"]
    # A restarted server remembers what the key spent: nothing more is sent.
    with run_server(flows, home, create_key=False, provider="openai") as running:
        again = post_run(replace(running, key=key), "one", {"topic": "t-new"})
    assert again.status_code == 402 and again.json()["code"] == "spend_cap_reached"
    assert "left" in again.json()["message"] and _bought(fake)[0] == bought
    listed = CliRunner().invoke(cli, ["keys", "list"])
    assert " / $" in listed.stdout
    raised = CliRunner().invoke(cli, ["keys", "cap", "ci", "1"])
    assert raised.exit_code == 0, raised.output
    with run_server(flows, home, create_key=False, provider="openai") as running:
        assert post_run(replace(running, key=key), "one", {"topic": "t-new"}).status_code == 200


def test_the_bound_counts_utf8_bytes_as_tokens_and_every_answer_asked_for(
    fake: FakeOpenAI,
) -> None:
    from flownb.providers.callplan import MESSAGE_OVERHEAD
    from flownb.runtime.plan import step_calls

    flow = flownb.load_flow(flow_with({"A": {"model": MODEL, "max_tokens": 100, "n": 3}}))
    node = step_calls(flow.provider, flow.plan.steps[0])
    prompt = "é" * 10  # 20 bytes in UTF-8
    usage = {"prompt_tokens": 20 + MESSAGE_OVERHEAD, "completion_tokens": 3 * 100}
    assert node.most(prompt) == pytest.approx(call_cost("openai", MODEL, usage))
    assert node.expected(prompt) < node.most(prompt)


def test_stream_astream_and_arun_take_max_spend(
    fake: FakeOpenAI, capfd: pytest.CaptureFixture[str]
) -> None:
    import asyncio

    from flownb.runtime.events import StreamEvent

    fake.configure(**LONG)
    flow = _flow()
    tiny = 1e-6
    with pytest.raises(SpendCapReached), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        list(flow.stream({"topic": "s0"}, max_spend=tiny))
    assert fake.requests == []
    assert "spend cap: $0 of $0.000001 used; 2 call(s) not sent" in capfd.readouterr().err
    # Room for the two calls of one run: it streams, and the cap's line says what it used.
    items = list(flow.stream({"topic": "s1"}, max_spend=3 * _one_call()))
    assert isinstance(items[-1], flownb.RunResult) and items[-1]["A"] == "echo: A about s1"
    assert any(isinstance(i, StreamEvent) and i.kind == "text" for i in items)
    n, spent, _ = _bought(fake)
    assert n == 2 and spent <= 3 * _one_call()
    assert " of $" in capfd.readouterr().err

    async def both() -> tuple[Any, Any]:
        streamed = []
        with pytest.raises(SpendCapReached):
            async for item in flow.astream({"topic": "s2"}, max_spend=tiny):
                streamed.append(item)
        with pytest.raises(SpendCapReached):
            await flow.arun({"topic": "s3"}, max_spend=tiny)
        ran = await flow.arun({"topic": "s4"}, max_spend=3 * _one_call())
        batch = await flow.arun_batch(
            [{"topic": "s1"}, {"topic": "s4"}], max_spend=0
        )  # cache hits: served under any cap
        return ran, batch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ran, batch = asyncio.run(both())
    assert ran["B"] == "echo: B about s4" and [r["A"] for r in batch] == [
        "echo: A about s1",
        "echo: A about s4",
    ]
    assert _bought(fake)[0] == 4  # s2 and s3 were never sent


def test_a_capped_key_s_event_stream_runs_within_its_cap(fake: FakeOpenAI, tmp_path) -> None:
    import json
    import os
    from dataclasses import replace
    from pathlib import Path

    import requests
    from click.testing import CliRunner

    from flownb.cli.main import cli
    from tests.conftest import write_flow
    from tests.serving import run_server

    fake.configure(**LONG)
    flows = tmp_path / "flows"
    flows.mkdir()
    write_flow(flows / "one.json", flow_with({"A": {"model": MODEL, "max_tokens": 256}}))
    home = Path(os.environ["FLOWNB_HOME"])
    cap = 2.5 * _one_call()
    runner = CliRunner()
    key = runner.invoke(cli, ["keys", "create", "--name", "s", "--max-spend", repr(cap)]).stdout
    spent_key = runner.invoke(cli, ["keys", "create", "--name", "z", "--max-spend", "0"]).stdout

    def stream(running: Any, key: str, topic: str) -> tuple[int, list[tuple[str, Any]]]:
        with requests.post(
            f"{running.url}/api/flows/run/one",
            json={"variables": {"topic": topic}},
            headers={"x-api-key": key.strip(), "Accept": "text/event-stream"},
            stream=True,
            timeout=60,
        ) as resp:
            if not resp.headers["content-type"].startswith("text/event-stream"):
                return resp.status_code, [("json", resp.json())]
            events, name = [], ""
            for line in resp.iter_lines():
                text = line.decode()
                if text.startswith("event: "):
                    name = text[7:]
                elif text.startswith("data: "):
                    events.append((name, json.loads(text[6:])))
            return resp.status_code, events

    with run_server(flows, home, create_key=False, provider="openai") as running:
        running = replace(running, key=key)
        got = [stream(running, key, f"t{i}") for i in range(3)]
        used_up = stream(running, spent_key, "t9")
    for status, events in got[:2]:
        assert status == 200 and events[-1][0] == "result"
        assert any(name == "text" for name, _ in events)
    status, events = got[2]  # the third call could have passed the cap: not sent
    assert status == 200 and events[-1][0] == "error"
    error = events[-1][1]
    assert error["status"] == 402 and error["code"] == "spend_cap_reached"
    assert "left" in error["message"]
    n, spent, _ = _bought(fake)
    assert n == 2 and spent <= cap
    # A key whose cap is used up is answered before the stream starts, as JSON.
    assert used_up[0] == 402 and used_up[1][0][1]["code"] == "spend_cap_reached"
    assert "left" in used_up[1][0][1]["message"]
