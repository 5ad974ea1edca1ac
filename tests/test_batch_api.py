"""A DataFrame through OpenAI's Batch API (flow.run_dataframe(df, batch_api=True)), against the
loopback fake's Files and Batches routes: what is uploaded, what comes back, resume across
processes, failures and expiry, listing and cancelling."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import flownb
from flownb.testing.fake_config import FakeConfig
from flownb.testing.fake_openai import FakeOpenAI
from tests.cli_inprocess import run_cli
from tests.conftest import ROOT, make_flow, write_flow
from tests.openai_fake import KEY

FAST = {"batch_seconds": 0.3, "batch_fail_marker": "", "batch_expire": False}


@pytest.fixture(scope="module")
def fake_server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


@pytest.fixture
def fake(fake_server: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> FakeOpenAI:
    # Every setting back to a new fake's first: usage_details and batch_create_delay, turned by
    # single tests, would otherwise reach the next one if it failed before turning them back.
    fake_server.configure(**dataclasses.asdict(FakeConfig()))
    fake_server.configure(latency=0.0, faults={}, fail_markers={}, replies={}, **FAST)
    fake_server.reset()
    monkeypatch.setenv("OPENAI_BASE_URL", fake_server.url)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("FLOWNB_PROVIDER", "openai")
    monkeypatch.setenv("FLOWNB_BATCH_POLL", "0.05")
    return fake_server


def _two_node_flow() -> dict:
    return make_flow(
        {"title": "Title for {topic}", "summary": "Summary of {topic} in a {tone} tone"},
        ["topic", "tone"],
    )


def _frame(n: int) -> pd.DataFrame:
    return pd.DataFrame({"topic": [f"topic {i}" for i in range(n)], "tone": ["dry"] * n})


def _uploaded_lines(fake: FakeOpenAI) -> list[dict]:
    return [json.loads(line) for data in fake.batches.uploads for line in data.splitlines()]


def test_the_upload_holds_exactly_the_uncached_calls_and_results_match_a_plain_run(
    fake: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    flow = flownb.load_flow(_two_node_flow())
    df = _frame(300)
    flow.run_dataframe(df.head(10), progress=False)  # 20 calls paid live, now cached
    live_requests = len(fake.requests)
    batched = flow.run_dataframe(df, batch_api=True, progress=False)

    lines = _uploaded_lines(fake)
    assert len(lines) == 2 * 290  # two nodes x the 290 rows the cache does not hold
    assert len({ln["custom_id"] for ln in lines}) == len(lines)
    assert {ln["url"] for ln in lines} == {"/v1/chat/completions"}
    prompts = {ln["body"]["messages"][0]["content"] for ln in lines}
    assert "Title for topic 10" in prompts and "Title for topic 0" not in prompts
    assert len(fake.requests) == live_requests  # nothing else was called live

    # The same rows run plainly (another home: nothing cached) give the same outputs.
    monkeypatch.setenv("FLOWNB_HOME", str(tmp_path / "other-home"))
    plain_flow = flownb.load_flow(_two_node_flow())
    plain = plain_flow.run_dataframe(df, progress=False)
    pd.testing.assert_frame_equal(batched, plain)
    assert "error" not in batched.columns

    # A second run submits nothing and calls nothing.
    created, live_requests = fake.batches.created, len(fake.requests)
    again = flow.run_dataframe(df, batch_api=True, progress=False)
    assert fake.batches.created == created and len(fake.requests) == live_requests
    pd.testing.assert_frame_equal(again, batched)


def test_a_repeated_prompt_is_one_line(fake: FakeOpenAI) -> None:
    flow = flownb.load_flow(make_flow({"echo": "Say {word}"}, ["word"]))
    out = flow.run_dataframe(
        pd.DataFrame({"word": ["a", "b", "a", "a"]}), batch_api=True, progress=False
    )
    assert len(_uploaded_lines(fake)) == 2
    assert list(out["echo"]) == ["echo: Say a", "echo: Say b", "echo: Say a", "echo: Say a"]


def test_a_polars_frame_goes_through_the_batch_api_and_comes_back_as_polars(
    fake: FakeOpenAI,
) -> None:
    import polars as pl

    flow = flownb.load_flow(make_flow({"echo": "Say {word}"}, ["word"]))
    out = flow.run_dataframe(
        pl.DataFrame({"word": ["a", "b", "a"]}), batch_api=True, progress=False
    )
    assert fake.batches.created == 1 and len(_uploaded_lines(fake)) == 2
    assert isinstance(out, pl.DataFrame) and out.schema["echo"] == pl.String
    assert out["echo"].to_list() == ["echo: Say a", "echo: Say b", "echo: Say a"]


def test_a_chained_node_goes_in_a_second_batch_after_the_first(fake: FakeOpenAI) -> None:
    data = make_flow({"outline": "Outline {topic}", "draft": "Draft from {outline}"}, ["topic"])
    data["edges"].append({"id": "chain", "source": "node-outline", "target": "node-draft"})
    flow = flownb.load_flow(data)
    out = flow.run_dataframe(
        pd.DataFrame({"topic": ["owls", "bats"]}), batch_api=True, progress=False
    )
    assert fake.batches.created == 2
    assert list(out["draft"]) == [
        "echo: Draft from echo: Outline owls",
        "echo: Draft from echo: Outline bats",
    ]


def test_failed_lines_are_named_in_the_error_column_and_submitted_again(fake: FakeOpenAI) -> None:
    fake.configure(batch_fail_marker="POISON")
    flow = flownb.load_flow(make_flow({"echo": "Say {word}"}, ["word"]))
    df = pd.DataFrame({"word": ["fine", "POISON", "also fine"]})
    out = flow.run_dataframe(df, batch_api=True, progress=False)
    assert out.loc[0, "echo"] == "echo: Say fine" and out.loc[2, "echo"] == "echo: Say also fine"
    assert out.loc[1, "echo"] is pd.NA
    assert "provider batch" in out.loc[1, "error"] and "POISON" in out.loc[1, "error"]
    assert out["error"].isna().sum() == 2
    # The next run re-submits only the failed call.
    fake.configure(batch_fail_marker="")
    before = len(_uploaded_lines(fake))
    again = flow.run_dataframe(df, batch_api=True, progress=False)
    assert len(_uploaded_lines(fake)) == before + 1
    assert again.loc[1, "echo"] == "echo: Say POISON" and "error" not in again.columns


def test_an_expired_batch_keeps_what_finished(fake: FakeOpenAI) -> None:
    fake.configure(batch_expire=True)
    flow = flownb.load_flow(make_flow({"echo": "Say {word}"}, ["word"]))
    out = flow.run_dataframe(pd.DataFrame({"word": list("abcd")}), batch_api=True, progress=False)
    assert out["echo"].notna().sum() == 2
    expired = out[out["echo"].isna()]
    assert len(expired) == 2 and expired["error"].str.contains("expired").all()


def test_poll_zero_returns_at_once_and_the_next_call_picks_the_batch_up(fake: FakeOpenAI) -> None:
    fake.configure(batch_seconds=1.5)
    flow = flownb.load_flow(make_flow({"echo": "Say {word}"}, ["word"]))
    df = pd.DataFrame({"word": ["x", "y"]})
    first = flow.run_dataframe(df, batch_api=True, progress=False, poll=0)
    assert (
        first["echo"].isna().all()
        and first["error"].str.contains("waiting in provider batch").all()
    )
    listed = flownb.batches()
    assert len(listed) == 1 and listed.loc[0, "requests"] == 2 and not listed.loc[0, "collected"]
    second = flow.run_dataframe(df, batch_api=True, progress=False)  # waits this time
    assert fake.batches.created == 1
    assert list(second["echo"]) == ["echo: Say x", "echo: Say y"]
    assert bool(flownb.batches().loc[0, "collected"])


def batch_cli(
    tmp_path: Path, flow: dict, words: list[str]
) -> tuple[list[str], dict[str, str], Path]:
    """Return the command running ``flow`` (saved under ``tmp_path``) over a CSV of ``words``
    through the batch API, its environment, and where ``--out`` may write the results."""
    flow_path = write_flow(tmp_path / "flow.json", flow)
    csv = tmp_path / "words.csv"
    pd.DataFrame({"word": words}).to_csv(csv, index=False)
    cmd = [sys.executable, "-m", "flownb", "run", str(flow_path), "--csv", str(csv), "--batch-api"]
    return cmd, {**os.environ, "PYTHONPATH": str(ROOT)}, tmp_path / "out.json"


def wait_for(condition: Callable[[], bool], what: str, deadline: float = 60) -> None:
    """Poll ``condition`` for up to ``deadline`` seconds; fail with ``what`` if it never holds."""
    end = time.monotonic() + deadline
    while not condition() and time.monotonic() < end:
        time.sleep(0.05)
    assert condition(), what


def killed_before_the_batch_id(
    fake: Any, created: Callable[[], int], tmp_path: Path, flow: dict, words: list[str]
) -> tuple[list[dict], Path]:
    """Run ``flow`` over ``words`` from the CLI with ``fake`` holding back its answer to the
    create, kill the process once the batch exists (``created()`` is 1) and check it left a
    pending record; then run it again. Returns the second run's results and the records'
    folder."""
    fake.configure(batch_create_delay=600.0)  # longer than any wait below: it never hears
    cmd, env, out = batch_cli(tmp_path, flow, words)
    log = tmp_path / "first.stderr"
    with log.open("wb") as err:
        first = subprocess.Popen([*cmd, "--no-progress"], env=env, stderr=err)
    # A process start on a loaded machine may take long: wait for the batch or for the process
    # to end (then say why), never for a fixed time.
    wait_for(
        lambda: created() == 1 or first.poll() is not None,
        "the batch was never created",
        deadline=300,
    )
    assert first.poll() is None and created() == 1, log.read_text(errors="replace")[-3000:]
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=30)
    records = Path(os.environ["FLOWNB_HOME"]) / "batches"
    assert [p.name.split("-")[0] for p in records.glob("*.json")] == ["pending"]
    fake.configure(batch_create_delay=0.0)
    second = run_cli(*cmd[3:], "--out", str(out), "--no-progress")  # a new run, in this process
    assert second.returncode == 0, second.stderr
    return json.loads(out.read_text()), records


def test_a_killed_process_is_resumed_by_a_new_one_without_a_second_submission(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    # The batch stays pending until the first process is killed (however slow the machine),
    # then ends about half a second into the new run's polling.
    fake.configure(batch_seconds=600.0)
    flow = make_flow({"echo": "Say {word}"}, ["word"])
    cmd, env, out = batch_cli(tmp_path, flow, ["one", "two", "three"])
    first = subprocess.Popen(
        [*cmd, "--no-progress"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    # Killed while polling: once the batch is remembered in FLOWNB_HOME under its id (that
    # record is written right after the provider created it, before any wait).
    records = Path(os.environ["FLOWNB_HOME"]) / "batches"
    wait_for(lambda: any(records.glob("batch*.json")), "the batch was never recorded")
    recorded = time.time()  # the batch was created before this
    assert fake.batches.created == 1
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=30)
    fake.configure(batch_seconds=time.time() - recorded + 0.5)
    second = run_cli(*cmd[3:], "--out", str(out), "--no-progress")  # a new run, in this process
    assert second.returncode == 0, second.stderr
    assert fake.batches.created == 1
    assert [r["echo"] for r in json.loads(out.read_text())] == [
        "echo: Say one",
        "echo: Say two",
        "echo: Say three",
    ]


def test_cancel_and_refresh_from_the_cli(fake: FakeOpenAI) -> None:
    fake.configure(batch_seconds=30)
    flow = flownb.load_flow(make_flow({"echo": "Say {word}"}, ["word"]))
    flow.run_dataframe(pd.DataFrame({"word": ["z"]}), batch_api=True, progress=False, poll=0)
    batch_id = flownb.batches().loc[0, "id"]
    cancelled = run_cli("batches", "--cancel", batch_id)
    assert cancelled.returncode == 0, cancelled.stderr
    listed = run_cli("batches", "--refresh")
    assert listed.returncode == 0 and batch_id in listed.stdout and "cancelled" in listed.stdout


def test_a_provider_without_a_batch_api_is_refused_in_one_line() -> None:
    flow = flownb.load_flow(make_flow({"echo": "Say {word}"}, ["word"]))  # offline
    with pytest.raises(flownb.ConfigError, match="no batch API"):
        flow.run_dataframe(pd.DataFrame({"word": ["a"]}), batch_api=True, progress=False)


def test_the_batch_magic_takes_batch_api(
    fake: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.testing.globalipapp import start_ipython

    start_ipython()
    shell = InteractiveShell.instance()
    monkeypatch.chdir(tmp_path)
    write_flow(tmp_path / "one.json", make_flow({"echo": "said: {text}"}, ["text"]))
    shell.user_ns["words"] = pd.DataFrame({"text": ["hi", "there"]})
    shell.run_line_magic("load_ext", "flownb")
    try:
        shell.run_line_magic("flow", "batch one.json --df words --batch-api --no-progress -o res")
        out = shell.user_ns.pop("res")
    finally:
        shell.run_line_magic("unload_ext", "flownb")
        shell.user_ns.pop("words", None)
    assert list(out["echo"]) == ["echo: said: hi", "echo: said: there"]
    assert fake.batches.created == 1 and len(_uploaded_lines(fake)) == 2


def test_batch_answers_are_priced_at_half_the_live_price(fake: FakeOpenAI) -> None:
    from flownb.config.pricing import call_cost
    from flownb.runtime.cache import open_cache

    flow = flownb.load_flow(make_flow({"echo": "Say {word}"}, ["word"]))  # gpt-4o-mini
    flow.run_dataframe(pd.DataFrame({"word": ["priced"]}), batch_api=True, progress=False)
    key = _uploaded_lines(fake)[0]["custom_id"]  # the call's cache key
    gen = open_cache(flow.config.home).get(key)
    assert gen is not None and gen.cost is not None
    live = call_cost("openai", gen.model, gen.usage, None)
    assert live > 0 and gen.cost == pytest.approx(live / 2)


def test_evaluate_sends_variants_then_judges_in_batches_and_a_rerun_pays_nothing(
    fake: FakeOpenAI,
) -> None:
    from flownb import scorers as S

    flow = flownb.load_flow(make_flow({"say": "Say {word}"}, ["word"]))
    variants = {"plain": flow, "loud": flow.with_prompts({"say": "SAY {word}!"})}
    data = pd.DataFrame({"word": ["owl", "bat", "elk"]})
    scorers = [S.judge("say", "Is it short?", threshold=0.5)]
    report = flownb.evaluate(variants, data, scorers, batch_api=True, progress=False, log=False)
    # One batch per variant's calls, then (a second stage) one for the judges'.
    assert fake.batches.created == 3
    uploads = [[json.loads(ln) for ln in up.splitlines()] for up in fake.batches.uploads]
    prompts = [[ln["body"]["messages"][-1]["content"] for ln in up] for up in uploads]
    assert [len(p) for p in prompts] == [3, 3, 6]
    assert not any(S.JUDGE_MARKER in t for p in prompts[:2] for t in p)
    assert all(S.JUDGE_MARKER in t for t in prompts[2])
    assert len(fake.requests) == 0  # nothing was called live
    assert report.results["judge_say"].notna().all()
    again = flownb.evaluate(variants, data, scorers, batch_api=True, progress=False, log=False)
    assert fake.batches.created == 3 and len(fake.requests) == 0
    pd.testing.assert_series_equal(again.results["judge_say"], report.results["judge_say"])


def test_the_preview_shows_the_batch_price_beside_the_live_one(fake: FakeOpenAI) -> None:
    flow = flownb.load_flow(make_flow({"say": "Say {word}"}, ["word"]))  # gpt-4o-mini: priced
    preview = flow.preview(pd.DataFrame({"word": ["owl", "bat"]}))
    assert preview.est_cost_known > 0
    assert preview.est_cost_batch == pytest.approx(preview.est_cost_known / 2)
    assert "through the batch API" in preview.cost_line()
    offline = flownb.load_flow(make_flow({"say": "Say {word}"}, ["word"]), provider="offline")
    assert "batch API" not in offline.preview(pd.DataFrame({"word": ["owl"]})).cost_line()


def test_a_process_killed_before_it_heard_the_batch_id_does_not_submit_it_twice(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    # The fake holds the create's answer back: the batch exists, its creator never learns its
    # id. The new process finds it by the digest in its metadata.
    flow = make_flow({"echo": "Say {word}"}, ["word"])
    results, records = killed_before_the_batch_id(
        fake, lambda: fake.batches.created, tmp_path, flow, ["one", "two", "three"]
    )
    assert fake.batches.created == 1 and len(fake.batches.uploads) == 1
    assert [r["echo"] for r in results] == [
        "echo: Say one",
        "echo: Say two",
        "echo: Say three",
    ]
    assert [p.name.startswith("batch") for p in records.glob("*.json")] == [True]


def test_a_create_that_never_reached_the_provider_is_submitted_again(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    # A process killed after recording its intent but before the provider created anything
    # leaves a pending record the next run finds no batch for: it submits the calls itself.
    flow = flownb.load_flow(make_flow({"echo": "Say {word}"}, ["word"]))
    df = pd.DataFrame({"word": ["solo"]})
    _save_submitting(flow, "pending-0123", "Say solo", "0" * 64)
    out = flow.run_dataframe(df, batch_api=True, progress=False)
    assert out.loc[0, "echo"] == "echo: Say solo" and fake.batches.created == 1
    assert list(flownb.batches()["id"]) == [
        fake.batches.uploads and next(iter(fake.batches.batches))
    ]


def _uploaded_key(flow: flownb.LocalFlow, prompt: str) -> str:
    step = flow.plan.steps[0]
    cache = flow.engine.cache
    assert cache is not None
    return cache.key(
        cache.prefix(flow.provider.identity(), "text", step.params, step.system), prompt
    )


def _save_submitting(
    flow: flownb.LocalFlow,
    ident: str,
    prompt: str,
    digest: str,
    pid: int = 2**22 + 12345,
    created: float | None = None,
) -> None:
    """Record in the flow's home a batch ``ident`` of the one ``prompt`` being submitted by
    process ``pid`` on this host (by default no such process) at ``created`` (default: now), as
    a killed run leaves it."""
    from flownb.frames.batch_api.store import SUBMITTING, BatchRecord, save_record

    record = BatchRecord(
        id=ident,
        provider="openai",
        base_url=flow.provider.batch_api().base_url,
        endpoint="/chat/completions",
        model="gpt-4o-mini",
        status=SUBMITTING,
        keys=[_uploaded_key(flow, prompt)],
        digest=digest,
        pid=pid,
        host=__import__("socket").gethostname(),
        logged=False,
        **({} if created is None else {"created": created}),
    )
    save_record(record, flow.config.home)


def test_the_run_log_counts_batch_answers_as_paid_once_at_the_batch_rate(
    fake: FakeOpenAI,
) -> None:
    from flownb.runtime.cache import open_cache

    flow = flownb.load_flow(make_flow({"echo": "Say {word}"}, ["word"]))
    df = pd.DataFrame({"word": ["kite", "drum", "kite"]})
    # Submitted by one call, collected by the next: the collecting run shows what was spent.
    flow.run_dataframe(df, batch_api=True, progress=False, poll=0)
    flow.run_dataframe(df, batch_api=True, progress=False)
    cache = open_cache(flow.config.home)
    costs = [cache.get(ln["custom_id"]).cost for ln in _uploaded_lines(fake)]  # type: ignore[union-attr]
    log = flownb.runs()
    first, collected = log[log["run_id"] == log["run_id"].iloc[0]], log.iloc[-3:]
    assert first["error"].notna().all()  # still waiting: nothing spent, nothing saved
    # The collecting run: each distinct answer once as a paid call (the repeated prompt is a
    # cache hit, as in a live run), its tokens counted, its cost the batch price.
    assert list(collected["cached"]) == [False, False, True]
    assert collected["cost_usd"].sum() == pytest.approx(sum(costs))
    assert collected["prompt_tokens"].iloc[:2].notna().all()
    assert flownb.runs(by="flow")["cost_usd"].iloc[0] == pytest.approx(sum(costs))
    # Afterwards the same frame is three cache hits: nothing spent, the batch price saved.
    flow.run_dataframe(df, batch_api=True, progress=False)
    again = flownb.runs().iloc[-3:]
    assert again["cached"].all() and (again["cost_usd"] == 0).all()
    assert again["saved_usd"].sum() == pytest.approx(sum(costs) + costs[0])


def test_evaluate_through_batches_logs_what_the_batches_cost(fake: FakeOpenAI) -> None:
    from flownb import scorers as S
    from flownb.runtime.cache import open_cache

    flow = flownb.load_flow(make_flow({"say": "Say {word}"}, ["word"]))
    data = pd.DataFrame({"word": ["owl", "bat"]})
    scorers = [S.judge("say", "Is it short?", threshold=0.5)]
    first = flownb.evaluate(
        {"plain": flow}, data, scorers, batch_api=True, progress=False, log=False
    )
    cache = open_cache(flow.config.home)
    lines = _uploaded_lines(fake)
    spent = sum(cache.get(ln["custom_id"]).cost for ln in lines)  # type: ignore[union-attr]
    log = flownb.runs()
    assert len(log) == 2 + 2 and not log["cached"].any()  # the variant's runs, the judges'
    assert log["cost_usd"].sum() == pytest.approx(spent)
    # In the report the batch answers are paid calls at the batch price, and that is their
    # price per row: not cache hits.
    bill = first.money
    assert not first.results["cached"].any()
    assert bill.loc["total", "spent_usd"] == pytest.approx(spent)
    assert bill.loc["total", "price_usd"] == pytest.approx(spent)
    assert bill.loc["total", "saved_usd"] == 0
    live = flownb.evaluate({"plain": flow}, data, scorers, progress=False, log=False)
    assert live.money.loc["total", "spent_usd"] == 0  # the same calls again: cache hits
    flownb.evaluate({"plain": flow}, data, scorers, batch_api=True, progress=False, log=False)
    again = flownb.runs().iloc[4:]
    assert again["cached"].all() and again["cost_usd"].sum() == 0
    assert live.summary["price_per_row"].tolist() == first.summary["price_per_row"].tolist()


def test_a_pending_batch_that_cannot_be_looked_for_stops_the_run_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FakeOpenAI() as gone:
        url = gone.url
    # The server is down now: the batches cannot be listed, so nothing may be submitted.
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("FLOWNB_PROVIDER", "openai")
    flow = flownb.load_flow(make_flow({"echo": "Say {word}"}, ["word"]))
    _save_submitting(flow, "pending-feedface", "Say lost", "f" * 64)
    with pytest.raises(flownb.ProviderError) as caught:
        flow.run_dataframe(pd.DataFrame({"word": ["lost"]}), batch_api=True, progress=False)
    message = str(caught.value)
    assert "\n" not in message and "may have created it" in message
    assert "pending-feedface.json" in message
    assert (Path(flow.config.home) / "batches" / "pending-feedface.json").exists()


def test_a_batch_another_live_process_is_submitting_is_not_submitted_again(
    fake: FakeOpenAI,
) -> None:
    flow = flownb.load_flow(make_flow({"echo": "Say {word}"}, ["word"]))
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        _save_submitting(flow, "pending-cafe", "Say busy", "c" * 64, pid=other.pid)
        out = flow.run_dataframe(pd.DataFrame({"word": ["busy"]}), batch_api=True, progress=False)
    finally:
        other.kill()
        other.wait()
    assert fake.batches.created == 0 and len(fake.requests) == 0
    assert f"being submitted as a provider batch by process {other.pid}" in out.loc[0, "error"]
    assert list(flownb.batches()["status"]) == ["submitting"]


def test_a_process_given_a_dead_submitters_number_later_does_not_hold_its_batch(
    fake: FakeOpenAI,
) -> None:
    # The writer died a minute ago; its process number now belongs to a process that started
    # since: the record is abandoned, so the run looks for the batch and submits the calls.
    flow = flownb.load_flow(make_flow({"echo": "Say {word}"}, ["word"]))
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        _save_submitting(
            flow, "pending-beef", "Say reused", "b" * 64, pid=other.pid, created=time.time() - 60
        )
        out = flow.run_dataframe(pd.DataFrame({"word": ["reused"]}), batch_api=True, progress=False)
    finally:
        other.kill()
        other.wait()
    assert out.loc[0, "echo"] == "echo: Say reused" and fake.batches.created == 1


def test_max_spend_submits_only_the_calls_that_fit_at_the_batch_price(fake: FakeOpenAI) -> None:
    from flownb.runtime.plan import step_calls
    from tests.vendor_fakes import flow_with

    params = {"model": "gpt-4o-mini", "max_tokens": 256}
    flow = flownb.load_flow(flow_with({"A": params, "B": params}))
    node = step_calls(flow.provider, flow.plan.steps[0])
    most = node.most("A about topic-0", batch=True)
    assert most == pytest.approx(node.most("A about topic-0") / 2)  # the batch API's own price
    df = pd.DataFrame({"topic": [f"topic-{i}" for i in range(10)]})
    with pytest.warns(UserWarning, match="over the spend cap"):
        out = flow.run_dataframe(df, batch_api=True, max_spend=7.5 * most, progress=False)
    lines = _uploaded_lines(fake)
    assert len(lines) == 7  # rows 0-2 whole, row 3's first node
    assert sum(node.most(ln["body"]["messages"][0]["content"], batch=True) for ln in lines) <= (
        7.5 * most
    )
    assert out["error"].isna().tolist() == [True] * 3 + [False] * 7
    assert out["error"].dropna().str.contains("spend_cap_reached").all()


def test_max_spend_settles_each_batch_to_what_its_answers_cost(
    fake: FakeOpenAI, capfd: pytest.CaptureFixture[str]
) -> None:
    from flownb.runtime.plan import step_calls

    # A chained flow: the drafts go in a second batch once the outlines are in. The cap holds
    # the outlines' bounds (256 tokens each) and a little more: the drafts fit only because the
    # outlines' batch is settled to what its short answers cost.
    params = {"model": "gpt-4o-mini", "max_tokens": 256}
    data = make_flow({"outline": "Outline {topic}", "draft": "Draft from {outline}"}, ["topic"])
    data["edges"].append({"id": "chain", "source": "node-outline", "target": "node-draft"})
    for node in data["nodes"]:
        if node["type"] == "actionNode":
            node["data"]["modelParams"] = params
    flow = flownb.load_flow(data)
    topics = ["owls", "bats", "moss", "eels"]
    outline = step_calls(flow.provider, flow.plan.steps[0])
    bounds = sum(outline.most(f"Outline {t}", batch=True) for t in topics)
    cap = bounds * 1.2
    with pytest.warns(UserWarning, match="over the spend cap"):  # the preview counts bounds
        out = flow.run_dataframe(
            pd.DataFrame({"topic": topics}), batch_api=True, max_spend=cap, progress=False
        )
    assert fake.batches.created == 2
    assert "error" not in out.columns
    assert list(out["draft"]) == [f"echo: Draft from echo: Outline {t}" for t in topics]
    line = [ln for ln in capfd.readouterr().err.splitlines() if "spend cap:" in ln][-1]
    used = float(line.split("spend cap: $")[1].split(" of ")[0])
    spent = sum(g.cost for g in _answers(flow, _uploaded_lines(fake)))
    assert used == pytest.approx(spent, rel=0.01) and used < bounds


def _answers(flow: flownb.LocalFlow, lines: list[dict]) -> list[Any]:
    cache = flow.engine.cache
    assert cache is not None
    return [cache.get(ln["custom_id"]) for ln in lines]


def test_evaluate_through_the_batch_api_stays_within_max_spend_judges_included(
    fake: FakeOpenAI, capfd: pytest.CaptureFixture[str]
) -> None:
    from flownb.runtime.plan import step_calls
    from flownb.scorers import judge
    from tests.vendor_fakes import flow_with

    params = {"model": "gpt-4o-mini", "max_tokens": 256}
    flow = flownb.load_flow(flow_with({"A": params}))
    grader = judge("A", "Is it about {topic}?", model="gpt-4o-mini", provider="openai")
    df = pd.DataFrame({"topic": [f"topic-{i}" for i in range(6)]})
    report = flownb.evaluate(
        flow, df, [grader], batch_api=True, max_spend=1.0, progress=False, log=False
    )
    # The variants' calls, then the judges', each through a batch at the batch price: none live.
    assert fake.batches.created == 2 and len(fake.requests) == 0
    lines = _uploaded_lines(fake)
    assert len(lines) == 12
    assert report.results["A"].notna().all()
    line = [ln for ln in capfd.readouterr().err.splitlines() if "spend cap:" in ln][-1]
    used = float(line.split("spend cap: $")[1].split(" of ")[0])
    paid = [g.cost for g in _answers(flow, lines)]
    assert used == pytest.approx(sum(paid), rel=0.01)

    # A cap worth three of the variants' calls at the batch price: three are submitted, settled
    # near their bounds (long answers), and nothing else fits, live or batched.
    fake.reset()
    fake.configure(usage_details={"completion_tokens": 250})
    try:
        node = step_calls(flow.provider, flow.plan.steps[0])
        more = pd.DataFrame({"topic": [f"other-{i}" for i in range(6)]})
        cap = 3.3 * node.most("A about other-0", batch=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            capped = flownb.evaluate(
                flow, more, [grader], batch_api=True, max_spend=cap, progress=False, log=False
            )
    finally:
        fake.configure(usage_details={})
    lines = _uploaded_lines(fake)
    assert len(lines) == 3 and len(fake.requests) == 0
    assert sum(g.cost for g in _answers(flow, lines)) <= cap
    text = capped.results.astype(str)
    assert text.apply(lambda c: c.str.contains("spend_cap_reached")).any().any()
