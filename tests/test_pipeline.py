"""One run pipeline: local runs, the DataFrame path, async runs and the server's run route all go
through :class:`flownb.runtime.pipeline.Runner`, so they share its behaviour (the run log, the
paths it
picks) and the public collector :class:`flownb.Outcomes`."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pandas as pd
import pytest

import flownb
from flownb.core.local import LocalCore
from flownb.errors import BatchError
from flownb.runtime.pipeline import INLINE_ON_LOOP
from flownb.server import ServerConfig
from tests.conftest import make_flow
from tests.providers_for_tests import EchoProvider
from tests.serving import post_run, run_server, sample_flows

ECHO = make_flow({"say": "hi {who}"}, ["who"])


def test_run_each_reports_every_element_once_and_keeps_nothing() -> None:
    flow = flownb.load_flow(ECHO, provider=EchoProvider(fail_on="bad"), log=False)
    seen: dict[int, object] = {}

    def on_result(i: int, result: object, exc: BaseException | None) -> None:
        assert i not in seen
        seen[i] = exc if exc is not None else result

    flow.run_each([{"who": "a"}, {"who": "bad"}, {"who": "c"}], on_result)
    assert seen[0] == {"say": "text:hi a"} and seen[2] == {"say": "text:hi c"}
    assert isinstance(seen[1], flownb.ProviderError)


def test_outcomes_keeps_input_order_and_raises_with_the_successes() -> None:
    flow = flownb.load_flow(ECHO, provider=EchoProvider(fail_on="bad"), log=False)
    outcomes = flownb.Outcomes(3)
    flow.run_each([{"who": "a"}, {"who": "bad"}, {"who": "c"}], outcomes)
    with pytest.raises(BatchError) as info:
        outcomes.value()
    assert info.value.results[0] == {"say": "text:hi a"} and info.value.results[1] is None
    assert set(info.value.errors) == {1}


def test_run_each_validates_the_whole_batch_first() -> None:
    flow = flownb.load_flow(ECHO, provider=EchoProvider(), log=False)
    calls: list[int] = []
    with pytest.raises(flownb.InputError, match="element 1"):
        flow.run_each([{"who": "a"}, {"whom": "b"}], lambda i, r, e: calls.append(i))
    assert calls == [] and flow.provider.calls == []


def test_a_big_offline_batch_from_a_running_loop_leaves_the_loop_free() -> None:
    # Over INLINE_ON_LOOP rows an inline batch runs in a worker thread: a coroutine on the same
    # loop keeps ticking meanwhile.
    flow = flownb.load_flow(make_flow({"pic": "a {who}"}, ["who"], images=("pic",)), log=False)
    rows = [{"who": f"owl {i}"} for i in range(INLINE_ON_LOOP * 3)]

    async def main() -> int:
        ticks = 0
        done = asyncio.Event()

        async def tick() -> None:
            nonlocal ticks
            while not done.is_set():
                ticks += 1
                await asyncio.sleep(0)

        ticker = asyncio.create_task(tick())
        results = await flow.arun_batch(rows)
        done.set()
        await ticker
        assert len(results) == len(rows)
        return ticks

    assert asyncio.run(main()) > 1


def test_the_server_records_runs_in_the_run_log_only_when_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    flows = sample_flows(tmp_path)
    for log, home in ((None, tmp_path / "quiet"), (True, tmp_path / "logged")):
        with run_server(flows, home, log=log) as server:
            assert post_run(server, "echo", [{"a": "1", "b": "2"}]).status_code == 200
            assert (server.config.runlog is not None) is bool(log)
    monkeypatch.setenv("FLOWNB_HOME", str(tmp_path / "quiet"))
    assert len(flownb.runs()) == 0
    monkeypatch.setenv("FLOWNB_HOME", str(tmp_path / "logged"))
    logged = flownb.runs()
    assert list(logged["flow"]) == ["echo"] and logged["outputs"][0] == {"say": "A=1 B=2"}


def test_the_dataframe_path_and_run_batch_log_alike() -> None:
    flow = flownb.load_flow(ECHO, provider=EchoProvider(fail_on="bad"))
    out = flow.run_dataframe(pd.DataFrame({"who": ["x", "bad"]}), progress=False)
    assert list(out["say"]) == ["text:hi x", pd.NA]
    with pytest.raises(BatchError):
        flow.run_batch([{"who": "x"}, {"who": "bad"}])
    log = flownb.runs("flow")
    assert len(log) == 4 and log["run_id"].nunique() == 2
    assert list(log["error"].isna()) == [True, False, True, False]
    assert log["error"][1].startswith("provider_error: ")  # one_line(exc, code=True)


def test_local_flows_and_the_server_assemble_their_engine_alike(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One assembly (flownb.runtime.pipeline.assemble): the server's engines get every run
    # setting a local flow's get, its token limit included.
    monkeypatch.setenv("FLOWNB_TPM", "5000")
    monkeypatch.setenv("FLOWNB_TIMEOUT", "7")
    monkeypatch.setenv("FLOWNB_RETRIES", "2")
    flow = flownb.load_flow(ECHO)
    server = ServerConfig(sample_flows(tmp_path), home=tmp_path / "home", log=True)
    stored = server.store.get("echo")
    # The server holds the core the notebook's flow is composed from (a LocalFlow is a LocalCore
    # with the features on top), and its routes run that core's own runner.
    assert isinstance(stored.flow, LocalCore) and isinstance(flow, LocalCore)
    runner = stored.runner
    assert runner is stored.flow.runner
    for engine in (flow.engine, runner.engine):
        assert engine.tokens is not None
        assert (engine.timeout, engine.retries) == (7.0, 2)
    assert runner.runlog is not None and runner.name == "echo"


def test_the_run_settings_are_checked_by_name() -> None:
    with pytest.raises(TypeError, match=r"argument 'concurency'; did you mean 'concurrency'\?"):
        flownb.load_flow(ECHO, concurency=4)  # type: ignore[call-arg]
    assert flownb.load_flow(ECHO, concurrency=4, tpm=100, log=False).concurrency == 4
