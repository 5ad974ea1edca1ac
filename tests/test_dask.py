"""Dask DataFrames on a real distributed.LocalCluster with two process workers (one module-wide
cluster), against the loopback fake OpenAI server in this process: the same rows as the pandas
path, one concurrency and rate limit across the workers, a worker killed mid-batch."""

from __future__ import annotations

import itertools
import os
import pickle
import signal
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import flownb
from flownb.errors import ConfigError, InputError
from flownb.frames.dask.limits import METER_EVENTS
from flownb.show.meter import usd
from flownb.testing.fake_openai import FakeOpenAI, echo
from tests.conftest import make_flow

KEY = "sk-test-SECRET-dask-0123456789"
SAY = make_flow({"say": "say {word}"}, ["word"])

# dask, dask.dataframe and distributed, imported when this module's first test starts rather
# than at collection: every xdist worker collects this module, and importing them costs about a
# second and a half of CPU, paid then by the one worker that runs it.
dask: Any = None
dd: Any = None
distributed: Any = None


@pytest.fixture(scope="module", autouse=True)
def _dask_modules() -> None:
    """Import Dask for this module's tests (skipping them when it is not installed)."""
    global dask, dd, distributed
    dask = pytest.importorskip("dask")
    dd = pytest.importorskip("dask.dataframe")
    distributed = pytest.importorskip("distributed")


@pytest.fixture(scope="module")
def client() -> Iterator[distributed.Client]:
    """Two process workers, one thread each; a dead worker's semaphore leases expire in 2 s.
    The environment is put back afterwards: a nanny writes its workers' variables
    (OMP_NUM_THREADS, PYTHONHASHSEED, ...) into this process's before it starts them, and
    every subprocess a later test starts would inherit them."""
    environ = os.environ.copy()
    config = {
        "distributed.scheduler.locks.lease-timeout": "2s",
        "distributed.scheduler.locks.lease-validation-interval": "200ms",
        "distributed.scheduler.worker-ttl": None,
    }
    with (
        dask.config.set(config),
        distributed.LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            worker_dashboard_address=None,
        ) as cluster,
        distributed.Client(cluster) as c,
    ):
        yield c
    os.environ.clear()
    os.environ.update(environ)


@pytest.fixture(scope="module")
def fake_server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


@pytest.fixture
def fake(fake_server: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> FakeOpenAI:
    fake_server.configure(latency=0.0, faults={}, fail_markers={}, retry_after="0", seed=0)
    fake_server.reset()
    monkeypatch.setenv("OPENAI_BASE_URL", fake_server.url)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    return fake_server


def words(n: int) -> pd.DataFrame:
    """A frame of ``n`` distinct words, indexed by labels (not 0..n-1) to check the index."""
    return pd.DataFrame(
        {"word": [f"w{i}" for i in range(n)]}, index=[f"r{i:03d}" for i in range(n)]
    )


def prompts_sent(fake: FakeOpenAI) -> Counter[str]:
    return Counter(body["messages"][-1]["content"] for body in fake.requests)


def assert_same_rows(got: pd.DataFrame, want: pd.DataFrame) -> None:
    assert list(got.columns) == list(want.columns)
    assert list(got.index) == list(want.index)
    for label in want.index:
        assert got.loc[label].tolist() == want.loc[label].tolist(), label


# -- the pandas path's rows, lazily ------------------------------------------------------------


def test_offline_flow_over_a_dask_frame_equals_the_pandas_path(
    client: distributed.Client, blog_flow_path: Path, flownb_env: Path
) -> None:
    flow = flownb.load_flow(blog_flow_path)
    df = pd.DataFrame(
        {"topic": [f"topic {i}" for i in range(12)], "tone": ["dry", "warm", "odd"] * 4},
        index=pd.Index([100 + 3 * i for i in range(12)], name="row"),
    )
    ddf = dd.from_pandas(df, npartitions=3)

    out = flow.run_dataframe(ddf)

    assert isinstance(out, dd.DataFrame)
    assert not (flownb_env / "media").exists() or not any((flownb_env / "media").iterdir())
    assert list(out.columns) == ["topic", "tone", "intro", "header_image", "error"]
    assert {str(out.dtypes[c]) for c in ("intro", "header_image", "error")} == {"string"}
    got = out.compute()
    want = flow.run_dataframe(df, progress=False)
    want["error"] = pd.Series(pd.NA, index=df.index, dtype="string")  # the Dask path has it
    assert got.index.name == "row"
    assert_same_rows(got.astype(object), want.astype(object))


def test_openai_rows_equal_the_pandas_path_and_failures_fill_the_error_column(
    client: distributed.Client, fake: FakeOpenAI
) -> None:
    fake.configure(fail_markers={"500": "w7"})
    flow = flownb.load_flow(SAY, provider="openai", retries=0, cache=False, log=False)
    df = words(20)

    got = flow.run_dataframe(dd.from_pandas(df, npartitions=4), concurrency=4).compute()
    want = flow.run_dataframe(df, progress=False, concurrency=4)

    assert_same_rows(got.astype(object), want.astype(object))
    assert got.loc["r003", "say"] == echo("say w3")
    assert got.loc["r007", "say"] is pd.NA and "provider_error" in got.loc["r007", "error"]
    assert got["error"].isna().sum() == 19


def test_missing_columns_are_refused_before_anything_runs(client: distributed.Client) -> None:
    flow = flownb.load_flow(SAY)
    ddf = dd.from_pandas(pd.DataFrame({"other": ["a"]}), npartitions=1)
    with pytest.raises(InputError, match="no column for variable 'word'"):
        flow.run_dataframe(ddf)
    with pytest.raises(ConfigError, match="concurrency must be positive"):
        flow.run_dataframe(dd.from_pandas(words(2), npartitions=1), concurrency=0)
    with pytest.raises(ConfigError, match="trace=True is for pandas frames"):
        flow.run_dataframe(dd.from_pandas(words(2), npartitions=1), trace=True)


def test_missing_cells_fail_the_partition_with_the_pandas_message(
    client: distributed.Client,
) -> None:
    flow = flownb.load_flow(SAY)
    df = pd.DataFrame({"word": ["a", None, "c"]})
    with pytest.raises(InputError, match="is empty"):
        flow.run_dataframe(dd.from_pandas(df, npartitions=1)).compute()
    filled = flow.run_dataframe(dd.from_pandas(df, npartitions=1), fill="?").compute()
    assert filled["say"].tolist() == ["say a", "say ?", "say c"]
    assert filled["word"].tolist() == ["a", "?", "c"]  # as in the pandas path


def test_dask_is_imported_only_when_a_dask_frame_is_used(tmp_path: Path) -> None:
    import subprocess
    import sys

    code = (
        "import sys, pandas as pd, flownb\n"
        "one = {'id': 'o', 'type': 'outputNode', 'data': {'name': 'o'}}\n"
        "flow = flownb.load_flow({'nodes': [one], 'edges': []}, log=False)\n"
        "flow.run_dataframe(pd.DataFrame({'a': ['x']}), progress=False)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed')))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(flownb.__file__).parent.parent)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_flownb_tpm_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLOWNB_TPM", "90000")
    flow = flownb.load_flow(SAY)
    assert flow.config.tpm == 90000
    monkeypatch.setenv("FLOWNB_TPM", "lots")
    with pytest.raises(ConfigError, match="FLOWNB_TPM must be a number"):
        flownb.load_flow(SAY)


# -- flows travel by value ---------------------------------------------------------------------


def test_a_local_flow_pickles_as_its_spec_without_the_key(fake: FakeOpenAI) -> None:
    flow = flownb.load_flow(SAY, provider="openai", concurrency=3, tpm=5000, cache=False)
    data = pickle.dumps(flow)

    assert KEY.encode() not in data
    assert b"Thread" not in data and b"sqlite" not in data.lower()
    copy = pickle.loads(data)
    assert copy.source == flow.source and copy.concurrency == 3
    assert copy.config.tpm == 5000 and copy.provider.base_url == fake.url
    assert copy.run({"word": "owl"}) == {"say": echo("say owl")}
    assert pickle.loads(data) is copy  # one flow per spec per process
    import copy as copying

    assert copying.copy(flow).engine is flow.engine
    twin = copying.deepcopy(flow)
    assert twin is not copy and twin.engine is not flow.engine and twin.source == flow.source


def test_a_flow_with_a_provider_instance_of_its_own_cannot_travel() -> None:
    from tests.providers_for_tests import EchoProvider

    flow = flownb.load_flow(SAY, provider=EchoProvider())
    with pytest.raises(ConfigError, match="cannot rebuild"):
        pickle.dumps(flow)


def test_each_worker_builds_the_flow_once_and_reuses_it(client: distributed.Client) -> None:
    flow = flownb.load_flow(SAY)
    flow.run_dataframe(dd.from_pandas(words(40), npartitions=8)).compute()

    def flows_built() -> int:
        from flownb.core import spec

        return len(spec._flows)

    before = client.run(flows_built)
    flow.run_dataframe(dd.from_pandas(words(40), npartitions=8)).compute()
    # A second run of the same flow builds nothing new on any worker.
    assert client.run(flows_built) == before


# -- one limit across the cluster ----------------------------------------------------------------


def test_concurrency_holds_across_both_workers(
    client: distributed.Client, fake: FakeOpenAI
) -> None:
    fake.configure(latency=0.05)
    flow = flownb.load_flow(SAY, provider="openai", cache=False, log=False)
    ddf = dd.from_pandas(words(48), npartitions=4)

    got = flow.run_dataframe(ddf, concurrency=3).compute()

    assert got["say"].tolist() == [echo(f"say w{i}") for i in range(48)]
    assert sum(prompts_sent(fake).values()) == 48
    assert fake.peak_in_flight == 3  # reached, never exceeded (each worker alone allows 3)


def meter_ledger(
    client: distributed.Client, kind: str, before: int, events: int
) -> list[dict[str, Any]]:
    """Return the ``events`` charges and corrections the cluster's shared ``kind`` meter (rpm or
    tpm) logged after the first ``before`` events of the topic: one run's ledger. Corrections
    are sent without waiting, so they may reach the scheduler just after the run's result."""
    deadline = time.monotonic() + 60
    while True:
        logged = [msg for _, msg in client.get_events(METER_EVENTS)][before:]
        if len(logged) >= events or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert len(logged) == events, logged
    assert len({msg["meter"] for msg in logged}) == 1  # one meter for the whole run
    assert logged[0]["meter"].endswith(f"-{kind}")
    return logged


def logged_so_far(client: distributed.Client) -> int:
    return len(client.get_events(METER_EVENTS))


def test_requests_per_minute_hold_across_both_workers(
    client: distributed.Client, fake: FakeOpenAI
) -> None:
    flow = flownb.load_flow(SAY, provider="openai", cache=False, log=False)
    ddf = dd.from_pandas(words(16), npartitions=2)
    before = logged_so_far(client)

    got = flow.run_dataframe(ddf, concurrency=8, rpm=600).compute()  # one call per 0.1 s

    assert got["error"].isna().all()
    charges = meter_ledger(client, "rpm", before, 16)
    # Both workers charged the one meter, one request each call, and the meter admitted them
    # 0.1 s apart on its own clock (a worker pacing alone would have let the two interleave).
    assert {msg["worker"] for msg in charges} == set(client.scheduler_info()["workers"])
    assert all(msg["kind"] == "charge" and msg["units"] == 1 for msg in charges)
    admitted = sorted(msg["at"] for msg in charges)
    assert min(b - a for a, b in itertools.pairwise(admitted)) >= 0.1 - 1e-6


def test_tokens_per_minute_hold_in_one_process_and_settle_on_the_usage(fake: FakeOpenAI) -> None:
    flow_json = make_flow({"say": "say {word}"}, ["word"])
    flow_json["nodes"][1]["data"]["modelParams"] = {"model": "gpt-4o-mini", "max_tokens": 50}
    # Each call is estimated at 2 + 50 tokens before it is sent and uses 5 (the fake counts
    # words: "say wN" + "echo: say wN"); the meter is corrected by the usage reported.
    flow = flownb.load_flow(flow_json, provider="openai", tpm=3000, cache=False, log=False)

    out = flow.run_batch([{"word": f"w{i}"} for i in range(10)], concurrency=1)

    assert [r["say"] for r in out] == [echo(f"say w{i}") for i in range(10)]
    assert all(body["max_tokens"] == 50 for body in fake.requests)
    # The engine's meter (3000 tokens/min, shared by every run of the flow) admitted ten
    # charges and holds what they used, 10 x 5 tokens; left on the estimates it would hold
    # 10 x 52, and pace the next calls by them.
    meter = flow.engine.tokens.meter  # type: ignore[union-attr]
    assert meter.charges == 10
    assert meter.charged == 10 * 5


def test_tokens_per_minute_hold_across_both_workers(
    client: distributed.Client, fake: FakeOpenAI
) -> None:
    flow_json = make_flow({"say": "say {word}"}, ["word"])
    flow_json["nodes"][1]["data"]["modelParams"] = {"model": "gpt-4o-mini", "max_tokens": 50}
    flow = flownb.load_flow(flow_json, provider="openai", cache=False, log=False)
    ddf = dd.from_pandas(words(10), npartitions=2)
    before = logged_so_far(client)

    got = flow.run_dataframe(ddf, concurrency=4, tpm=3000).compute()

    assert got["say"].tolist() == [echo(f"say w{i}") for i in range(10)]
    # One budget for both workers: each call charged its estimate (2 + 50 tokens) to the
    # cluster's meter before it was sent, and corrected it by the 5 it used once answered.
    ledger = meter_ledger(client, "tpm", before, 20)
    charges = [msg for msg in ledger if msg["kind"] == "charge"]
    corrections = [msg for msg in ledger if msg["kind"] == "correction"]
    assert [msg["units"] for msg in charges] == [52] * 10
    assert [msg["units"] for msg in corrections] == [5 - 52] * 10
    assert {msg["worker"] for msg in charges} == set(client.scheduler_info()["workers"])
    assert sum(msg["units"] for msg in ledger) == 10 * 5  # what the calls used, no more


def test_a_pandas_run_takes_its_own_rpm(fake: FakeOpenAI) -> None:
    flow = flownb.load_flow(SAY, provider="openai", cache=False, log=False)
    started = time.perf_counter()
    out = flow.run_dataframe(words(6), progress=False, concurrency=6, rpm=600)
    elapsed = time.perf_counter() - started
    assert out["say"].tolist() == [echo(f"say w{i}") for i in range(6)]
    assert elapsed >= 0.45  # 6 starts 0.1 s apart; unpaced it takes a few ms
    assert flow.config.rpm is None  # the flow itself is untouched


# -- a worker killed mid-batch -------------------------------------------------------------------


def test_a_worker_killed_mid_batch_loses_no_row_and_repays_no_finished_call(
    client: distributed.Client, fake: FakeOpenAI, flownb_env: Path
) -> None:
    fake.configure(latency=0.1)
    concurrency = 4
    flow = flownb.load_flow(SAY, provider="openai", retries=0)  # cache and log on
    n = 48
    ddf = dd.from_pandas(words(n), npartitions=2)
    future = client.compute(flow.run_dataframe(ddf, concurrency=concurrency))

    # Once enough calls have finished, SIGKILL a worker that is running a partition.
    deadline = time.monotonic() + 30
    while fake.stats()["answered"] < 16:
        assert time.monotonic() < deadline, "the batch did not start"
        time.sleep(0.01)
    pids = client.run(os.getpid)
    busy = [addr for addr, keys in client.processing().items() if keys]
    os.kill(pids[busy[0]], signal.SIGKILL)
    got = future.result(timeout=60)

    assert got["say"].tolist() == [echo(f"say w{i}") for i in range(n)]
    assert got["error"].isna().all()
    sent = prompts_sent(fake)
    assert set(sent) == {f"say w{i}" for i in range(n)}
    # Only calls in flight when the worker died may be sent again: at most `concurrency`.
    repeated = sum(count - 1 for count in sent.values())
    assert repeated <= concurrency, sent.most_common(8)
    # The run log holds each row once, though the killed partition logged some rows twice.
    log = flownb.runs("flow")
    assert sorted(log["inputs"].map(lambda v: v["word"])) == sorted(f"w{i}" for i in range(n))
    assert log.groupby("run_id").size().tolist() == [n // 2, n // 2]


# -- serial fallback -----------------------------------------------------------------------------


def test_without_a_distributed_client_the_limits_hold_in_the_process(fake: FakeOpenAI) -> None:
    fake.configure(latency=0.03)
    flow = flownb.load_flow(SAY, provider="openai", cache=False, log=False)
    ddf = dd.from_pandas(words(24), npartitions=4)
    with dask.config.set(scheduler="threads", num_workers=4):
        got = flow.run_dataframe(ddf, concurrency=2).compute()
    assert got["say"].tolist() == [echo(f"say w{i}") for i in range(24)]
    assert fake.peak_in_flight == 2


# -- endpoints: each flow takes its own endpoint and key's name to the workers -------------------


def test_two_vendors_with_two_keys_in_one_dask_computation(
    client: distributed.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flownb.config.endpoints import Endpoint

    keys = {"DASK_KEY_A": "sk-dask-vendor-A-1111", "DASK_KEY_B": "sk-dask-vendor-B-2222"}

    def set_keys(values: dict[str, str | None]) -> None:
        for name, value in values.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value

    class Keys(distributed.WorkerPlugin):
        """The variables in every worker's own environment, a worker started again (its nanny
        restarts it on a loaded machine) included: client.run reaches only today's workers."""

        def setup(self, worker: object) -> None:
            set_keys(keys)

    for name, value in keys.items():
        monkeypatch.setenv(name, value)
    client.register_plugin(Keys(), name="flownb-test-keys")
    try:
        with FakeOpenAI() as a, FakeOpenAI() as b:
            flow_a = flownb.load_flow(
                SAY,
                endpoint=Endpoint("a", "openai", base_url=a.url, api_key_env="DASK_KEY_A"),
                cache=False,
                log=False,
            )
            flow_b = flow_a.with_endpoint(
                Endpoint("b", "openai", base_url=b.url, api_key_env="DASK_KEY_B")
            )
            ddf = dd.from_pandas(words(24), npartitions=4)
            got_a, got_b = dask.compute(flow_a.run_dataframe(ddf), flow_b.run_dataframe(ddf))
            assert got_a["error"].isna().all() and got_b["error"].isna().all()
            assert len(a.requests) == 24 and len(b.requests) == 24
            for fake, key in ((a, keys["DASK_KEY_A"]), (b, keys["DASK_KEY_B"])):
                sent = {
                    {k.lower(): v for k, v in r["headers"].items()}["authorization"]
                    for r in fake.received
                }
                assert sent == {f"Bearer {key}"}

            # A literal key stays in this process: the workers' flow fails in one line.
            literal = flownb.load_flow(SAY, base_url=a.url, api_key="sk-literal-0000", log=False)
            with pytest.raises(ConfigError, match="api_key_env") as info:
                literal.run_dataframe(ddf).compute()
            assert "sk-literal" not in str(info.value)
    finally:
        client.unregister_worker_plugin("flownb-test-keys")
        client.run(set_keys, dict.fromkeys(keys))


# -- one spend cap across the cluster ------------------------------------------------------------

SPEND_MODEL = "gpt-4o-mini"
# Every answer reports 250 output tokens, close to max_tokens 256: its real cost is near the most
# it could cost, as a long answer's is.
LONG = {"usage_details": {"completion_tokens": 250}}


def _bought(fake: FakeOpenAI) -> tuple[int, float, list[str]]:
    """Return the text calls the fake received, what they cost from the usage it reported
    (words as tokens) and the price table, and their prompts."""
    from flownb.config.pricing import call_cost

    prompts = [
        r["body"]["messages"][-1]["content"] for r in fake.received if "messages" in r["body"]
    ]
    cost = sum(
        call_cost(
            "openai", SPEND_MODEL, {"prompt_tokens": len(p.split()), "completion_tokens": 250}
        )
        for p in prompts
    )
    return len(prompts), cost, prompts


def _cap_line(capsys: pytest.CaptureFixture[str]) -> str:
    """Wait for the one ``flownb: spend cap: ...`` line a capped computation ends with (on a
    cluster it comes from the workers through the scheduler, so it may follow ``compute()``);
    return it."""
    seen = ""
    deadline = time.monotonic() + 60
    while "flownb: spend cap: " not in seen:
        assert time.monotonic() < deadline, f"no spend cap line; stderr: {seen!r}"
        time.sleep(0.05)
        seen += capsys.readouterr().err
    lines = [ln for ln in seen.splitlines() if ln.startswith("flownb: spend cap: ")]
    assert len(lines) == 1, lines
    return lines[0]


def _says_used(line: str, dollars: float) -> bool:
    """Whether cap line ``line`` says ``dollars`` were used, to the digits it shows."""
    shown = line.split("spend cap: $")[1].split(" of ")[0].replace(",", "")
    digits = len(shown.partition(".")[2])
    return abs(float(shown) - dollars) <= 0.5 * 10**-digits + 1e-12


@pytest.fixture
def long_answers(fake: FakeOpenAI) -> Iterator[FakeOpenAI]:
    fake.configure(**LONG)
    yield fake
    fake.configure(usage_details={})  # the other tests count the fake's own usage


@pytest.mark.parametrize("concurrency", [1, 8, 32])
def test_one_spend_cap_holds_across_both_workers_and_a_higher_cap_completes_from_the_cache(
    client: distributed.Client,
    long_answers: FakeOpenAI,
    concurrency: int,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from flownb.config.pricing import call_cost
    from tests.vendor_fakes import flow_with

    fake = long_answers
    params = {"model": SPEND_MODEL, "max_tokens": 256}
    flow = flownb.load_flow(flow_with({"A": params, "B": params}), provider="openai", name="capped")
    df = pd.DataFrame({"topic": [f"topic-{i}" for i in range(60)]})
    cap = 17 * call_cost("openai", SPEND_MODEL, {"prompt_tokens": 3, "completion_tokens": 250})

    ddf = dd.from_pandas(df, npartitions=4)
    capsys.readouterr()
    out = flow.run_dataframe(ddf, concurrency=concurrency, max_spend=cap).compute()

    n, spent, prompts = _bought(fake)
    assert spent <= cap  # across both workers together: each alone would have bought 17
    assert n >= 12
    missing = out["A"].isna() | out["B"].isna()
    assert missing.sum() > 0
    assert out.loc[missing, "error"].str.contains("spend_cap_reached").all()
    assert out.loc[~missing, "error"].isna().all()
    # This process says how much of the cap the cluster used, once, as the pandas path does.
    line = _cap_line(capsys)
    assert _says_used(line, spent) and f" of {usd(cap)} used" in line
    assert " call(s) not sent (they could have passed the cap)" in line
    # A higher cap completes the frame from the cache: each distinct prompt bought once in all.
    again = flow.run_dataframe(ddf, concurrency=concurrency, max_spend=1.0).compute()
    assert again["error"].isna().all() and again["A"].notna().all() and again["B"].notna().all()
    n2, spent2, prompts2 = _bought(fake)
    assert n2 == 120 and len(set(prompts2)) == 120
    assert prompts2[:n] == prompts
    line = _cap_line(capsys)
    assert _says_used(line, spent2 - spent)
    assert line.endswith(" of $1.00 used")  # nothing refused


def test_a_dask_run_with_an_unpriced_model_is_refused_before_anything_runs(
    client: distributed.Client, fake: FakeOpenAI
) -> None:
    from tests.vendor_fakes import flow_with

    flow = flownb.load_flow(
        flow_with({"A": {"model": "my-local-llama", "max_tokens": 50}}), provider="openai"
    )
    ddf = dd.from_pandas(pd.DataFrame({"topic": ["a", "b"]}), npartitions=1)
    with pytest.raises(ConfigError, match=r"max_spend cannot cap node .A..*no known price"):
        flow.run_dataframe(ddf, max_spend=5)
    assert fake.requests == []


def test_without_a_distributed_client_the_spend_cap_holds_in_the_process(
    long_answers: FakeOpenAI, capsys: pytest.CaptureFixture[str]
) -> None:
    from flownb.config.pricing import call_cost
    from tests.vendor_fakes import flow_with

    params = {"model": SPEND_MODEL, "max_tokens": 256}
    flow = flownb.load_flow(flow_with({"A": params}), provider="openai", log=False)
    cap = 5 * call_cost("openai", SPEND_MODEL, {"prompt_tokens": 3, "completion_tokens": 250})
    ddf = dd.from_pandas(pd.DataFrame({"topic": [f"t{i}" for i in range(16)]}), npartitions=4)
    capsys.readouterr()
    with dask.config.set(scheduler="threads", num_workers=4):
        out = flow.run_dataframe(ddf, concurrency=4, max_spend=cap).compute()
    # Said in this process by the partition that ended last, before compute() returned.
    said = [ln for ln in capsys.readouterr().err.splitlines() if "spend cap: " in ln]
    n, spent, _ = _bought(long_answers)
    assert 1 <= n <= 5 and spent <= cap
    assert out["error"].notna().sum() == 16 - n
    assert out["error"].dropna().str.contains("spend_cap_reached").all()
    assert len(said) == 1 and _says_used(said[0], spent)
    # The words of the pandas path's line (tests/test_spend_cap.py), with this run's figures.
    assert said[0].split(" of ", 1)[1] == (
        f"{usd(cap)} used; {16 - n} call(s) not sent (they could have passed the cap): their "
        "rows are marked in the error column, and a re-run with a higher max_spend buys them"
    )


def test_a_worker_gone_holding_reservations_counts_them_as_spent_and_blocks_nobody(
    client: distributed.Client,
) -> None:
    from flownb.frames.dask.spend import PLUGIN, SpendLedgers

    client.register_plugin(SpendLedgers(), name=PLUGIN)
    alive = next(iter(client.scheduler_info()["workers"]))
    gone = "tcp://127.0.0.1:1"  # no worker of the cluster: one that died
    run = f"test-{time.monotonic_ns()}"

    def step(action: str, worker: str, most: float, cost: float = 0.0) -> dict:
        answer: dict = client.sync(
            client.scheduler.flownb_spend,
            run=run,
            cap=1.0,
            action=action,
            worker=worker,
            most=most,
            cost=cost,
        )
        return answer

    assert step("reserve", alive, 0.6)["fits"] is True
    assert step("reserve", gone, 0.3)["fits"] is True
    # The gone worker's bound is now spent (its call may have been billed); the live worker's
    # call in flight may still free room, so the next call waits rather than being refused.
    waiting = step("reserve", alive, 0.2)
    assert waiting["fits"] is None and waiting["spent"] == pytest.approx(0.3)
    assert step("settle", alive, 0.6, cost=0.5)["spent"] == pytest.approx(0.8)
    refused = step("reserve", alive, 0.3)  # nothing in flight anywhere: it never will fit
    assert refused["fits"] is False and refused["reserved"] == 0.0
    assert step("reserve", alive, 0.2)["fits"] is True
