"""flownb.Client and RemoteFlow against a real ``flownb serve`` app on 127.0.0.1: the contract,
the local-flow interface, errors as flownb exceptions, chunked parallel batches, and partial
failures that keep what succeeded."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

import flownb
from flownb import (
    AuthError,
    BatchError,
    Client,
    ConfigError,
    FlowNotFound,
    InputError,
    ProviderError,
    RunResult,
)
from tests.cli_inprocess import run_cli
from tests.serving import (
    InlineScriptedProvider,
    Running,
    ScriptedProvider,
    run_server,
    sample_flows,
)

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    root = tmp_path_factory.mktemp("client")
    with run_server(sample_flows(root), root / "home") as running:
        yield running


@pytest.fixture
def client(server: Running) -> Iterator[Client]:
    with Client(server.url, server.key, backoff=0.01) as c:
        yield c


def test_describe_and_raw_runs(client: Client) -> None:
    assert client.get_flow_info("echo") == [
        {"name": "a", "type": "variable"},
        {"name": "b", "type": "variable"},
        {"name": "say", "type": "output"},
    ]
    assert client.run("echo", {"a": "1", "b": "2"}) == [
        {"name": "say", "output": "A=1 B=2", "type": "output"}
    ]
    assert client.run("echo", [{"a": "1", "b": "2"}, {"a": "3", "b": "4"}]) == [
        [{"name": "say", "output": "A=1 B=2", "type": "output"}],
        [{"name": "say", "output": "A=3 B=4", "type": "output"}],
    ]
    assert client.run("echo", []) == []


def test_a_remote_flow_runs_on_the_callers_event_loop_as_a_local_one_does(
    client: Client,
) -> None:
    import asyncio

    remote = client.flow("echo")

    async def both() -> tuple[RunResult, list[RunResult]]:
        one = await remote.arun({"a": "1"}, b="2")
        many = await remote.arun_batch([{"a": "3", "b": "4"}, {"a": "5", "b": "6"}])
        return one, many

    one, many = asyncio.run(both())
    assert one == {"say": "A=1 B=2"} and one.provider == "remote"
    assert [r["say"] for r in many] == ["A=3 B=4", "A=5 B=6"]
    with pytest.raises(InputError, match="missing variable 'b'"):
        asyncio.run(remote.arun({"a": "1"}))


def test_remote_flow_has_the_local_interface(client: Client, blog_flow_path: Path) -> None:
    remote = client.flow("blog-intro")
    local = flownb.load_flow(blog_flow_path)
    assert isinstance(remote, flownb.BaseFlow)
    assert remote.variables == local.variables == ["topic", "tone"]
    assert remote.outputs == local.outputs
    assert remote.describe() == local.describe()

    res = remote.run({"topic": "owls"}, tone="dry")
    want = local.run(topic="owls", tone="dry")
    assert isinstance(res, RunResult)
    assert res.provider == "remote"
    assert res["intro"] == want["intro"]
    assert res.kinds == {"intro": "text", "header_image": "image"}
    assert res["header_image"].startswith(client.base_url + "/media/")
    assert res.to_items() == client.run("blog-intro", {"topic": "owls", "tone": "dry"})
    assert "owls" in str(res) and "[image]" in str(res)


def test_run_batch_and_dataframe_keep_order(client: Client) -> None:
    remote = client.flow("echo")
    batch = [{"a": str(i), "b": "x"} for i in range(40)]
    results = remote.run_batch(batch)
    assert [r["say"] for r in results] == [f"A={i} B=x" for i in range(40)]

    df = pd.DataFrame({"a": ["1", "2", "3"], "b": ["x", "y", "z"]}, index=[10, 20, 30])
    out = remote.run_dataframe(df, progress=False)
    assert list(out.index) == [10, 20, 30]
    assert list(out["say"]) == ["A=1 B=x", "A=2 B=y", "A=3 B=z"]


def test_errors_are_flownb_exceptions_with_the_servers_message(
    client: Client, server: Running
) -> None:
    with pytest.raises(FlowNotFound, match="no flow with id 'nope'"):
        client.flow("nope")
    with pytest.raises(FlowNotFound):
        client.get_flow_info("../../etc/passwd")
    with pytest.raises(FlowNotFound):  # a refused batch raises the refusal, not a BatchError
        client.run("nope", [{"a": "1"}] * 3)
    with pytest.raises(InputError) as info:
        client.run("echo", {"a": 1, "zz": "x"})
    assert {(p.code, p.variable) for p in info.value.problems} == {
        ("invalid_variable_type", "a"),
        ("missing_variable", "b"),
        ("unknown_variable", "zz"),
    }
    with pytest.raises(InputError, match="JSON"):
        client.run("echo", {"a": float("nan"), "b": object()})
    with pytest.raises(InputError):  # checked locally, as a local flow does
        client.flow("echo").run(a="1")

    bad = Client(server.url, "fnb_wrong-key-value")
    with pytest.raises(AuthError) as auth:
        bad.flow("echo")
    assert auth.value.message == "invalid API key" and auth.value.status == 401
    assert auth.value.request_id


def test_configuration_errors_and_no_key_in_reprs(server: Running) -> None:
    with pytest.raises(ConfigError, match="FLOWNB_BASE_URL"):
        Client(api_key="k")
    with pytest.raises(ConfigError, match="FLOWNB_API_KEY"):
        Client(server.url)
    with pytest.raises(ConfigError, match="http"):
        Client("ftp://example", "k")
    c = Client(server.url, server.key)
    assert server.key not in repr(c) and server.key not in str(c.__dict__.get("_limits"))
    flow = c.flow("echo")
    assert server.key not in repr(flow)


def test_environment_supplies_address_and_key(
    server: Running, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLOWNB_BASE_URL", server.url + "/api/")
    monkeypatch.setenv("FLOWNB_API_KEY", server.key)
    c = Client()
    assert c.base_url == server.url
    assert c.flow("echo").run(a="x", b="y")["say"] == "A=x B=y"


def test_a_remote_flow_runs_a_frame_async_as_it_does_sync(client: Client) -> None:
    import asyncio

    import pandas as pd

    flow = client.flow("echo")
    df = pd.DataFrame({"a": ["1", "2"], "b": ["x", "y"]})
    got = asyncio.run(flow.arun_dataframe(df, progress=False))
    assert got["say"].tolist() == ["A=1 B=x", "A=2 B=y"]
    pd.testing.assert_frame_equal(got, flow.run_dataframe(df, progress=False))


def test_cli_runs_a_flow_id_through_the_client(server: Running) -> None:
    env = {"FLOWNB_BASE_URL": server.url, "FLOWNB_API_KEY": server.key}
    info = run_cli("info", "echo", env=env)
    assert info.returncode == 0, info.stderr
    assert "- a" in info.stdout and "- say" in info.stdout
    run = run_cli("run", "echo", "--var", "a=1", "--var", "b=2", env=env)
    assert run.returncode == 0, run.stderr
    assert "A=1 B=2" in run.stdout
    assert server.key not in run.stdout + run.stderr


# -- chunks, parallelism, partial failures -----------------------------------------------------


def test_large_batches_are_chunked_to_the_servers_limit_and_sent_in_parallel(
    tmp_path: Path,
) -> None:
    provider = ScriptedProvider(delay=0.3)
    # One provider call at a time per request: any overlap comes from parallel requests.
    with run_server(
        sample_flows(tmp_path), tmp_path / "home", provider=provider, max_batch=5, concurrency=1
    ) as server:
        client = Client(server.url, server.key, max_parallel=4)
        flow = client.flow("echo")  # learns the limit (5) from the describe answer
        batch = [{"a": f"SLOW{i}", "b": ""} for i in range(20)]
        results = flow.run_batch(batch)
    assert [r["say"] for r in results] == [f"A=SLOW{i} B=" for i in range(20)]
    assert sum(provider.calls.values()) == 20  # each element once
    assert provider.peak >= 3, provider.peak  # requests overlapped: not one at a time


def test_raw_run_chunks_too(tmp_path: Path) -> None:
    with run_server(sample_flows(tmp_path), tmp_path / "home", max_batch=3) as server:
        client = Client(server.url, server.key)
        client.get_flow_info("echo")
        out = client.run("echo", [{"a": str(i), "b": ""} for i in range(10)])
        assert [o[0]["output"] for o in out] == [f"A={i} B=" for i in range(10)]
        # A batch size set by the caller wins over the advertised limit.
        small = Client(server.url, server.key, batch_size=2)
        assert len(small.run("echo", [{"a": "1", "b": ""}] * 7)) == 7
        # A client that never saw the limit is refused (422 batch_too_large) and splits.
        fresh = Client(server.url, server.key)
        out = fresh.run("echo", [{"a": str(i), "b": ""} for i in range(11)])
        assert [o[0]["output"] for o in out] == [f"A={i} B=" for i in range(11)]


def test_partial_failures_keep_what_succeeded_and_retry_only_the_rest(tmp_path: Path) -> None:
    provider = InlineScriptedProvider()
    with run_server(sample_flows(tmp_path), tmp_path / "home", provider=provider) as server:
        client = Client(server.url, server.key, max_retries=2, backoff=0.01)
        flow = client.flow("echo")
        batch = [
            {"a": "ok0", "b": ""},
            {"a": "ONCE1", "b": ""},
            {"a": "ok2", "b": ""},
            {"a": "FAIL502", "b": "3"},
        ]
        with pytest.raises(BatchError) as info:
            flow.run_batch(batch)
    exc = info.value
    assert [r["say"] if r else None for r in exc.results] == [
        "A=ok0 B=",
        "A=ONCE1 B=",
        "A=ok2 B=",
        None,
    ]
    assert list(exc.errors) == [3]
    failure = exc.errors[3]
    assert isinstance(failure, ProviderError)
    assert failure.message == "the model refused the request (HTTP 400)"
    # Work that succeeded was never repeated; the failed elements were retried alone.
    assert provider.calls["A=ok0 B="] == 1 and provider.calls["A=ok2 B="] == 1
    assert provider.calls["A=ONCE1 B="] == 2
    assert provider.calls["A=FAIL502 B=3"] == 3  # first try + 2 retries


def test_single_run_failure_raises_the_provider_error(tmp_path: Path) -> None:
    with run_server(
        sample_flows(tmp_path), tmp_path / "home", provider=InlineScriptedProvider()
    ) as server:
        flow = Client(server.url, server.key, max_retries=1, backoff=0.01).flow("echo")
        with pytest.raises(ProviderError, match="refused the request"):
            flow.run(a="FAIL502", b="")
        assert flow.run(a="ONCE-single", b="")["say"] == "A=ONCE-single B="
