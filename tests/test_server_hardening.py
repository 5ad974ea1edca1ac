"""Issue 10, server items: what one client with a valid key (or none) could do to everyone.

Each test runs a real uvicorn server on 127.0.0.1 (``tests/serving.py``) and attacks it the way
the probe did, at a scale that fits a unit test.
"""

from __future__ import annotations

import hashlib
import json
import socket
import stat
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import pytest
import requests
import uvicorn

from flownb.server import KeyStore, ServerConfig, create_app
from flownb.server import keys as keys_module
from tests.serving import Running, free_port, post_run, run_server, sample_flows

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def server(tmp_path: Path, flownb_env: Path) -> Iterator[Running]:
    with run_server(sample_flows(tmp_path), flownb_env) as running:
        yield running


@contextmanager
def healthz_watch(url: str) -> Iterator[list[float]]:
    """Poll ``/healthz`` every 20 ms in a thread while the block runs; yield the latencies."""
    latencies: list[float] = []
    stop = threading.Event()

    def poll() -> None:
        with requests.Session() as s:
            while not stop.is_set():
                started = time.perf_counter()
                r = s.get(f"{url}/healthz", timeout=30)
                latencies.append(time.perf_counter() - started)
                assert r.status_code == 200
                stop.wait(0.02)

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    try:
        yield latencies
    finally:
        stop.set()
        thread.join(30)


def _concurrently(n: int, job: Callable[[], requests.Response]) -> list[requests.Response]:
    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(lambda _: job(), range(n)))


# -- item 1: problem lists are capped; big bodies are checked off the event loop -----------------


def test_a_huge_batch_of_unknown_variables_gets_a_small_422_and_healthz_stays_responsive(
    server: Running,
) -> None:
    element = {"a": "x", "b": "y", **{f"u{j}": "v" for j in range(800)}}
    body = json.dumps({"variables": [element] * 1000}).encode()
    assert len(body) > 7_000_000

    def attack() -> requests.Response:
        return requests.post(
            f"{server.url}/api/flows/run/echo",
            data=body,
            headers={"x-api-key": server.key, "content-type": "application/json"},
            timeout=60,
        )

    with healthz_watch(server.url) as latencies:
        answers = _concurrently(4, attack)
    for r in answers:
        assert r.status_code == 422
        assert len(r.content) < 64 * 1024, f"{len(r.content)} byte error body"
        data = r.json()
        assert data["code"] == "unknown_variable"
        assert len(data["errors"]) == 100
        assert data["errors_total"] == 800 * 1000
        assert data["errors"][0]["index"] == 0
    # Answered again and again while the four 8 MB bodies were checked: the loop was not held
    # for the whole attack. A count, not a latency: on shared cores latencies are noise.
    assert len(latencies) >= 3, f"healthz answered {len(latencies)} times during the attack"


# -- item 2: flow files ---------------------------------------------------------------------------


def _hostile_flows(flows: Path) -> dict[str, str]:
    """Put every kind of bad flow file into ``flows``; return flow id -> what the log says."""
    with open(flows / "huge.json", "wb") as fh:  # over the 5 MiB limit
        fh.write(b"{" * (6 * 1024 * 1024))
    (flows / "malformed.json").write_bytes(b'{"nodes": [' + b'"x",' * 1_000_000)  # 4 MB
    (flows / "deep.json").write_bytes(b"[" * 100_000 + b"]" * 100_000)
    return {
        "huge": "over the limit",
        "malformed": "not JSON",
        "deep": "nested too deeply",
    }


def test_hostile_flow_files_get_a_named_error_and_do_not_stall_the_server(
    tmp_path: Path, flownb_env: Path, caplog: pytest.LogCaptureFixture
) -> None:
    flows = sample_flows(tmp_path)
    hostile = _hostile_flows(flows)
    with run_server(flows, flownb_env) as server:
        headers = {"x-api-key": server.key}

        def describe(flow_id: str) -> requests.Response:
            return requests.get(
                f"{server.url}/api/flows/getFlowInfo/{flow_id}", headers=headers, timeout=20
            )

        for flow_id, why in hostile.items():
            with healthz_watch(server.url) as latencies:
                answers = _concurrently(4, lambda f=flow_id: describe(f))  # type: ignore[misc]
            for r in answers:
                assert r.status_code == 500, (flow_id, r.text)
                body = r.json()
                assert body["code"] == "internal_error"
                assert body["message"] == f"flow {flow_id!r} cannot be loaded; see the server log"
                assert str(tmp_path) not in r.text
            # The details went to the log, once for this version of the file.
            logged = [r for r in caplog.records if why in r.getMessage()]
            assert len(logged) == 1 and f"flow {flow_id!r}" in logged[0].getMessage()
            # Answered while the bad file was read four times: a count, not a latency.
            assert latencies, (flow_id, "healthz was never answered")
            # The failure is remembered for this version of the file: no second read.
            with pytest.raises(Exception, match="see the server log"):
                server.config.store.peek(flow_id)
        # The good flows still work.
        assert describe("echo").status_code == 200


def test_a_fixed_flow_file_is_served_after_its_failure(tmp_path: Path, flownb_env: Path) -> None:
    flows = sample_flows(tmp_path)
    path = flows / "later.json"
    path.write_text("{not json")
    with run_server(flows, flownb_env) as server:
        url = f"{server.url}/api/flows/getFlowInfo/later"
        headers = {"x-api-key": server.key}
        assert requests.get(url, headers=headers, timeout=10).status_code == 500
        path.write_bytes((flows / "echo.json").read_bytes())
        assert requests.get(url, headers=headers, timeout=10).status_code == 200


# -- item 3: lone surrogates ----------------------------------------------------------------------


def _post_raw(server: Running, body: bytes) -> requests.Response:
    return requests.post(
        f"{server.url}/api/flows/run/echo",
        data=body,
        headers={"x-api-key": server.key, "content-type": "application/json"},
        timeout=10,
    )


def test_a_lone_surrogate_in_a_value_is_a_named_422(server: Running) -> None:
    r = _post_raw(server, b'{"variables": {"a": "ok \\ud800", "b": "x"}}')
    assert r.status_code == 422, r.text
    body = r.json()
    assert body["code"] == "invalid_variable_value"
    assert body["errors"][0]["variable"] == "a"
    assert "not valid Unicode" in body["message"]


def test_a_lone_surrogate_in_a_batch_names_its_element_and_nothing_runs(server: Running) -> None:
    r = _post_raw(
        server,
        b'{"variables": [{"a": "1", "b": "x"}, {"a": "\\udfff", "b": "x"}, {"a": "3", "b": "x"}]}',
    )
    assert r.status_code == 422, r.text
    errors = r.json()["errors"]
    assert [(e["index"], e["variable"]) for e in errors] == [(1, "a")]
    # A surrogate pair is valid text and runs.
    ok = _post_raw(server, b'{"variables": {"a": "\\ud83d\\ude00", "b": "x"}}')
    assert ok.status_code == 200 and ok.json()[0]["output"] == "A=\U0001f600 B=x"


def test_a_lone_surrogate_in_a_variable_name_is_a_422_with_a_json_body(server: Running) -> None:
    r = _post_raw(server, b'{"variables": {"a": "1", "b": "2", "\\ud800": "x"}}')
    assert r.status_code == 422, r.text
    assert r.json()["code"] == "unknown_variable"


# -- item 4: image names are not derivable from prompts -------------------------------------------


def _image_name(server: Running, topic: str) -> str:
    r = post_run(server, "blog-intro", {"topic": topic, "tone": "dry"})
    assert r.status_code == 200, r.text
    url = next(i["output"] for i in r.json() if i["name"] == "header_image")
    return url.rsplit("/", 1)[-1]


def test_image_names_are_keyed_by_a_per_home_secret(tmp_path: Path, flownb_env: Path) -> None:
    flows = sample_flows(tmp_path)
    with run_server(flows, flownb_env) as server:
        first = _image_name(server, "owls")
        assert _image_name(server, "owls") == first  # deterministic within a home: cacheable
        assert requests.get(f"{server.url}/media/{first}", timeout=10).status_code == 200
    prompt = "A dry watercolour illustration of owls"
    public = hashlib.sha256(b"flownb-offline-image-v1\0" + prompt.encode()).hexdigest()[:40]
    assert first != public + ".png"
    key = flownb_env / "media.key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    # Another home (another secret): another name for the same prompt.
    other_home = tmp_path / "other-home"
    with run_server(flows, other_home) as other:
        assert _image_name(other, "owls") != first
    assert key.read_text() == (flownb_env / "media.key").read_text()  # created once, kept


# -- item 5: key-like strings never come back -----------------------------------------------------


def test_a_key_pasted_into_any_path_or_value_is_not_echoed(server: Running) -> None:
    key = server.key
    for r in (
        requests.get(f"{server.url}/{key}", timeout=10),
        requests.get(f"{server.url}/docs/{key}", timeout=10),
        requests.get(f"{server.url}/api/flows/getFlowInfo/{key}", headers={"x-api-key": key}),
        post_run(server, "echo", {"a": "x", "b": "y", key: "z"}),
    ):
        assert r.status_code in (404, 422), r.text
        assert key not in r.text and key[4:] not in r.text
        assert "fnb_***" in r.text or "API key" in r.text


# -- item 8: HEAD, and one vocabulary for JSON types ----------------------------------------------


def test_head_is_answered_on_every_get_route(server: Running) -> None:
    name = _image_name(server, "tea")
    for path, headers in (
        ("/healthz", {}),
        ("/api/flows/getFlowInfo/echo", {"x-api-key": server.key}),
        (f"/media/{name}", {}),
        ("/openapi.json", {}),
    ):
        get = requests.get(server.url + path, headers=headers, timeout=10)
        head = requests.head(server.url + path, headers=headers, timeout=10)
        assert head.status_code == get.status_code == 200, path
        assert head.content == b""
        assert head.headers["content-length"] == str(len(get.content))
        assert head.headers["content-type"] == get.headers["content-type"]
    # HEAD is still checked like GET: no key, no flow.
    assert requests.head(f"{server.url}/api/flows/getFlowInfo/echo", timeout=10).status_code == 401
    r = requests.head(f"{server.url}/api/flows/run/echo", timeout=10)
    assert r.status_code == 405


def test_type_errors_use_json_words(server: Running) -> None:
    r = post_run(server, "echo", {"a": 1, "b": None})
    messages = [e["message"] for e in r.json()["errors"]]
    assert any("got a number" in m for m in messages), messages
    assert any("got null" in m for m in messages), messages
    r = post_run(server, "echo", [{"a": "x", "b": "y"}, ["x"]])
    assert "got an array" in r.json()["message"]
    assert not any("NoneType" in m or "got int" in m for m in messages)


# -- item 7: slow clients cannot hold connections -------------------------------------------------


@contextmanager
def head_timeout_server(
    tmp_path: Path, flownb_env: Path, header_timeout: float, keep_alive: int
) -> Iterator[int]:
    """Run an app in a thread with flownb serve's protocol giving each request head
    ``header_timeout`` seconds; yield its port."""
    from flownb.server.protocol import http_protocol  # here: each test fails on its own

    config = ServerConfig(sample_flows(tmp_path), home=flownb_env)
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(config),
            host="127.0.0.1",
            port=free_port(),
            log_level="warning",
            http=http_protocol(header_timeout),
            timeout_keep_alive=keep_alive,
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 120  # a guard against a server that never starts
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield server.config.port
    finally:
        server.should_exit = True
        thread.join(10)


def test_connections_that_trickle_their_request_head_are_closed(
    tmp_path: Path, flownb_env: Path
) -> None:
    with head_timeout_server(tmp_path, flownb_env, 0.5, keep_alive=1) as port:
        _trickled_heads_are_closed(port)


def _trickled_heads_are_closed(port: int) -> None:
    conns = []
    try:
        for _ in range(100):
            c = socket.create_connection(("127.0.0.1", port))
            c.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            conns.append(c)
        closed: set[int] = set()
        started = time.monotonic()
        # The server gives each head 0.5 s; the deadline only stops a server that never closes.
        while len(closed) < len(conns) and time.monotonic() - started < 60:
            for i, c in enumerate(conns):
                if i in closed:
                    continue
                try:
                    c.sendall(b"X-Slow: 1\r\n")  # one header line at a time, never the end
                    c.settimeout(0.001)
                    if c.recv(1) == b"":
                        closed.add(i)
                except TimeoutError:
                    pass
                except OSError:
                    closed.add(i)
            # A well-behaved client is served meanwhile.
            r = requests.get(f"http://127.0.0.1:{port}/healthz", timeout=5)
            assert r.status_code == 200
            time.sleep(0.1)
        assert len(closed) == len(conns), f"{len(conns) - len(closed)} slow connections still open"
    finally:
        for c in conns:
            c.close()


def test_a_connection_used_now_and_then_outlives_the_head_timeout_and_is_closed_once_it_trickles(
    tmp_path: Path, flownb_env: Path
) -> None:
    # One timer per connection checks its wait when it fires (not one made per request): a
    # connection that sends a request now and then, each well within the head timeout, stays
    # open for longer than the timeout, and is closed once a head of its takes longer than it.
    request = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
    with head_timeout_server(tmp_path, flownb_env, 2.0, keep_alive=30) as port:
        conn = socket.create_connection(("127.0.0.1", port))
        conn.settimeout(30)  # a guard against a server that never answers, not a measure
        try:
            started, answered = time.monotonic(), 0
            while time.monotonic() - started < 5:
                time.sleep(0.25)  # idle between requests, far within the head timeout
                conn.sendall(request)
                got = b""
                while not got.endswith(b"}"):
                    chunk = conn.recv(65536)
                    assert chunk, f"closed after {answered} answers, each head sent in time"
                    got += chunk
                answered += 1
            conn.sendall(b"GET /healthz HTTP/1.1\r\n")  # then a header line now and then
            closed = False
            while not closed and time.monotonic() - started < 60:
                try:
                    conn.sendall(b"X-Slow: 1\r\n")
                    conn.settimeout(0.1)
                    closed = conn.recv(1) == b""
                except TimeoutError:
                    pass
                except OSError:
                    closed = True
            assert closed, "a connection trickling its head after timely requests was not closed"
        finally:
            conn.close()


# -- item 16: last-used times reach the key file while the server runs ----------------------------


def test_last_used_is_flushed_while_the_server_runs(
    tmp_path: Path, flownb_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(keys_module, "FLUSH_EVERY", 0.3)
    with run_server(sample_flows(tmp_path), flownb_env) as server:
        second = KeyStore(flownb_env).create("second")
        url = f"{server.url}/api/flows/getFlowInfo/echo"
        assert requests.get(url, headers={"x-api-key": server.key}, timeout=10).ok
        assert requests.get(url, headers={"x-api-key": second}, timeout=10).ok
        # No further request: the server flushes on its own, every 0.3 s.
        deadline = time.monotonic() + 30
        used: dict[str, object] = {}
        while time.monotonic() < deadline:
            used = {r.name: r.last_used for r in KeyStore(flownb_env).load()}
            if used["test"] is not None and used["second"] is not None:
                break
            time.sleep(0.05)
        assert used["test"] is not None and used["second"] is not None, used
