"""The client's retries against a tiny scripted HTTP server on 127.0.0.1: 503 then 200, dropped
connections, Retry-After, partial answers, exhausted retries, redirects, and the key kept out of
every exception, repr and log line."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from flownb import ApiError, AuthError, BatchError, Client, FlownbError, ProviderError, RateLimited

pytestmark = pytest.mark.timeout(60)

KEY = "fnb_test-key-that-must-never-leak-0123456789"
INFO = [{"name": "a", "type": "variable"}, {"name": "out", "type": "output"}]


def _items(value: str) -> list[dict[str, str]]:
    return [{"name": "out", "output": value, "type": "output"}]


@dataclass
class Reply:
    """One scripted answer: a status, JSON body and headers, or ``drop`` (close, say nothing)."""

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    drop: bool = False


class Scripted:
    """A loopback HTTP server answering from a script, recording every request it got."""

    def __init__(self, replies: list[Reply]) -> None:
        self.replies = list(replies)
        self.requests: list[tuple[str, str, Any, dict[str, str]]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                body = json.loads(raw) if raw else None
                outer.requests.append((self.command, self.path, body, dict(self.headers)))
                reply = (
                    outer.replies.pop(0)
                    if outer.replies
                    else Reply(500, {"message": "script over"})
                )
                if reply.drop:
                    self.close_connection = True
                    return
                payload = json.dumps(reply.body).encode() if reply.body is not None else b""
                self.send_response(reply.status)
                for k, v in reply.headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = _handle
            do_POST = _handle

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()  # poll interval: short, so teardown is quick
        self.httpd.server_close()


@pytest.fixture
def scripted() -> Iterator[Any]:
    servers: list[Scripted] = []

    def start(*replies: Reply) -> Scripted:
        s = Scripted(list(replies))
        servers.append(s)
        return s

    yield start
    for s in servers:
        s.close()


def _client(server: Scripted, **kw: Any) -> Client:
    return Client(server.url, KEY, **{"backoff": 0.01, **kw})


def _error(code: str, message: str, **extra: Any) -> dict[str, Any]:
    return {"code": code, "message": message, "errors": [{"code": code, "message": message}],
            "request_id": "rid-1", **extra}  # fmt: skip


def test_run_retries_503_then_succeeds(scripted: Any) -> None:
    server = scripted(Reply(503, _error("unavailable", "busy")), Reply(200, _items("done")))
    assert _client(server).run("f", {"a": "1"}) == _items("done")
    assert [r[0] for r in server.requests] == ["POST", "POST"]
    assert server.requests[0][2] == server.requests[1][2] == {"variables": {"a": "1"}}
    assert server.requests[0][3]["x-api-key"] == KEY


def test_describe_retries_503_then_succeeds(scripted: Any) -> None:
    server = scripted(Reply(503, _error("unavailable", "busy")), Reply(200, INFO))
    assert _client(server).get_flow_info("f") == INFO
    assert len(server.requests) == 2


def test_dropped_connection_is_retried(scripted: Any) -> None:
    server = scripted(Reply(drop=True), Reply(200, [_items("x")]))
    assert _client(server).run("f", [{"a": "1"}]) == [_items("x")]
    assert len(server.requests) == 2


def test_retry_after_is_honoured(scripted: Any, sleeps: list[float]) -> None:
    server = scripted(
        Reply(429, _error("upstream_rate_limited", "slow down"), {"Retry-After": "1"}),
        Reply(200, _items("ok")),
    )
    assert _client(server, backoff=0.0).run("f", {"a": "1"}) == _items("ok")
    # One wait before the retry: the second asked for, plus at most 0.105 s of jitter (the
    # backoff of 0 would not wait at all).
    assert len(sleeps) == 1 and 1.0 <= sleeps[0] <= 1.105


def test_retry_after_zero_means_now(scripted: Any, sleeps: list[float]) -> None:
    server = scripted(
        Reply(429, _error("upstream_rate_limited", "slow down"), {"Retry-After": "0"}),
        Reply(200, _items("ok")),
    )
    assert _client(server, backoff=60.0).run("f", {"a": "1"}) == _items("ok")
    # At once, up to 5 ms of jitter: not the backoff, which waits up to 20 s for a first retry.
    assert len(sleeps) == 1 and sleeps[0] <= 0.005


def test_partial_answer_resends_only_the_failed_elements(scripted: Any) -> None:
    partial = _error(
        "provider_error", "element 1 failed", results=[_items("r0"), None, _items("r2")]
    )
    partial["errors"] = [{"index": 1, "code": "provider_error", "message": "model failed"}]
    server = scripted(Reply(502, partial), Reply(200, [_items("r1")]))
    out = _client(server).run("f", [{"a": "0"}, {"a": "1"}, {"a": "2"}])
    assert out == [_items("r0"), _items("r1"), _items("r2")]
    assert server.requests[1][2] == {"variables": [{"a": "1"}]}


def test_exhausted_retries_keep_the_successes_and_the_servers_message(scripted: Any) -> None:
    partial = _error("upstream_rate_limited", "rate limited", results=[_items("r0"), None])
    partial["errors"] = [{"index": 1, "code": "upstream_rate_limited", "message": "too fast"}]
    again = _error("upstream_rate_limited", "rate limited", results=[None])
    again["errors"] = [{"index": 0, "code": "upstream_rate_limited", "message": "still too fast"}]
    server = scripted(
        Reply(429, partial, {"Retry-After": "0"}),
        Reply(429, again, {"Retry-After": "0"}),
        Reply(429, again, {"Retry-After": "0"}),
    )
    with pytest.raises(BatchError) as info:
        _client(server, max_retries=2).run("f", [{"a": "0"}, {"a": "1"}])
    assert info.value.results == [_items("r0"), None]
    failure = info.value.errors[1]
    assert isinstance(failure, RateLimited) and failure.message == "still too fast"
    assert len(server.requests) == 3


def test_single_run_gives_up_with_a_provider_error(scripted: Any) -> None:
    server = scripted(*[Reply(502, _error("provider_error", "the model is down"))] * 3)
    with pytest.raises(ProviderError) as info:
        _client(server, max_retries=2).run("f", {"a": "1"})
    assert info.value.message == "the model is down" and info.value.status == 502
    assert len(server.requests) == 3


def test_non_json_errors_and_refusals(scripted: Any) -> None:
    server = scripted(Reply(500, None), Reply(401, _error("invalid_api_key", "invalid API key")))
    with pytest.raises(ApiError, match="HTTP 500"):
        _client(server, max_retries=0).run("f", {"a": "1"})
    with pytest.raises(AuthError, match="invalid API key"):
        _client(server).run("f", {"a": "1"})
    assert len(server.requests) == 2  # a 401 is not retried


def test_redirects_are_not_followed(scripted: Any) -> None:
    server = scripted(Reply(307, None, {"Location": "http://127.0.0.1:9/elsewhere"}))
    with pytest.raises(ApiError, match="redirected"):
        _client(server).get_flow_info("f")
    assert len(server.requests) == 1


def test_unreachable_service_is_a_flownb_error() -> None:
    client = Client("http://127.0.0.1:9", KEY, max_retries=1, backoff=0.01)
    with pytest.raises(FlownbError, match="cannot reach") as info:
        client.run("f", {"a": "1"})
    assert not isinstance(info.value, ApiError)


def test_the_key_never_appears_in_errors_reprs_or_logs(
    scripted: Any, caplog: pytest.LogCaptureFixture
) -> None:
    server = scripted(
        Reply(503, _error("unavailable", "busy")),
        Reply(404, _error("flow_not_found", "no flow with id 'f'")),
        Reply(422, _error("invalid_request", "bad")),
    )
    seen: list[str] = []
    with caplog.at_level(logging.DEBUG):
        client = _client(server, max_retries=1)
        seen.append(repr(client))
        for call in (lambda: client.get_flow_info("f"), lambda: client.run("f", {"a": "1"})):
            with pytest.raises(FlownbError) as info:
                call()
            seen += [str(info.value), repr(info.value), repr(info.value.__dict__)]
        with pytest.raises(FlownbError) as info:
            Client("http://127.0.0.1:9", KEY, max_retries=0).run("f", {"a": "1"})
        seen += [str(info.value), repr(info.value), repr(info.value.__cause__)]
    seen += [r.getMessage() for r in caplog.records]
    assert all(KEY not in text for text in seen)
    assert any("urllib3" in r.name for r in caplog.records)  # debug logging was on
