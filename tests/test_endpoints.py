"""Endpoints: many named ways to reach a model in one process and one evaluation; Azure OpenAI on
both transports; keys that stay where they belong; system messages; per-node models. Every call
goes to loopback fakes that record the path, query, headers and body of each request."""

from __future__ import annotations

import copy
import os
import pickle
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

import flownb
from flownb.config.endpoints import Endpoint
from flownb.errors import ConfigError
from flownb.testing.fake_openai import FakeOpenAI
from tests.cli_inprocess import CliResult, run_cli
from tests.conftest import make_flow

KEY_A = "sk-vendor-A-0123456789"
KEY_B = "sk-vendor-B-9876543210"


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[FakeOpenAI, FakeOpenAI]]:
    with FakeOpenAI() as a, FakeOpenAI() as b:
        yield a, b


@pytest.fixture
def fakes(
    servers: tuple[FakeOpenAI, FakeOpenAI], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> tuple[FakeOpenAI, FakeOpenAI]:
    for server in servers:
        # retry_after="0": these tests need speed, not the vendors' whole-second waits.
        server.configure(
            latency=0.0, faults={}, usage_details={}, max_in_flight=None, retry_after="0"
        )
        server.reset()
    for name in list(os.environ):
        if name.startswith("AZURE_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("KEY_A", KEY_A)
    monkeypatch.setenv("KEY_B", KEY_B)
    monkeypatch.chdir(tmp_path)  # no flownb.toml or .env from the checkout
    return servers


def text_flow(prompt: str = "About {topic}.", *, image: bool = False) -> dict:
    prompts = {"Intro": prompt}
    if image:
        prompts["Picture"] = "A picture of {topic}."
    return make_flow(prompts, ["topic"], images=("Picture",) if image else ())


def auth(request: dict) -> str | None:
    headers = {k.lower(): v for k, v in request["headers"].items()}
    return headers.get("authorization")


# -- two endpoints, one evaluation --------------------------------------------------------------


def test_two_endpoints_in_one_evaluate_each_get_their_own_calls_and_key(
    fakes: tuple[FakeOpenAI, FakeOpenAI],
) -> None:
    a, b = fakes
    flow_a = flownb.load_flow(
        text_flow(),
        endpoint=Endpoint("vendor-a", "openai", base_url=a.url, api_key_env="KEY_A"),
        cache=False,
    )
    flow_b = flow_a.with_endpoint(
        Endpoint("vendor-b", "openai", base_url=b.url, api_key_env="KEY_B"), model="model-b"
    )
    data = pd.DataFrame({"topic": [f"t{i}" for i in range(7)]})
    report = flownb.evaluate({"a": flow_a, "b": flow_b}, data, progress=False, log=False)

    assert report.results["error"].isna().all()
    assert len(a.received) == 7 and len(b.received) == 7
    assert {auth(r) for r in a.received} == {f"Bearer {KEY_A}"}
    assert {auth(r) for r in b.received} == {f"Bearer {KEY_B}"}
    assert {r["body"]["model"] for r in b.received} == {"model-b"}
    assert {r["body"]["model"] for r in a.received} != {"model-b"}
    assert flow_a.endpoint is not None and flow_a.endpoint.name == "vendor-a"  # untouched


def test_a_429_storm_on_one_endpoint_does_not_lower_the_others_limit(
    fakes: tuple[FakeOpenAI, FakeOpenAI],
) -> None:
    a, b = fakes
    a.configure(faults={"429": 0.3}, latency=0.005)
    b.configure(latency=0.005)
    flow_a = flownb.load_flow(
        text_flow(), endpoint=Endpoint("a", "openai", base_url=a.url), cache=False, concurrency=4
    )
    flow_b = flownb.load_flow(
        text_flow(), endpoint=Endpoint("b", "openai", base_url=b.url), cache=False, concurrency=4
    )
    data = pd.DataFrame({"topic": [f"t{i}" for i in range(40)]})
    report = flownb.evaluate({"a": flow_a, "b": flow_b}, data, progress=False, log=False)
    assert report.results["error"].isna().all()
    assert a.stats()["faults"]["429"] > 0
    assert b.stats()["faults"]["429"] == 0
    # Each endpoint had its own limit: b's calls were not held to a's.
    assert b.peak_in_flight > 1


def test_cache_key_follows_the_endpoint_never_the_key(
    fakes: tuple[FakeOpenAI, FakeOpenAI], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = fakes
    on_a = flownb.load_flow(text_flow(), endpoint=Endpoint("a", "openai", base_url=a.url))
    on_b = on_a.with_endpoint(Endpoint("b", "openai", base_url=b.url))
    on_a.run(topic="owls")
    on_b.run(topic="owls")  # another host: a miss
    assert len(a.received) == 1 and len(b.received) == 1
    rekeyed = on_a.with_endpoint(
        Endpoint("a", "openai", base_url=a.url, api_key="sk-another-key-123")
    )
    assert rekeyed.run(topic="owls").cached  # another key, same endpoint: the same answer
    assert len(a.received) == 1


# -- keys stay where they belong -----------------------------------------------------------------


def test_a_copy_keeps_the_key_it_was_loaded_with(
    fakes: tuple[FakeOpenAI, FakeOpenAI], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, _ = fakes
    monkeypatch.setenv("OPENAI_BASE_URL", a.url)
    monkeypatch.setenv("OPENAI_API_KEY", KEY_A)
    flow = flownb.load_flow(text_flow(), provider="openai", cache=False)
    monkeypatch.setenv("OPENAI_API_KEY", KEY_B)  # now vendor B's key
    for twin in (copy.deepcopy(flow), pickle.loads(pickle.dumps(flow))):
        twin.run(topic="owls")
    assert [auth(r) for r in a.received] == [f"Bearer {KEY_A}"] * 2
    assert KEY_A not in repr(flow.endpoint) and KEY_A not in repr(flow.config)
    assert KEY_A.encode() not in pickle.dumps(flow)


def test_a_literal_key_never_leaves_its_process(fakes: tuple[FakeOpenAI, FakeOpenAI]) -> None:
    a, _ = fakes
    literal = "sk-literal-abcdef123456"
    flow = flownb.load_flow(text_flow(), base_url=a.url, api_key=literal, cache=False)
    blob = pickle.dumps(flow)
    assert literal.encode() not in blob
    assert "***" in repr(flow.endpoint) and literal not in repr(flow.endpoint)
    pickle.loads(blob).run(topic="here")  # this process: the same key
    assert auth(a.received[-1]) == f"Bearer {literal}"
    # Another process: the key is not there, and the flow says so in one line.
    code = "import pickle, sys\npickle.loads(sys.stdin.buffer.read())"
    proc = subprocess.run(
        [sys.executable, "-c", code], input=blob, capture_output=True, timeout=120
    )
    assert proc.returncode != 0
    last = proc.stderr.decode().strip().splitlines()[-1]
    assert "ConfigError" in last and "api_key_env" in last and literal not in last


def test_a_named_key_that_is_missing_fails_at_load_naming_the_variable(
    fakes: tuple[FakeOpenAI, FakeOpenAI],
) -> None:
    a, _ = fakes
    endpoint = Endpoint("x", "openai", base_url=a.url, api_key_env="NOT_SET_ANYWHERE")
    with pytest.raises(ConfigError, match="NOT_SET_ANYWHERE") as info:
        flownb.load_flow(text_flow(), endpoint=endpoint)
    assert "\n" not in str(info.value)


def test_a_key_from_dotenv(
    fakes: tuple[FakeOpenAI, FakeOpenAI], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, _ = fakes
    monkeypatch.delenv("KEY_A")
    (tmp_path / ".env").write_text(f"KEY_A={KEY_A}\n")
    flow = flownb.load_flow(
        text_flow(), endpoint=Endpoint("a", "openai", base_url=a.url, api_key_env="KEY_A")
    )
    flow.run(topic="owls")
    assert auth(a.received[-1]) == f"Bearer {KEY_A}"


# -- flownb.toml -----------------------------------------------------------------------------------


def test_endpoints_from_flownb_toml_nearest_first(
    fakes: tuple[FakeOpenAI, FakeOpenAI], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = fakes
    home = Path(os.environ["FLOWNB_HOME"])
    home.mkdir(parents=True, exist_ok=True)
    (home / "flownb.toml").write_text(
        f'[endpoints.far]\nprovider = "openai"\nbase_url = "{b.url}"\napi_key_env = "KEY_B"\n'
        f'[endpoints.near]\nprovider = "openai"\nbase_url = "{b.url}"\n'
    )
    (tmp_path / "flownb.toml").write_text(
        f'[endpoints.near]\nprovider = "openai"\nbase_url = "{a.url}"\napi_key_env = "KEY_A"\n'
        'headers = { "X-Team" = "evals" }\nconcurrency = 3\n'
    )
    work = tmp_path / "project" / "sub"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    near = flownb.load_flow(text_flow(), endpoint="near", cache=False)
    assert near.concurrency == 3
    near.run(topic="x")
    assert auth(a.received[-1]) == f"Bearer {KEY_A}"
    assert a.received[-1]["headers"].get("X-Team") == "evals"
    near.with_endpoint("far").run(topic="x")
    assert auth(b.received[-1]) == f"Bearer {KEY_B}"
    with pytest.raises(ConfigError, match=r"no endpoint named 'nowhere'.*far, near"):
        flownb.load_flow(text_flow(), endpoint="nowhere")


def test_flownb_toml_refuses_a_key_and_unknown_fields(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "flownb.toml").write_text('[endpoints.x]\nprovider = "openai"\napi_key = "sk-1"\n')
    with pytest.raises(ConfigError, match="api_key is not allowed in a file"):
        flownb.load_flow(text_flow(), endpoint="x")
    (tmp_path / "flownb.toml").write_text('[endpoints.x]\nprovider = "openai"\nbase = "u"\n')
    with pytest.raises(ConfigError, match="unknown field base"):
        flownb.load_flow(text_flow(), endpoint="x")


def test_images_false_refuses_image_nodes_at_load(fakes: tuple[FakeOpenAI, FakeOpenAI]) -> None:
    a, _ = fakes
    local = Endpoint("ollama", "openai", base_url=a.url, images=False)
    with pytest.raises(ConfigError, match=r"'ollama' has no images.*'Picture'"):
        flownb.load_flow(text_flow(image=True), endpoint=local)
    flownb.load_flow(text_flow(), endpoint=local)  # text only: fine
    assert a.received == []


# -- Azure OpenAI ------------------------------------------------------------------------------


@pytest.mark.parametrize("transport", ["aiohttp", "sdk"])
def test_azure_path_query_and_api_key_header(
    fakes: tuple[FakeOpenAI, FakeOpenAI], transport: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, _ = fakes
    monkeypatch.setenv("FLOWNB_OPENAI_TRANSPORT", transport)
    azure = Endpoint(
        "azure-eu",
        "azure",
        base_url=a.origin,
        api_key_env="KEY_A",
        api_version="2024-10-21",
        deployments={"gpt-4o-mini": "mini-eu", "dall-e-3": "draw-eu"},
    )
    flow = flownb.load_flow(text_flow(image=True), endpoint=azure, cache=False)
    flow = flow.with_model("gpt-4o-mini").with_model(image="dall-e-3")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = flow.run(topic="owls")
    assert result["Intro"] == "echo: About owls."
    by_path = {r["path"]: r for r in a.received}
    assert set(by_path) == {
        "/openai/deployments/mini-eu/chat/completions",
        "/openai/deployments/draw-eu/images/generations",
    }
    for request in a.received:
        headers = {k.lower(): v for k, v in request["headers"].items()}
        assert request["query"] == {"api-version": "2024-10-21"}
        assert headers["api-key"] == KEY_A
        assert "authorization" not in headers


def test_azure_without_a_key_needs_azure_identity(
    fakes: tuple[FakeOpenAI, FakeOpenAI], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, _ = fakes
    monkeypatch.setitem(sys.modules, "azure.identity", None)  # as if the extra were missing
    with pytest.raises(ConfigError, match=r"flownb\[azure\]") as info:
        flownb.load_flow(text_flow(), endpoint=Endpoint("az", "azure", base_url=a.origin))
    assert "AZURE_OPENAI_API_KEY" in str(info.value)


def test_azure_from_the_environment(
    fakes: tuple[FakeOpenAI, FakeOpenAI], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, _ = fakes
    monkeypatch.setenv("AZURE_OPENAI_ENDPOINT", a.origin + "/openai")
    monkeypatch.setenv("AZURE_OPENAI_API_KEY", KEY_B)
    monkeypatch.setenv("OPENAI_API_VERSION", "2025-01-01-preview")
    flownb.load_flow(text_flow(), provider="azure", cache=False).run(topic="x")
    request = a.received[-1]
    assert request["path"] == "/openai/deployments/gpt-4o-mini/chat/completions"
    assert request["query"] == {"api-version": "2025-01-01-preview"}
    assert {k.lower(): v for k, v in request["headers"].items()}["api-key"] == KEY_B


# -- model parameters and usage ------------------------------------------------------------------


def test_max_completion_tokens_is_sent_and_usage_details_reach_the_run_log(
    fakes: tuple[FakeOpenAI, FakeOpenAI],
) -> None:
    a, _ = fakes
    a.configure(
        usage_details={
            "prompt_tokens_details": {"cached_tokens": 3, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 5},
        }
    )
    flow = flownb.load_flow(
        text_flow(), endpoint=Endpoint("a", "openai", base_url=a.url), cache=False
    ).with_params(max_completion_tokens=77)
    flow.run(topic="owls")
    assert a.received[-1]["body"]["max_completion_tokens"] == 77
    assert "max_tokens" not in a.received[-1]["body"]
    log = flownb.runs()
    details = log["usage_details"].iloc[-1]
    assert details["cached_tokens"] == 3 and details["reasoning_tokens"] == 5
    assert details["prompt_audio_tokens"] == 0


def test_image_usage_is_kept(fakes: tuple[FakeOpenAI, FakeOpenAI]) -> None:
    a, _ = fakes
    flow = flownb.load_flow(
        make_flow({"Picture": "A {topic}."}, ["topic"], images=("Picture",)),
        endpoint=Endpoint("a", "openai", base_url=a.url),
        cache=False,
    )
    flow.run(topic="owl")
    details = flownb.runs()["usage_details"].iloc[-1]
    assert details["image_tokens"] == 0 and details["input_tokens"] == 2
    assert flownb.runs()["completion_tokens"].iloc[-1] == 272


def test_a_row_sums_the_usage_of_calls_of_different_shapes(
    fakes: tuple[FakeOpenAI, FakeOpenAI],
) -> None:
    """A text call and an image call report usage under different names: the row of a run
    with both holds, name by name, the sum of what each reports alone."""
    a, _ = fakes
    a.configure(usage_details={"prompt_tokens_details": {"cached_tokens": 3}})
    endpoint = Endpoint("a", "openai", base_url=a.url)
    prompts = {"Text": "About {topic}.", "Picture": "A {topic}."}
    rows = []
    for names in (["Text"], ["Picture"], ["Text", "Picture"]):
        nodes = {name: prompts[name] for name in names}
        flow = flownb.load_flow(
            make_flow(nodes, ["topic"], images=("Picture",)), endpoint=endpoint, cache=False
        )
        flow.run(topic="owl")
        rows.append(flownb.runs().iloc[-1])
    text, picture, both = rows
    for column in ("prompt_tokens", "completion_tokens", "total_tokens"):
        assert both[column] == text[column] + picture[column] > 0
    alone = [text["usage_details"], picture["usage_details"]]
    names = {*alone[0], *alone[1]}
    assert "cached_tokens" in names and "image_tokens" in names
    assert both["usage_details"] == {n: sum(d.get(n, 0) for d in alone) for n in names}


# -- system messages and models ------------------------------------------------------------------


def test_system_message_is_sent_cached_apart_and_previewed(
    fakes: tuple[FakeOpenAI, FakeOpenAI],
) -> None:
    a, _ = fakes
    plain = flownb.load_flow(text_flow(), endpoint=Endpoint("a", "openai", base_url=a.url))
    terse = plain.with_system("Answer in five words.")
    plain.run(topic="owls")
    terse.run(topic="owls")  # another system message: another call
    assert len(a.received) == 2
    assert a.received[0]["body"]["messages"] == [{"role": "user", "content": "About owls."}]
    assert a.received[1]["body"]["messages"] == [
        {"role": "system", "content": "Answer in five words."},
        {"role": "user", "content": "About owls."},
    ]
    assert terse.run(topic="owls").cached
    preview = terse.preview({"topic": "bats"})
    assert preview.calls["system"].tolist() == ["Answer in five words."]
    assert "(system: Answer in five words.)" in str(preview)
    per_node = plain.with_system({"Intro": "Be kind."})
    assert per_node.plan.steps[0].system == "Be kind."
    assert plain.plan.steps[0].system is None  # untouched
    with pytest.raises(ConfigError, match="no generation node 'Nope'"):
        plain.with_system({"Nope": "x"})


def test_with_model_per_kind_and_per_node() -> None:
    flow = flownb.load_flow(text_flow(image=True))

    def models(f: flownb.LocalFlow) -> dict[str, str | None]:
        return {s.name: s.params.get("model") for s in f.plan.steps}

    before = models(flow)
    text = flow.with_model("m-text")
    assert models(text) == {"Intro": "m-text", "Picture": before["Picture"]}
    both = text.with_model(image="m-image")
    assert models(both) == {"Intro": "m-text", "Picture": "m-image"}
    one = flow.with_model({"Picture": "m-x"})
    assert models(one) == {"Intro": before["Intro"], "Picture": "m-x"}
    assert models(flow) == before  # untouched
    with pytest.raises(ConfigError, match="needs a model"):
        flow.with_model()


# -- the command line and the magics ---------------------------------------------------------------


def cli(*args: str, cwd: Path) -> CliResult:
    return run_cli(*args, cwd=cwd)


def endpoints_toml(a: FakeOpenAI, b: FakeOpenAI) -> str:
    return (
        f'[endpoints.alpha]\nprovider = "openai"\nbase_url = "{a.url}"\napi_key_env = "KEY_A"\n'
        f'[endpoints.beta]\nprovider = "azure"\nbase_url = "{b.origin}"\napi_key_env = "KEY_B"\n'
        'api_version = "2024-10-21"\ndeployments = { "small" = "small-dep" }\n'
    )


def test_cli_run_and_eval_take_endpoints_by_name(
    fakes: tuple[FakeOpenAI, FakeOpenAI], tmp_path: Path
) -> None:
    import json

    a, b = fakes
    (tmp_path / "flownb.toml").write_text(endpoints_toml(a, b))
    (tmp_path / "flow.json").write_text(json.dumps(text_flow()))
    ran = cli("run", "flow.json", "--endpoint", "alpha", "--var", "topic=owls", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert "echo: About owls." in ran.stdout
    assert [auth(r) for r in a.received] == [f"Bearer {KEY_A}"]

    (tmp_path / "rows.csv").write_text("topic\nowls\nbees\n")
    (tmp_path / "eval.toml").write_text(
        '[[scorers]]\ntype = "contains"\noutput = "Intro"\ntext = { col = "topic" }\n'
        '[variants.azure-small]\nendpoint = "beta"\nmodel = "small"\nsystem = "Be brief."\n'
    )
    args = ["flow.json", "--data", "rows.csv", "--scorers", "eval.toml", "--no-progress"]
    done = cli("eval", *args, "--endpoint", "alpha", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "azure-small" in done.stdout
    # The first variant's rows on alpha: "owls" is in the cache since the run above.
    assert [r["body"]["messages"][-1]["content"] for r in a.received[1:]] == ["About bees."]
    assert [r["path"] for r in b.received] == ["/openai/deployments/small-dep/chat/completions"] * 2
    assert {r["body"]["messages"][0]["content"] for r in b.received} == {"Be brief."}
    bad = cli("run", "flow.json", "--endpoint", "gamma", "--var", "topic=x", cwd=tmp_path)
    assert bad.returncode != 0 and "no endpoint named 'gamma'" in bad.stderr


def test_flow_magic_takes_an_endpoint(fakes: tuple[FakeOpenAI, FakeOpenAI], tmp_path: Path) -> None:
    import json

    from IPython.core.interactiveshell import InteractiveShell
    from IPython.testing.globalipapp import start_ipython

    a, b = fakes
    (tmp_path / "flownb.toml").write_text(endpoints_toml(a, b))
    (tmp_path / "flow.json").write_text(json.dumps(text_flow()))
    start_ipython()
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "flownb")
    try:
        result = ip.run_line_magic("flow", "run flow.json topic=owls --endpoint alpha")
    finally:
        # The shell is the process's one instance: a later test's load_ext would find the
        # extension already loaded, with this test's magics still registered.
        ip.run_line_magic("unload_ext", "flownb")
    assert result["Intro"] == "echo: About owls."
    assert [auth(r) for r in a.received] == [f"Bearer {KEY_A}"]
    assert b.received == []


def test_serve_config_takes_an_endpoint(
    fakes: tuple[FakeOpenAI, FakeOpenAI], tmp_path: Path
) -> None:
    from flownb.server.app import ServerConfig

    a, b = fakes
    (tmp_path / "flownb.toml").write_text(endpoints_toml(a, b))
    (tmp_path / "flows").mkdir()
    config = ServerConfig(tmp_path / "flows", endpoint="beta")
    assert config.provider.name == "azure"
    assert "127.0.0.1" in config.provider.banner()


def test_the_report_says_what_each_variant_ran_on(fakes: tuple[FakeOpenAI, FakeOpenAI]) -> None:
    a, _ = fakes
    base = flownb.load_flow(text_flow(), endpoint=Endpoint("vendor-a", "openai", base_url=a.url))
    variants = {"plain": base, "brief": base.with_system("Be brief.").with_model("m-small")}
    data = pd.DataFrame({"topic": ["owls"]})
    report = flownb.evaluate(variants, data, progress=False, log=False)
    setup = report.summary[["endpoint", "model", "system"]]
    assert setup.loc["brief"].tolist() == ["vendor-a", "m-small", "Be brief."]
    assert pd.isna(setup.loc["plain", "system"])
    assert "<td>Be brief.</td>" in report._repr_html_()


def test_pickled_flows_that_differ_only_in_their_key_stay_apart(
    fakes: tuple[FakeOpenAI, FakeOpenAI],
) -> None:
    a, _ = fakes
    first = flownb.load_flow(text_flow(), base_url=a.url, api_key="sk-first-key-1", cache=False)
    second = flownb.load_flow(text_flow(), base_url=a.url, api_key="sk-second-key-2", cache=False)
    pickle.loads(pickle.dumps(first)).run(topic="x")
    pickle.loads(pickle.dumps(second)).run(topic="x")
    assert [auth(r) for r in a.received] == ["Bearer sk-first-key-1", "Bearer sk-second-key-2"]


def test_surfaces_that_run_no_flow_here_do_not_look_the_endpoint_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # FLOWNB_ENDPOINT names no endpoint of any flownb.toml: a flow cannot load, but reading the
    # run log, the evaluations and the batches of FLOWNB_HOME never needed an endpoint.
    monkeypatch.setenv("FLOWNB_ENDPOINT", "nowhere")
    with pytest.raises(ConfigError, match="nowhere"):
        flownb.load_flow(text_flow())
    assert flownb.runs().empty
    assert flownb.reports().empty
    client = flownb.Client("http://127.0.0.1:9", "sk-service-key-0123")
    assert client.base_url == "http://127.0.0.1:9"


def test_the_service_key_stays_out_of_a_flow_sent_to_workers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    service_key = "fnb-service-key-0123456789"
    monkeypatch.setenv("FLOWNB_API_KEY", service_key)
    flow = flownb.load_flow(text_flow(), cache=False)
    assert flow.config.service_key == service_key
    assert service_key not in repr(flow.config)
    assert service_key.encode() not in pickle.dumps(flow)
    assert flow.to_spec().config.service_key is None
