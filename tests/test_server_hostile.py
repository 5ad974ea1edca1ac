"""``flownb serve`` against hostile clients, round four (issue 30), on a real uvicorn server on
127.0.0.1: bodies trickled a byte at a time, clients that leave mid-body, ``Accept`` headers in
capitals, and ``Host`` headers that try to choose the image URLs in an answer."""

from __future__ import annotations

import json
import logging
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from click.testing import CliRunner

from flownb.cli.main import cli
from tests.serving import Running, post_run, run_server, sample_flows

BODY = json.dumps({"variables": {"a": "1", "b": "2"}}).encode()


@pytest.fixture
def server(tmp_path: Path, flownb_env: Path) -> Iterator[Running]:
    with run_server(sample_flows(tmp_path), flownb_env, body_timeout=0.5) as running:
        yield running


def _head(server: Running, length: int) -> bytes:
    return (
        f"POST /api/flows/run/echo HTTP/1.1\r\nHost: x\r\nx-api-key: {server.key}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
    ).encode()


def _answer(sock: socket.socket) -> bytes:
    """Read until the server closes the connection (a 408 closes it)."""
    sock.settimeout(60)  # a guard against a server that never answers, not a measure
    got = b""
    while chunk := sock.recv(65536):
        got += chunk
    return got


def test_bodies_trickled_a_byte_at_a_time_get_408_and_their_connections_close(
    server: Running, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="flownb")
    port = int(server.url.rsplit(":", 1)[1])
    slow = []
    for _ in range(20):
        sock = socket.create_connection(("127.0.0.1", port))
        sock.sendall(_head(server, len(BODY)) + BODY[:1])  # then nothing more
        slow.append(sock)
    # A client that sends its body is served meanwhile.
    assert post_run(server, "echo", {"a": "1", "b": "2"}).json()[0]["output"] == "A=1 B=2"
    answers = [_answer(sock) for sock in slow]
    for sock in slow:
        sock.close()
    for answer in answers:
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 408 "), answer[:200]
        assert b"connection: close" in head.lower()
        problem = json.loads(body)
        assert problem["code"] == "request_timeout" and "0.5 seconds" in problem["message"]
    assert "internal error" not in caplog.text


def test_a_client_that_leaves_mid_body_is_logged_as_leaving_not_as_an_error(
    server: Running, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="flownb")
    port = int(server.url.rsplit(":", 1)[1])
    for _ in range(5):
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(_head(server, len(BODY)) + BODY[:5])
    # Wait for the five lines (the deadline only stops a server that never logs them).
    deadline = time.monotonic() + 120
    while caplog.text.count("the client left before its request was read") < 5:
        assert time.monotonic() < deadline, caplog.text
        requests.get(f"{server.url}/healthz", timeout=10)
    assert caplog.text.count("the client left before its request was read") == 5
    assert "internal error" not in caplog.text and "ClientDisconnect" not in caplog.text


def test_an_event_stream_asked_for_in_capitals_streams(server: Running) -> None:
    resp = requests.post(
        f"{server.url}/api/flows/run/echo",
        json={"variables": {"a": "1", "b": "2"}},
        headers={"x-api-key": server.key, "Accept": "TEXT/EVENT-STREAM"},
        timeout=30,
    )
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/event-stream")
    assert b"event: result" in resp.content


def _image_url(server: Running, host: str) -> str:
    resp = requests.post(
        f"{server.url}/api/flows/run/blog-intro",
        json={"variables": {"topic": "moths", "tone": "dry"}},
        headers={"x-api-key": server.key, "Host": host},
        timeout=30,
    )
    return str(resp.json()[1]["output"])


def test_the_host_header_does_not_choose_image_urls(server: Running) -> None:
    url = _image_url(server, "evil.example:666")
    assert url.startswith(f"{server.url}/media/") and "evil" not in url
    assert requests.get(url, timeout=10).status_code == 200


def test_a_public_url_makes_the_image_urls(tmp_path: Path, flownb_env: Path) -> None:
    flows = sample_flows(tmp_path)
    with run_server(flows, flownb_env, public_url="https://flows.example.com/x/") as running:
        url = _image_url(running, "evil.example")
    assert url.startswith("https://flows.example.com/x/media/") and url.endswith(".png")


def test_serve_documents_its_new_limits_and_refuses_bad_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shown = CliRunner().invoke(cli, ["serve", "--help"], terminal_width=200).output
    for option in ("--body-timeout", "--media-max-size", "--public-url"):
        assert option in shown
    assert "30" in shown.split("--body-timeout", 1)[1].split("--media-max-size")[0]
    flows = tmp_path / "f"
    flows.mkdir()
    bad = CliRunner().invoke(cli, ["serve", "--flows", str(flows), "--public-url", "ftp://x"])
    assert bad.exit_code != 0 and "public URL must be http(s)" in str(bad.exception or bad.output)
    bad = CliRunner().invoke(cli, ["serve", "--flows", str(flows), "--media-max-size", "huge"])
    assert bad.exit_code != 0 and "is not a size" in str(bad.exception or bad.output)
