"""A DataFrame through Anthropic's Message Batches (flow.run_dataframe(df, batch_api=True) on the
anthropic provider), against the loopback fake's /v1/messages/batches routes: what is submitted,
what comes back, splitting at the limits, failures and expiry, cancelling, resume across
processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import warnings
from pathlib import Path

import pandas as pd
import pytest

import flownb
from flownb.testing.fake_anthropic import FakeAnthropic
from tests.cli_inprocess import run_cli
from tests.conftest import make_flow
from tests.test_batch_api import batch_cli, killed_before_the_batch_id, wait_for
from tests.vendor_fakes import (  # noqa: F401  (fixtures)
    anthropic_fake,
    anthropic_server,
)

# Every knob a test of this module turns on the module's fake, set back before each test.
FAST = {
    "batch_seconds": 0.3,
    "batch_fail_marker": "",
    "batch_expire": False,
    "batch_no_counts": False,
    "batch_create_delay": 0.0,
    "latency": 0.0,
    "replies": {},
}
MODEL = "claude-haiku-4-5"


@pytest.fixture
def fake(anthropic_fake: FakeAnthropic, monkeypatch: pytest.MonkeyPatch) -> FakeAnthropic:  # noqa: F811
    """The module's fake Messages API (tests/vendor_fakes.py), its batches fast, and flownb
    set to use it and to poll often."""
    anthropic_fake.configure(**FAST)
    monkeypatch.setenv("FLOWNB_PROVIDER", "anthropic")
    monkeypatch.setenv("FLOWNB_BATCH_POLL", "0.05")
    return anthropic_fake


def _flow_data(prompts: dict[str, str], variables: list[str]) -> dict:
    data = make_flow(prompts, variables)
    for node in data["nodes"]:
        if "modelParams" in node["data"]:
            node["data"]["modelParams"] = {"model": MODEL, "max_tokens": 200}
    return data


def _flow(prompts: dict[str, str], variables: list[str]) -> flownb.LocalFlow:
    return flownb.load_flow(_flow_data(prompts, variables))


def _two_node() -> flownb.LocalFlow:
    return _flow(
        {"title": "Title for {topic}", "summary": "Summary of {topic} in a {tone} tone"},
        ["topic", "tone"],
    )


def _frame(n: int) -> pd.DataFrame:
    return pd.DataFrame({"topic": [f"topic {i}" for i in range(n)], "tone": ["dry"] * n})


def _requests(fake: FakeAnthropic) -> list[dict]:
    return [r for batch in fake.message_batches.submitted for r in batch]


def test_a_frame_through_message_batches_equals_a_plain_run_and_a_rerun_submits_nothing(
    fake: FakeAnthropic, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    flow = _two_node()
    df = _frame(40)
    flow.run_dataframe(df.head(5), progress=False)  # 10 calls paid live, now cached
    live = len(fake.requests)
    batched = flow.run_dataframe(df, batch_api=True, progress=False)

    sent = _requests(fake)
    assert fake.message_batches.created == 1 and len(sent) == 2 * 35
    assert len({r["custom_id"] for r in sent}) == len(sent)
    assert {r["params"]["model"] for r in sent} == {MODEL}
    prompts = {r["params"]["messages"][-1]["content"] for r in sent}
    assert "Title for topic 5" in prompts and "Title for topic 0" not in prompts
    assert len(fake.requests) == live  # nothing else went live

    monkeypatch.setenv("FLOWNB_HOME", str(tmp_path / "other-home"))
    plain = _two_node().run_dataframe(df, progress=False)
    pd.testing.assert_frame_equal(batched, plain)

    created, live = fake.message_batches.created, len(fake.requests)
    again = flow.run_dataframe(df, batch_api=True, progress=False)
    assert fake.message_batches.created == created and len(fake.requests) == live
    pd.testing.assert_frame_equal(again, batched)


def test_each_custom_id_is_the_calls_cache_key_and_the_answer_is_priced_at_the_batch_rate(
    fake: FakeAnthropic,
) -> None:
    from flownb.config.pricing import BATCH_RATE, call_cost
    from flownb.runtime.cache import open_cache

    flow = _flow({"echo": "Say {word}"}, ["word"])
    flow.run_dataframe(pd.DataFrame({"word": ["owl", "bat"]}), batch_api=True, progress=False)
    cache = open_cache(flow.config.home)
    for request in _requests(fake):
        gen = cache.get(request["custom_id"])
        said = request["params"]["messages"][-1]["content"]
        assert gen is not None and gen.output == f"echo: {said}"
        live = call_cost("anthropic", gen.model, gen.usage, None)
        assert live > 0 and gen.cost == pytest.approx(live * BATCH_RATE)


def test_batches_split_at_the_request_and_byte_limits(
    fake: FakeAnthropic, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flownb.providers.anthropic import batch as anthropic_batch

    flow = _flow({"echo": "Say {word}"}, ["word"])
    words = pd.DataFrame({"word": [f"w{i}" for i in range(7)]})
    monkeypatch.setattr(anthropic_batch, "BATCH_LIMITS", {"requests": 3, "bytes": 10**9})
    out = flow.run_dataframe(words, batch_api=True, progress=False)
    assert [len(b) for b in fake.message_batches.submitted] == [3, 3, 1]
    assert out["echo"].notna().all()

    fake.reset()
    more = pd.DataFrame({"word": [f"v{i}" for i in range(4)]})
    one = len(flow.provider.batch_api().line("k" * 64, _call(flow, "v0"))[2])
    monkeypatch.setattr(anthropic_batch, "BATCH_LIMITS", {"requests": 100, "bytes": 2 * one + 8})
    out = flow.run_dataframe(more, batch_api=True, progress=False)
    assert [len(b) for b in fake.message_batches.submitted] == [2, 2]
    assert out["echo"].notna().all()


def _call(flow: flownb.LocalFlow, word: str) -> flownb.providers.base.Call:
    from flownb.providers.base import Call

    step = flow.plan.steps[0]
    return Call("text", f"Say {word}", step.params, step.node_id, step.system)


def test_errored_and_expired_requests_are_named_and_the_rest_stay_cached(
    fake: FakeAnthropic,
) -> None:
    fake.configure(batch_fail_marker="POISON")
    flow = _flow({"echo": "Say {word}"}, ["word"])
    df = pd.DataFrame({"word": ["fine", "POISON", "good"]})
    out = flow.run_dataframe(df, batch_api=True, progress=False)
    assert out.loc[0, "echo"] == "echo: Say fine" and out.loc[2, "echo"] == "echo: Say good"
    assert pd.isna(out.loc[1, "echo"])
    assert "invalid_request_error" in out.loc[1, "error"] and "POISON" in out.loc[1, "error"]

    fake.configure(batch_fail_marker="", batch_expire=True)
    letters = pd.DataFrame({"word": list("abcd")})
    expired = flow.run_dataframe(letters, batch_api=True, progress=False)
    assert expired["echo"].notna().sum() == 2
    assert expired.loc[expired["echo"].isna(), "error"].str.contains("expired").all()
    assert flownb.batches().loc[0, "status"] == "expired"

    # The next run submits only what has no answer: the poisoned call and the expired ones.
    fake.configure(batch_expire=False)
    before = len(_requests(fake))
    flow.run_dataframe(df, batch_api=True, progress=False)
    fixed = flow.run_dataframe(letters, batch_api=True, progress=False)
    assert len(_requests(fake)) == before + 1 + 2
    assert fixed["echo"].notna().all() and "error" not in fixed.columns


def test_a_cancelled_batch_is_named_and_submitted_again(fake: FakeAnthropic) -> None:
    fake.configure(batch_seconds=30)
    flow = _flow({"echo": "Say {word}"}, ["word"])
    df = pd.DataFrame({"word": ["z"]})
    flow.run_dataframe(df, batch_api=True, progress=False, poll=0)
    batch_id = flownb.batches().loc[0, "id"]
    assert batch_id.startswith("msgbatch_")
    from flownb.frames.batch_api import cancel_batch

    assert cancel_batch(batch_id) == "cancelling"
    out = flow.run_dataframe(df, batch_api=True, progress=False, poll=0)
    assert "cancelled" in out.loc[0, "error"]
    fake.configure(batch_seconds=0.2)
    again = flow.run_dataframe(df, batch_api=True, progress=False)
    assert again.loc[0, "echo"] == "echo: Say z" and fake.message_batches.created == 2


def test_a_process_killed_while_polling_is_resumed_without_a_second_batch(
    fake: FakeAnthropic, tmp_path: Path
) -> None:
    # The batch stays pending until the first process is killed (however slow the machine),
    # then ends about half a second into the new run's polling.
    fake.configure(batch_seconds=600.0)
    cmd, env, out = batch_cli(
        tmp_path, _flow_data({"echo": "Say {word}"}, ["word"]), ["one", "two"]
    )
    first = subprocess.Popen([*cmd, "--no-progress"], env=env, stderr=subprocess.DEVNULL)
    records = Path(os.environ["FLOWNB_HOME"]) / "batches"
    wait_for(lambda: any(records.glob("msgbatch_*.json")), "the batch was never recorded")
    recorded = time.time()  # the batch was created before this
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=30)
    fake.configure(batch_seconds=time.time() - recorded + 0.5)
    second = run_cli(*cmd[3:], "--out", str(out), "--no-progress")  # a new run, in this process
    assert second.returncode == 0, second.stderr
    assert fake.message_batches.created == 1
    assert [r["echo"] for r in json.loads(out.read_text())] == ["echo: Say one", "echo: Say two"]
    # The process that read the batch counts what it cost (the batch price), not $0.
    [total] = [ln for ln in second.stderr.splitlines() if "cost:" in ln]
    assert "for 2 run(s)" in total and "cost: $0 " not in total


def test_a_process_killed_before_it_heard_the_batch_id_does_not_submit_it_twice(
    fake: FakeAnthropic, tmp_path: Path
) -> None:
    # The fake holds the create's answer back: the batch exists, its creator never learns it.
    flow = _flow_data({"echo": "Say {word}"}, ["word"])
    results, records = killed_before_the_batch_id(
        fake, lambda: fake.message_batches.created, tmp_path, flow, ["red", "green", "blue"]
    )
    assert fake.message_batches.created == 1  # adopted, not submitted again
    assert [r["echo"] for r in results] == [
        "echo: Say red",
        "echo: Say green",
        "echo: Say blue",
    ]
    assert [p.name.startswith("msgbatch_") for p in records.glob("*.json")] == [True]


def test_the_provider_says_which_parameters_it_batches(fake: FakeAnthropic) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        flow = _flow({"echo": "Say {word}"}, ["word"])  # a Claude model: no replacement warned
    flow.run_dataframe(pd.DataFrame({"word": ["x"]}), batch_api=True, progress=False)
    [request] = _requests(fake)
    assert request["params"] == {
        "model": MODEL,
        "max_tokens": 200,
        "messages": [{"role": "user", "content": "Say x"}],
    }


def test_a_batch_reply_without_request_counts_is_remembered_and_finished(
    fake: FakeAnthropic,
) -> None:
    """Issue 30: a reply whose request_counts is null raised TypeError after the batch was
    made, leaving a pending record; now the batch is recorded with its id and picked up."""
    fake.configure(batch_no_counts=True, batch_seconds=0.1)
    flow = _flow({"echo": "Say {word}"}, ["word"])
    out = flow.run_dataframe(pd.DataFrame({"word": ["owl", "bat"]}), batch_api=True, progress=False)
    assert list(out["echo"]) == ["echo: Say owl", "echo: Say bat"]
    assert fake.message_batches.created == 1
    listed = flownb.batches()
    assert len(listed) == 1 and listed.loc[0, "id"].startswith("msgbatch_")
    assert listed.loc[0, "status"] == "completed"
