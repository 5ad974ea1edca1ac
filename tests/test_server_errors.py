"""Every row of the error table (DESIGN.md section 4) over real HTTP, with the one error shape.

Provider failures come from a scripted provider plugged into the provider seam (it stands in for a
model service the way the offline provider does), so 502/504/429 and partial batches are real
server answers, not mocks.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from flownb.server import KeyStore
from tests.conftest import make_flow, write_flow
from tests.serving import (
    InlineScriptedProvider,
    Running,
    ScriptedProvider,
    run_server,
    sample_flows,
)

pytestmark = pytest.mark.timeout(60)


def _flows(root: Path) -> Path:
    flows = sample_flows(root)
    # Reachable only by path traversal from the flows folder: must never be served.
    write_flow(root / "secret.json", make_flow({"s": "secret"}, []))
    return flows


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    root = tmp_path_factory.mktemp("errors")
    with run_server(_flows(root), root / "home", max_batch=5, max_body_bytes=2000) as running:
        yield running


@pytest.fixture(scope="module")
def scripted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    root = tmp_path_factory.mktemp("scripted")
    provider = InlineScriptedProvider()
    with run_server(_flows(root), root / "home", provider=provider) as running:
        yield running


def _post(server: Running, flow_id: str, body: Any = None, *, raw: bytes | None = None,
          headers: dict[str, str] | None = None) -> requests.Response:  # fmt: skip
    hdrs = {"x-api-key": server.key, "Content-Type": "application/json"}
    hdrs.update(headers or {})
    data = raw if raw is not None else requests.models.complexjson.dumps(body).encode()
    return requests.post(
        f"{server.url}/api/flows/run/{flow_id}", data=data, headers=hdrs, timeout=30
    )


def _error(resp: requests.Response, status: int, code: str) -> dict[str, Any]:
    """Check the one error shape and return the body."""
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"] == "application/json"
    body = resp.json()
    assert body["code"] == code, body
    assert isinstance(body["message"], str) and body["message"]
    assert body["request_id"] == resp.headers["x-request-id"]
    assert isinstance(body["errors"], list) and body["errors"]
    for e in body["errors"]:
        assert set(e) <= {"index", "variable", "code", "message"}
        assert e["code"] and e["message"]
    assert "Traceback" not in resp.text
    return body


# -- 401 --------------------------------------------------------------------------------------


def test_missing_key(server: Running) -> None:
    resp = requests.get(f"{server.url}/api/flows/getFlowInfo/echo", timeout=10)
    assert "x-api-key" in _error(resp, 401, "missing_api_key")["message"]
    resp = _post(server, "echo", {"variables": {}}, headers={"x-api-key": ""})
    _error(resp, 401, "missing_api_key")


def test_invalid_key_and_other_schemes_are_refused(server: Running) -> None:
    resp = _post(
        server, "echo", {"variables": {"a": "1", "b": "2"}}, headers={"x-api-key": "fnb_nope"}
    )
    body = _error(resp, 401, "invalid_api_key")
    assert "fnb_nope" not in resp.text and body["message"] == "invalid API key"
    # The key only counts in x-api-key: not as a bearer token, not in the query string.
    for kw in (
        {"headers": {"Authorization": f"Bearer {server.key}"}},
        {"params": {"x-api-key": server.key, "api_key": server.key}},
    ):
        resp = requests.get(f"{server.url}/api/flows/getFlowInfo/echo", timeout=10, **kw)  # type: ignore[arg-type]
        _error(resp, 401, "missing_api_key")
        assert server.key not in resp.text


def test_auth_comes_before_the_flow_lookup(server: Running) -> None:
    resp = requests.get(f"{server.url}/api/flows/getFlowInfo/no-such-flow", timeout=10)
    _error(resp, 401, "missing_api_key")


def test_a_key_created_is_accepted_at_once_and_a_revoked_one_refused_soon(
    server: Running,
) -> None:
    store = KeyStore(server.config.home)  # another process's view of the key file
    key = store.create("short-lived")
    url = f"{server.url}/api/flows/getFlowInfo/echo"
    assert requests.get(url, headers={"x-api-key": key}, timeout=10).status_code == 200
    store.revoke("short-lived")
    # The server looks at the key file about once a second; the deadline only stops a server
    # that never sees the change.
    deadline = time.monotonic() + 30
    resp = requests.get(url, headers={"x-api-key": key}, timeout=10)
    while resp.status_code == 200 and time.monotonic() < deadline:
        time.sleep(0.05)
        resp = requests.get(url, headers={"x-api-key": key}, timeout=10)
    assert "revoked" in _error(resp, 401, "invalid_api_key")["message"]


def test_without_any_key_the_server_says_how_to_create_one(tmp_path: Path) -> None:
    with run_server(_flows(tmp_path), tmp_path / "home", create_key=False) as server:
        resp = requests.get(f"{server.url}/api/flows/getFlowInfo/echo", timeout=10)
        assert "flownb keys create --name" in _error(resp, 401, "missing_api_key")["message"]
        resp = _post(server, "echo", {"variables": {}}, headers={"x-api-key": "guess"})
        assert "flownb keys create --name" in _error(resp, 401, "invalid_api_key")["message"]


def test_corrupt_key_file_is_a_500_that_names_no_path(tmp_path: Path) -> None:
    with run_server(_flows(tmp_path), tmp_path / "home") as server:
        (tmp_path / "home" / "keys.json").write_text("{corrupt", encoding="utf-8")
        resp = requests.get(
            f"{server.url}/api/flows/getFlowInfo/echo",
            headers={"x-api-key": server.key},
            timeout=10,
        )
        body = _error(resp, 500, "internal_error")
        assert "key file" in body["message"] and str(tmp_path) not in resp.text


# -- 404 --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "flow_id",
    [
        "no-such-flow",
        "..%2Fsecret",
        "../secret",
        "%2e%2e%2fsecret",
        "..%5Csecret",
        "echo%00",
        "echo.json",
        "a" * 5000,
        "a" * 129,
        "échо",
        "echo%20",
        "sub/echo",
        "",
    ],
)
def test_unknown_and_bad_flow_ids_are_404(server: Running, flow_id: str) -> None:
    for method in ("GET", "POST"):
        route = "getFlowInfo" if method == "GET" else "run"
        url = f"{server.url}/api/flows/{route}/{flow_id}"
        # Send the path as written: no client-side normalisation of "..".
        req = requests.Request(
            method, url, headers={"x-api-key": server.key}, json={"variables": {}}
        )
        prepared = req.prepare()
        prepared.url = url
        resp = requests.Session().send(prepared, timeout=10)
        _error(resp, 404, "flow_not_found")
        assert "secret" not in resp.text.replace(flow_id, "") or "secret" in flow_id
        assert len(resp.text) < 1000  # a 5,000-character id is not echoed back


def test_a_key_pasted_as_flow_id_is_not_echoed_or_logged(
    server: Running, caplog: pytest.LogCaptureFixture
) -> None:
    from flownb.server.logs import RedactQuery

    key = server.key
    resp = requests.get(
        f"{server.url}/api/flows/getFlowInfo/{key}", headers={"x-api-key": key}, timeout=10
    )
    _error(resp, 404, "flow_not_found")
    assert key not in resp.text and "x-api-key header" in resp.json()["message"]
    # The access log line uvicorn would write for that request.
    record = logging.LogRecord(
        "uvicorn.access", logging.INFO, __file__, 0, '%s - "%s %s HTTP/%s" %d',
        ("127.0.0.1:1", "GET", f"/api/flows/getFlowInfo/{key}?k={key}", "1.1", 404), None,
    )  # fmt: skip
    RedactQuery().filter(record)
    line = record.getMessage()
    assert key not in line and "/api/flows/getFlowInfo/fnb_[redacted]?[redacted]" in line


# -- 400 / 422 / 413 -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [b"nope", b'{"variables": {"a": "1"', b"", b"   ", b"\xff\xfe\x00garbage",
     b'{"variables": NaN}', b"[" * 1500, b"[" * 1100 + b"]" * 800],
    ids=["word", "truncated", "empty", "blank", "binary", "nan", "deep-open", "deep"],
)  # fmt: skip
def test_body_that_is_not_json_is_400(server: Running, raw: bytes) -> None:
    _error(_post(server, "echo", raw=raw), 400, "invalid_json")


@pytest.mark.parametrize(
    "body",
    [[], "variables", 1, None, {}, {"variables": "x"}, {"variables": 1}, {"variables": None},
     {"variables": {"a": "1", "b": "2"}, "extra": 1}],
)  # fmt: skip
def test_json_of_the_wrong_shape_is_422_invalid_request(server: Running, body: Any) -> None:
    _error(_post(server, "echo", body), 422, "invalid_request")


def test_non_object_batch_elements_are_listed_with_their_index(server: Running) -> None:
    body = _error(
        _post(server, "echo", {"variables": [{"a": "1", "b": "2"}, 3, "x"]}), 422, "invalid_request"
    )
    assert [(e["index"], e["code"]) for e in body["errors"]] == [
        (1, "invalid_request"),
        (2, "invalid_request"),
    ]


def test_variable_problems_each_have_their_code(server: Running) -> None:
    missing = _error(_post(server, "echo", {"variables": {"a": "1"}}), 422, "missing_variable")
    assert missing["errors"] == [
        {"code": "missing_variable", "variable": "b", "message": missing["errors"][0]["message"]}
    ]
    unknown = _error(
        _post(server, "echo", {"variables": {"a": "1", "b": "2", "c": "3"}}),
        422,
        "unknown_variable",
    )
    assert unknown["errors"][0]["variable"] == "c"
    typed = _error(
        _post(server, "echo", {"variables": {"a": 1, "b": None}}), 422, "invalid_variable_type"
    )
    assert {e["variable"] for e in typed["errors"]} == {"a", "b"}


def test_every_problem_of_a_batch_is_listed_with_index_and_variable(server: Running) -> None:
    batch = [{"a": "ok", "b": "ok"}, {"a": "1"}, {"a": 2, "b": "2", "zz": "3"}]
    body = _error(_post(server, "echo", {"variables": batch}), 422, "invalid_request")
    got = sorted((e["index"], e["variable"], e["code"]) for e in body["errors"])
    assert got == [
        (1, "b", "missing_variable"),
        (2, "a", "invalid_variable_type"),
        (2, "zz", "unknown_variable"),
    ]


def test_a_batch_is_validated_whole_before_anything_runs(scripted: Running) -> None:
    provider = scripted.config.provider
    assert isinstance(provider, ScriptedProvider)
    batch = [{"a": "validated-first", "b": "x"}, {"a": "y"}]
    _error(_post(scripted, "echo", {"variables": batch}), 422, "missing_variable")
    assert not any("validated-first" in p for p in provider.calls)


def test_batch_over_the_limit_is_422(server: Running) -> None:
    batch = [{"a": "1", "b": "2"}] * 6
    body = _error(_post(server, "echo", {"variables": batch}), 422, "batch_too_large")
    assert "5" in body["message"]
    assert _post(server, "echo", {"variables": batch[:5]}).status_code == 200


def test_body_over_the_limit_is_413(server: Running) -> None:
    big = {"variables": {"a": "x" * 3000, "b": "y"}}
    _error(_post(server, "echo", big), 413, "payload_too_large")

    # Without a Content-Length (chunked), the limit holds while reading.
    def chunks() -> Iterator[bytes]:
        yield b'{"variables": {"a": "'
        for _ in range(10):
            yield b"x" * 500
        yield b'", "b": "y"}}'

    resp = requests.post(
        f"{server.url}/api/flows/run/echo", data=chunks(),
        headers={"x-api-key": server.key, "Content-Type": "application/json"}, timeout=10,
    )  # fmt: skip
    _error(resp, 413, "payload_too_large")


# -- provider failures and partial batches ----------------------------------------------------


def test_provider_error_is_502(scripted: Running) -> None:
    body = _error(
        _post(scripted, "echo", {"variables": {"a": "FAIL502", "b": ""}}), 502, "provider_error"
    )
    assert body["message"] == "the model refused the request (HTTP 400)"
    assert "results" not in body


def test_provider_timeout_is_504(scripted: Running) -> None:
    _error(
        _post(scripted, "echo", {"variables": {"a": "FAIL504", "b": ""}}), 504, "provider_timeout"
    )


def test_upstream_rate_limit_is_429_with_retry_after(scripted: Running) -> None:
    resp = _post(scripted, "echo", {"variables": {"a": "FAIL429", "b": ""}})
    _error(resp, 429, "upstream_rate_limited")
    assert resp.headers["Retry-After"] == "2"


def test_partly_failed_batch_keeps_the_successful_outputs(scripted: Running) -> None:
    batch = [
        {"a": "fine-0", "b": ""},
        {"a": "FAIL502", "b": "1"},
        {"a": "fine-2", "b": ""},
        {"a": "FAIL502", "b": "3"},
    ]
    body = _error(_post(scripted, "echo", {"variables": batch}), 502, "provider_error")
    assert [(e["index"], e["code"]) for e in body["errors"]] == [
        (1, "provider_error"),
        (3, "provider_error"),
    ]
    assert body["results"] == [
        [{"name": "say", "output": "A=fine-0 B=", "type": "output"}],
        None,
        [{"name": "say", "output": "A=fine-2 B=", "type": "output"}],
        None,
    ]


def test_internal_errors_are_500_without_details(
    scripted: Running, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO):
        resp = _post(scripted, "echo", {"variables": {"a": "BOOM", "b": ""}})
    body = _error(resp, 500, "internal_error")
    assert "secret internal detail" not in resp.text and "/etc/shadow" not in resp.text
    assert body["request_id"] in body["message"]  # what to quote to the operator
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert body["request_id"] in logged and "Traceback" not in logged
    assert scripted.key not in logged


def test_wrong_method_and_unknown_path_keep_the_error_shape(server: Running) -> None:
    resp = requests.get(
        f"{server.url}/api/flows/run/echo", headers={"x-api-key": server.key}, timeout=10
    )
    _error(resp, 405, "method_not_allowed")
    resp = requests.get(f"{server.url}/api/nothing", timeout=10)
    _error(resp, 404, "not_found")
