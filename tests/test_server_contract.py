# ruff: noqa: F811  (the spans fixture imported from test_tracing is a parameter here)
"""The contract over real HTTP: a uvicorn server on 127.0.0.1 serving a folder of flows with the
offline provider, spoken to with ``requests`` exactly as any client would."""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import requests
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.conftest import FLOWS, make_flow, write_flow
from tests.serving import Running, post_run, run_server
from tests.test_tracing import spans  # noqa: F401 (a fixture)

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    root = tmp_path_factory.mktemp("contract")
    flows = root / "flows"
    flows.mkdir()
    shutil.copy(FLOWS / "blog-intro.json", flows / "blog-intro.json")
    write_flow(flows / "echo.json", make_flow({"say": "A={a} B={b}"}, ["a", "b"]))
    write_flow(
        flows / "shapes.json",
        make_flow(
            {"first": "1:{x}", "second": "2:{x}"},
            ["x"],
            outputs={"both": ["first", "second"], "nothing": [], "raw": ["x"]},
        ),
    )
    with run_server(flows, root / "home") as running:
        yield running


def _get(server: Running, flow_id: str, **kw: object) -> requests.Response:
    headers = {"x-api-key": server.key}
    return requests.get(
        f"{server.url}/api/flows/getFlowInfo/{flow_id}", headers=headers, timeout=10, **kw
    )  # type: ignore[arg-type]


def test_describe_lists_variables_then_outputs_in_node_order(server: Running) -> None:
    resp = _get(server, "blog-intro")
    assert resp.status_code == 200
    assert resp.headers["content-type"] == "application/json"
    assert resp.json() == [
        {"name": "topic", "type": "variable"},
        {"name": "tone", "type": "variable"},
        {"name": "intro", "type": "output"},
        {"name": "header_image", "type": "output"},
    ]
    # Beyond the contract, in headers only: the batch limit and which outputs are images.
    assert resp.headers["x-flownb-max-batch"] == "1000"
    assert resp.headers["x-flownb-image-outputs"] == "1"


def test_run_with_an_object_returns_one_item_per_output(server: Running) -> None:
    resp = post_run(server, "echo", {"a": "owls", "b": "dry"})
    assert resp.status_code == 200
    assert resp.json() == [{"name": "say", "output": "A=owls B=dry", "type": "output"}]


def test_run_with_an_array_returns_an_array_of_arrays_in_order(server: Running) -> None:
    batch = [{"a": f"a{i}", "b": f"b{i}"} for i in range(50)]
    resp = post_run(server, "echo", batch)
    assert resp.status_code == 200
    body = resp.json()
    assert body == [
        [{"name": "say", "output": f"A=a{i} B=b{i}", "type": "output"}] for i in range(50)
    ]


def test_empty_batch_returns_an_empty_array(server: Running) -> None:
    resp = post_run(server, "echo", [])
    assert resp.status_code == 200
    assert resp.json() == []


def test_substitution_is_single_pass_and_literal(server: Running) -> None:
    tricky = {"a": "{b} \\1 $& {", "b": "ünï 🚀 {a}"}
    resp = post_run(server, "echo", tricky)
    assert resp.json()[0]["output"] == "A={b} \\1 $& { B=ünï 🚀 {a}"


def test_outputs_join_several_sources_and_empty_ones(server: Running) -> None:
    resp = post_run(server, "shapes", {"x": "v"})
    assert resp.json() == [
        {"name": "both", "output": "1:v\n\n2:v", "type": "output"},
        {"name": "nothing", "output": "", "type": "output"},
        {"name": "raw", "output": "v", "type": "output"},
    ]


def test_images_are_absolute_urls_served_without_a_key(server: Running) -> None:
    resp = post_run(server, "blog-intro", {"topic": "owls", "tone": "dry"})
    items = {i["name"]: i["output"] for i in resp.json()}
    assert items["intro"] == "Write a dry two-sentence intro for a blog post about owls."
    url = items["header_image"]
    assert url.startswith(f"{server.url}/media/") and url.endswith(".png")
    image = requests.get(url, timeout=10)  # no x-api-key
    assert image.status_code == 200
    assert image.headers["content-type"] == "image/png"
    assert image.content.startswith(b"\x89PNG\r\n\x1a\n")
    # The same prompt draws the same image: same URL.
    again = post_run(server, "blog-intro", {"topic": "owls", "tone": "dry"}).json()
    assert again[1]["output"] == url


def test_image_urls_use_the_address_the_connection_reached_not_the_host_header(
    server: Running,
) -> None:
    port = server.url.rsplit(":", 1)[1]
    resp = requests.post(
        f"http://localhost:{port}/api/flows/run/blog-intro",
        json={"variables": {"topic": "moths", "tone": "dry"}},
        headers={"x-api-key": server.key},
        timeout=30,
    )
    # The server listens on 127.0.0.1: that is what "localhost" reached (the Host header is
    # the caller's to write, so it never decides a URL; --public-url does, behind a proxy).
    assert resp.json()[1]["output"].startswith(f"http://127.0.0.1:{port}/media/")


def test_media_names_outside_the_pattern_are_404(server: Running) -> None:
    for name in ["..%2Fkeys.json", "keys.json", "x" * 40 + ".png", "%00.png"]:
        resp = requests.get(f"{server.url}/media/{name}", timeout=10)
        assert resp.status_code == 404, name
        assert resp.json()["code"] == "not_found"


def test_every_response_carries_a_request_id(server: Running) -> None:
    seen = set()
    for resp in [
        _get(server, "echo"),
        post_run(server, "echo", {"a": "1", "b": "2"}),
        post_run(server, "echo", {"a": "1"}),
        _get(server, "missing"),
        requests.get(f"{server.url}/healthz", timeout=10),
    ]:
        rid = resp.headers["x-request-id"]
        assert rid and rid not in seen
        seen.add(rid)
        if resp.status_code >= 400:
            assert resp.json()["request_id"] == rid


def test_health_docs_and_openapi(server: Running) -> None:
    assert requests.get(f"{server.url}/healthz", timeout=10).json() == {
        "status": "ok",
        "provider": "offline",
    }
    docs = requests.get(f"{server.url}/docs", timeout=10)
    assert docs.status_code == 200 and "swagger" in docs.text.lower()
    spec = requests.get(f"{server.url}/openapi.json", timeout=10).json()
    run = spec["paths"]["/api/flows/run/{flow_id}"]["post"]
    assert set(run["responses"]) == {
        "200", "400", "401", "402", "404", "406", "408", "413", "415", "422", "429", "431",
        "500", "502", "503", "504",
    }  # fmt: skip
    info = spec["paths"]["/api/flows/getFlowInfo/{flow_id}"]["get"]
    assert set(info["responses"]) == {"200", "401", "404", "431", "500", "503"}
    assert spec["components"]["securitySchemes"]["ApiKeyAuth"] == {
        "type": "apiKey",
        "in": "header",
        "name": "x-api-key",
    }
    assert run["security"] == [{"ApiKeyAuth": []}]
    assert "variables" in run["requestBody"]["content"]["application/json"]["schema"]["required"]


def test_flow_files_are_picked_up_changed_and_dropped_without_restart(server: Running) -> None:
    flows = server.config.store.directory
    path = flows / "late.json"
    assert _get(server, "late").status_code == 404
    write_flow(path, make_flow({"out": "v1 {p}"}, ["p"]))
    assert [i["name"] for i in _get(server, "late").json()] == ["p", "out"]
    assert post_run(server, "late", {"p": "x"}).json()[0]["output"] == "v1 x"

    # An edit (same size even) is seen: the file's modification time changed. The server looks
    # at a loaded flow's file about once a second; the deadlines only stop one that never does.
    time.sleep(0.01)
    write_flow(path, make_flow({"out": "v2 {q}"}, ["q"]))
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    _wait_for(lambda: [i["name"] for i in _get(server, "late").json()] == ["q", "out"])
    assert post_run(server, "late", {"q": "y"}).json()[0]["output"] == "v2 y"

    path.unlink()
    _wait_for(lambda: _get(server, "late").status_code == 404)
    assert _get(server, "late").json()["code"] == "flow_not_found"


def _wait_for(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, "the server never saw the change"
        time.sleep(0.05)


def test_a_broken_flow_file_names_its_id_and_logs_the_problem(
    server: Running, caplog: pytest.LogCaptureFixture
) -> None:
    flows = server.config.store.directory
    bad = make_flow({"out": "x"}, [])
    bad["edges"].append(
        {"id": "e-bad", "source": "nowhere", "target": "out-out", "sourceHandle": "output",
         "targetHandle": "input"}
    )  # fmt: skip
    write_flow(flows / "broken.json", bad)
    (flows / "notjson.json").write_text("{nope", encoding="utf-8")
    try:
        resp = _get(server, "broken")
        assert resp.status_code == 500
        body = resp.json()
        assert body["code"] == "internal_error"
        assert body["message"] == "flow 'broken' cannot be loaded; see the server log"
        assert "nowhere" not in resp.text and str(flows) not in resp.text  # nothing from the file
        assert any("nowhere" in r.getMessage() for r in caplog.records)  # the log has it
        resp = post_run(server, "notjson", {})
        assert resp.status_code == 500 and "see the server log" in resp.json()["message"]
        assert any("not JSON" in r.getMessage() for r in caplog.records)
    finally:
        (flows / "broken.json").unlink()
        (flows / "notjson.json").unlink()


def test_unicode_names_round_trip(server: Running) -> None:
    flows = server.config.store.directory
    write_flow(flows / "uni.json", make_flow({"résumé ✓": "{c++ (lang)}!"}, ["c++ (lang)"]))
    try:
        info = _get(server, "uni").json()
        assert info == [
            {"name": "c++ (lang)", "type": "variable"},
            {"name": "résumé ✓", "type": "output"},
        ]
        out = post_run(server, "uni", {"c++ (lang)": "ok"}).json()
        assert out == [{"name": "résumé ✓", "output": "ok!", "type": "output"}]
    finally:
        (flows / "uni.json").unlink()


def test_large_offline_batch_runs_whole(server: Running) -> None:
    batch = [{"a": str(i), "b": "x" * 50} for i in range(1000)]
    resp = post_run(server, "echo", batch)
    assert resp.status_code == 200
    body = resp.json()
    assert len(body) == 1000 and body[999][0]["output"] == "A=999 B=" + "x" * 50


def test_request_json_content_type_is_required(server: Running) -> None:
    # curl -d sends application/x-www-form-urlencoded: the answer says which header to add.
    resp = requests.post(
        f"{server.url}/api/flows/run/echo",
        data=json.dumps({"variables": {"a": "1", "b": "2"}}),
        headers={"x-api-key": server.key, "Content-Type": "application/x-www-form-urlencoded"},
        timeout=10,
    )
    assert resp.status_code == 415
    assert "Content-Type: application/json" in resp.json()["message"]


def test_keys_file_holds_no_key(server: Running) -> None:
    text = Path(server.config.keys.path).read_text()
    assert server.key not in text
    assert server.key[12:] not in text


def test_the_flow_list_names_each_flow_behind_the_key(tmp_path: Path) -> None:
    import flownb

    flows = tmp_path / "flows"
    flows.mkdir()
    shutil.copy(FLOWS / "blog-intro.json", flows / "blog-intro.json")
    named = make_flow({"say": "A={a}"}, ["a"])
    named["name"] = "Echo flow"  # an export that carries its name
    write_flow(flows / "echo.json", named)
    (flows / "broken.json").write_text("{nope", encoding="utf-8")  # left out, logged
    (flows / "not an id.json").write_text("{}", encoding="utf-8")  # not a flow id: never served
    with run_server(flows, tmp_path / "home") as server:
        url = f"{server.url}/api/flows"
        resp = requests.get(url, headers={"x-api-key": server.key}, timeout=10)
        assert resp.status_code == 200
        assert resp.headers["content-type"] == "application/json"
        expected = [
            {
                "id": "blog-intro",
                "name": "blog-intro",
                "variables": ["topic", "tone"],
                "outputs": ["intro", "header_image"],
            },
            {"id": "echo", "name": "Echo flow", "variables": ["a"], "outputs": ["say"]},
        ]
        assert resp.json() == expected
        # The same key check as every flow route.
        missing = requests.get(url, timeout=10)
        assert missing.status_code == 401 and missing.json()["code"] == "missing_api_key"
        wrong = requests.get(url, headers={"x-api-key": "fnb_wrong"}, timeout=10)
        assert wrong.status_code == 401 and wrong.json()["code"] == "invalid_api_key"
        # The client lists the same; a wrong key is its AuthError.
        with flownb.Client(server.url, server.key) as client:
            assert client.flows() == expected
        with flownb.Client(server.url, "fnb_wrong") as client, pytest.raises(flownb.AuthError):
            client.flows()
        # A flow dropped in is listed at once.
        write_flow(flows / "late.json", make_flow({"out": "{p}"}, ["p"]))
        ids = [f["id"] for f in requests.get(url, headers={"x-api-key": server.key}).json()]
        assert ids == ["blog-intro", "echo", "late"]
        documented = requests.get(f"{server.url}/openapi.json", timeout=10).json()
        route = documented["paths"]["/api/flows"]["get"]
        assert route["security"] == [{"ApiKeyAuth": []}]
        assert {"200", "401"} <= set(route["responses"])


def test_a_tracer_provider_configured_before_the_app_still_gets_its_request_spans(
    tmp_path: Path, flownb_env: Path, spans: InMemorySpanExporter
) -> None:
    # The server decides once, as its app is made, whether FastAPI's own request telemetry is
    # on (asking the providers on every request cost each request an environment lookup):
    # configured before, the operator's spans must keep coming.
    flows = tmp_path / "flows"
    flows.mkdir()
    write_flow(flows / "echo.json", make_flow({"say": "A={a} B={b}"}, ["a", "b"]))
    with run_server(flows, flownb_env) as server:
        assert post_run(server, "echo", {"a": "1", "b": "2"}).status_code == 200
    served = [s for s in spans.get_finished_spans() if s.kind.name == "SERVER"]
    assert served and "/api/flows/run/{flow_id}" in served[0].name


def test_serve_freezes_its_heap_once_started_and_a_plain_app_does_not(tmp_path: Path) -> None:
    # flownb serve leaves what it imported at start out of Python's full collections (each took
    # tens of milliseconds: a stalled request) and collects its young objects less often; an
    # app embedded elsewhere leaves the heap and the collector's thresholds alone.
    import gc

    from starlette.testclient import TestClient

    from flownb.server import ServerConfig, create_app
    from flownb.server.app import YOUNG_GENERATION

    flows = tmp_path / "flows"
    flows.mkdir()
    gc.unfreeze()
    thresholds = gc.get_threshold()
    assert thresholds[0] != YOUNG_GENERATION
    try:
        config = ServerConfig(flows, home=tmp_path / "home")
        with TestClient(create_app(config)) as client:
            assert client.get("/healthz").status_code == 200
            assert gc.get_freeze_count() == 0
            assert gc.get_threshold() == thresholds
        with TestClient(create_app(config, freeze_heap=True)) as client:
            assert client.get("/healthz").status_code == 200
            assert gc.get_freeze_count() > 0
            assert gc.get_threshold() == (YOUNG_GENERATION, *thresholds[1:])
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)
