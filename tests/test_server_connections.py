"""``flownb serve``'s connections against hostile clients, round five (issue 38, items 2 and 7),
on a real uvicorn server on 127.0.0.1 listening as ``flownb serve`` does, through real sockets:
idle connections without a key cannot hold the connection limit, request heads are capped at
16 KiB whole, forwarded headers are believed only from proxies named, and ``/media`` says what
its bytes are."""

from __future__ import annotations

import contextlib
import io
import json
import re
import socket
import struct
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests
from PIL import Image

from flownb.server.protocol import COALESCE_MAX, MAX_HEADER_BYTES
from tests.serving import Running, post_run, run_server, sample_flows

BODY = json.dumps({"variables": {"a": "1", "b": "2"}}).encode()


@pytest.fixture
def server(tmp_path: Path, flownb_env: Path) -> Iterator[Running]:
    with run_server(sample_flows(tmp_path), flownb_env) as running:
        yield running


def _port(server: Running) -> int:
    return int(server.url.rsplit(":", 1)[1])


def _answer(sock: socket.socket) -> bytes:
    """Read one answer (or until the server closes the connection)."""
    sock.settimeout(60)  # a guard against a server that never answers, not a measure
    got = b""
    while b"\r\n\r\n" not in got:
        chunk = sock.recv(65536)
        if not chunk:
            return got
        got += chunk
    head, _, body = got.partition(b"\r\n\r\n")
    length = next(
        (int(line.split(b":", 1)[1]) for line in head.lower().split(b"\r\n")
         if line.startswith(b"content-length:")),
        0,
    )  # fmt: skip
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body


def _closed(sock: socket.socket) -> bool:
    """Whether the server closed ``sock`` (waits a moment for it to say so)."""
    sock.settimeout(0.05)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False
    except OSError:
        return True


def _run_request(server: Running, extra: str = "") -> bytes:
    return (
        f"POST /api/flows/run/echo HTTP/1.1\r\nHost: x\r\nx-api-key: {server.key}\r\n{extra}"
        f"Content-Type: application/json\r\nContent-Length: {len(BODY)}\r\n\r\n"
    ).encode() + BODY


# -- idle connections without a key hold at most their share of the limit -------------------------
def test_idle_connections_without_a_key_cannot_send_other_callers_to_503(
    tmp_path: Path, flownb_env: Path
) -> None:
    limit = 20
    with run_server(sample_flows(tmp_path), flownb_env, limit_concurrency=limit) as server:
        port = _port(server)
        # A caller that has shown its key keeps its connection through the flood below.
        proven = socket.create_connection(("127.0.0.1", port))
        proven.sendall(_run_request(server))
        assert _answer(proven).startswith(b"HTTP/1.1 200 ")

        idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(limit + 10)]
        try:
            # Other callers, at once, each on a connection of its own: none is turned away.
            with ThreadPoolExecutor(9) as pool:
                answers = list(
                    pool.map(lambda _: post_run(server, "echo", {"a": "1", "b": "2"}), range(9))
                )
            assert [r.status_code for r in answers] == [200] * 9
            # The idle connections were pushed out down to their share (half of the limit).
            deadline = time.monotonic() + 30  # only stops a server that never closes them
            open_idle = [s for s in idle if not _closed(s)]
            while len(open_idle) > limit // 2 and time.monotonic() < deadline:
                open_idle = [s for s in open_idle if not _closed(s)]
            assert len(open_idle) <= limit // 2
            proven.sendall(_run_request(server))
            assert _answer(proven).startswith(b"HTTP/1.1 200 ")
        finally:
            proven.close()
            for sock in idle:
                sock.close()


# -- a request head is at most 16 KiB, request line and headers together --------------------------
@pytest.mark.parametrize("trickled", [False, True], ids=["one-write", "trickled"])
def test_a_request_head_over_16_kib_is_431(server: Running, trickled: bool) -> None:
    # Many headers of 1 KiB each: no single line is long, the head as a whole is 70 KiB.
    extra = "".join(f"X-Pad-{i}: {'p' * 1000}\r\n" for i in range(70))
    request = _run_request(server, extra)
    with socket.create_connection(("127.0.0.1", _port(server))) as sock:
        if trickled:
            for i in range(0, len(request), 4096):
                try:
                    sock.sendall(request[i : i + 4096])
                except OSError:  # closed after the answer: the rest is not wanted
                    break
        else:
            sock.sendall(request)
        answer = _answer(sock)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 431 "), answer[:200]
    assert b"connection: close" in head.lower()
    problem = json.loads(body)
    assert problem["code"] == "request_header_too_large" and "16 KiB" in problem["message"]
    assert problem["request_id"] and f"x-request-id: {problem['request_id']}".encode() in head


def test_a_head_over_16_kib_pipelined_after_a_request_in_the_same_read_is_431_after_its_answer(
    server: Running,
) -> None:
    # The big head starts in the middle of a read, after a whole request: it is counted all the
    # same, and its 431 comes after the answer owed to the request before it (answers in order).
    extra = "".join(f"X-Pad-{i}: {'p' * 1000}\r\n" for i in range(70))
    with socket.create_connection(("127.0.0.1", _port(server))) as sock:
        sock.sendall(_run_request(server) + _run_request(server, extra))
        sock.settimeout(60)  # a guard against a server that never closes, not a measure
        got = b""
        while chunk := sock.recv(65536):  # everything, until the server closes
            got += chunk
    answers = []
    while got:
        head, _, rest = got.partition(b"\r\n\r\n")
        length = int(re.search(rb"content-length: *(\d+)", head, re.IGNORECASE)[1])  # type: ignore[index]
        answers.append((head, rest[:length]))
        got = rest[length:]
    assert [head.split(b" ")[1] for head, _ in answers] == [b"200", b"431"], answers
    assert json.loads(answers[0][1])[0]["output"] == "A=1 B=2"
    assert json.loads(answers[1][1])["code"] == "request_header_too_large"


def test_a_head_just_under_16_kib_is_served_and_so_is_the_next_on_the_connection(
    server: Running,
) -> None:
    base = len(_run_request(server, "X-Pad: \r\n")) - len(BODY)
    extra = f"X-Pad: {'p' * (MAX_HEADER_BYTES - base)}\r\n"
    request = _run_request(server, extra)
    assert len(request) - len(BODY) == MAX_HEADER_BYTES
    with socket.create_connection(("127.0.0.1", _port(server))) as sock:
        for _ in range(3):  # each head counted from its own start
            sock.sendall(request)
            answer = _answer(sock)
            assert answer.startswith(b"HTTP/1.1 200 "), answer[:200]
            assert json.loads(answer.partition(b"\r\n\r\n")[2])[0]["output"] == "A=1 B=2"


def test_the_rest_of_a_body_refused_early_is_not_taken_for_a_head(
    tmp_path: Path, flownb_env: Path
) -> None:
    flows = sample_flows(tmp_path)
    with run_server(flows, flownb_env, max_body_bytes=1000) as server:
        big = b'{"variables": {"a": "' + b"x" * 100_000 + b'", "b": "2"}}'
        head = (
            f"POST /api/flows/run/echo HTTP/1.1\r\nHost: x\r\nx-api-key: {server.key}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(big)}\r\n\r\n"
        ).encode()
        with socket.create_connection(("127.0.0.1", _port(server))) as sock:
            sock.sendall(head)
            answer = _answer(sock)
            with contextlib.suppress(OSError):  # the server may close instead of reading it
                sock.sendall(big)  # the body the server said it will not read
                sock.sendall(_run_request(server))
            after = _answer(sock)
    assert answer.startswith(b"HTTP/1.1 413 "), answer[:200]
    # The next request on the connection is served, or the connection was closed: never a 431.
    assert after == b"" or after.startswith(b"HTTP/1.1 200 "), after[:200]


# -- an answer leaves in one piece ----------------------------------------------------------------
def _data_segments_in(sock: socket.socket) -> int:
    """Return how many TCP segments carrying data ``sock`` has received (Linux's
    ``tcp_info.tcpi_data_segs_in``)."""
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
    return int(struct.unpack_from("I", info, 152)[0])  # its offset since Linux 4.6


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="TCP_INFO as Linux has it")
def test_an_answer_and_an_error_arrive_in_one_tcp_segment_each(server: Running) -> None:
    # uvicorn writes a response's head and body separately: two sends, two packets (Nagle is
    # off), each waking the client. flownb serve's protocol sends them as one.
    without_key = _run_request(server).replace(f"x-api-key: {server.key}\r\n".encode(), b"")
    with socket.create_connection(("127.0.0.1", _port(server))) as sock:
        for request, status in [(_run_request(server), b"200")] * 3 + [(without_key, b"401")]:
            before = _data_segments_in(sock)
            sock.sendall(request)
            answer = _answer(sock)
            assert answer.startswith(b"HTTP/1.1 " + status), answer[:200]
            assert _data_segments_in(sock) - before == 1


def test_an_answer_over_the_coalescing_limit_arrives_whole(server: Running) -> None:
    big = "x" * (2 * COALESCE_MAX)
    body = json.dumps({"variables": [{"a": big, "b": str(i)} for i in range(2)]}).encode()
    request = (
        f"POST /api/flows/run/echo HTTP/1.1\r\nHost: x\r\nx-api-key: {server.key}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    with socket.create_connection(("127.0.0.1", _port(server))) as sock:
        for _ in range(2):  # and the connection goes on
            sock.sendall(request)
            answer = _answer(sock)
            assert answer.startswith(b"HTTP/1.1 200 "), answer[:200]
            outputs = [items[0]["output"] for items in json.loads(answer.partition(b"\r\n\r\n")[2])]
            assert outputs == [f"A={big} B=0", f"A={big} B=1"]


# -- forwarded headers: only from the proxies named -----------------------------------------------
def _image_url(server: Running, **headers: str) -> str:
    resp = requests.post(
        f"{server.url}/api/flows/run/blog-intro",
        json={"variables": {"topic": "moths", "tone": "dry"}},
        headers={"x-api-key": server.key, **headers},
        timeout=30,
    )
    return str(resp.json()[1]["output"])


def test_forwarded_headers_from_loopback_are_not_believed_by_default(server: Running) -> None:
    url = _image_url(server, **{"X-Forwarded-Proto": "https", "X-Forwarded-For": "203.0.113.9"})
    assert url.startswith(f"{server.url}/media/"), url


def test_forwarded_headers_are_believed_from_a_proxy_named(
    tmp_path: Path, flownb_env: Path
) -> None:
    flows = sample_flows(tmp_path)
    with run_server(flows, flownb_env, forwarded_allow_ips="127.0.0.1") as server:
        url = _image_url(server, **{"X-Forwarded-Proto": "https"})
        assert url.startswith(f"https://127.0.0.1:{_port(server)}/media/"), url
        assert _image_url(server).startswith("http://")


def test_a_trusted_proxy_that_is_no_address_is_refused(tmp_path: Path) -> None:
    from flownb.errors import ConfigError
    from flownb.server import ServerConfig

    with pytest.raises(ConfigError, match="--forwarded-allow-ips"):
        ServerConfig(tmp_path, home=tmp_path / "home", forwarded_allow_ips="127.0.0.1,proxy")


# -- /media: the type its bytes say, and nosniff --------------------------------------------------
def _jpeg() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (4, 4), "red").save(out, "JPEG")
    return out.getvalue()


def test_media_answers_carry_the_type_of_their_bytes_and_nosniff(server: Running) -> None:
    url = _image_url(server)
    resp = requests.get(url, timeout=10)
    assert resp.headers["content-type"] == "image/png"
    assert resp.headers["x-content-type-options"] == "nosniff"
    assert resp.content.startswith(b"\x89PNG")

    media = server.config.media.directory
    (media / ("a" * 32 + ".png")).write_bytes(_jpeg())  # a JPEG under a .png name
    resp = requests.get(f"{server.url}/media/{'a' * 32}.png", timeout=10)
    assert resp.status_code == 200 and resp.headers["content-type"] == "image/jpeg"
    assert resp.headers["x-content-type-options"] == "nosniff"


def test_a_media_file_that_is_no_image_is_not_served(server: Running) -> None:
    media = server.config.media.directory
    media.mkdir(parents=True, exist_ok=True)
    (media / ("b" * 32 + ".png")).write_bytes(b"<html><script>alert(1)</script></html>")
    resp = requests.get(f"{server.url}/media/{'b' * 32}.png", timeout=10)
    assert resp.status_code == 404 and resp.json()["code"] == "not_found"
    assert b"<script>" not in resp.content
