# ruff: noqa: F811  (pytest fixtures imported from openai_fake are parameters here)
"""A bad endpoint is reported at once, and a slow retry is never silence (issue 17 item 4).

A host name that does not resolve (under the reserved ``.invalid`` TLD: it fails locally, no
traffic), nothing listening on a loopback port, and TLS spoken to a plain-HTTP loopback server
are each one line naming the cause, on both transports, and are not retried. A retry that waits
over ``NOTICE_AFTER`` seconds says so once: on stderr, or in the progress bar."""

from __future__ import annotations

import http.server
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import flownb
from flownb.errors import ProviderError, one_line
from flownb.providers import calls
from flownb.providers.limits import retryable
from flownb.testing.fake_openai import FakeOpenAI
from tests.cli_inprocess import run_cli
from tests.conftest import make_flow, write_flow
from tests.openai_fake import fake, fake_server  # noqa: F401 (fixtures)


@pytest.fixture(params=["aiohttp", "sdk"])
def transport(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("FLOWNB_OPENAI_TRANSPORT", request.param)
    return request.param


class _Counting(http.server.BaseHTTPRequestHandler):
    seen = 0

    def handle_one_request(self) -> None:
        type(self).seen += 1
        super().handle_one_request()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def plain_http() -> Iterator[tuple[int, type[_Counting]]]:
    """A plain-HTTP server on loopback that counts the connections it reads from."""
    handler = type("Handler", (_Counting,), {"seen": 0})
    server = http.server.HTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_port, handler
    finally:
        server.shutdown()
        server.server_close()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_against(base_url: str, monkeypatch: pytest.MonkeyPatch) -> ProviderError:
    monkeypatch.setenv("OPENAI_BASE_URL", base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-endpoint")
    flow = flownb.load_flow(
        make_flow({"out": "say {a}"}, ["a"]), provider="openai", cache=False, retries=4
    )
    with pytest.raises(ProviderError) as info:
        flow.run(a="x")
    return info.value


def check_reported(exc: ProviderError, *words: str) -> None:
    line = one_line(exc, code=True)
    assert line.startswith("provider_unreachable: could not reach the OpenAI API at ")
    for word in words:
        assert word in line
    assert not retryable(exc)
    assert "sk-test-endpoint" not in line


def test_a_host_that_does_not_resolve_is_one_line_not_retried(
    transport: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    exc = run_against("http://no-such-host.invalid/v1", monkeypatch)
    check_reported(exc, "the host name 'no-such-host.invalid' does not resolve")
    assert "retrying" not in capsys.readouterr().err


def test_nothing_listening_on_loopback_is_one_line_not_retried(
    transport: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = closed_port()
    exc = run_against(f"http://127.0.0.1:{port}/v1", monkeypatch)
    check_reported(exc, f"nothing is listening at 127.0.0.1:{port} (connection refused)")


def test_tls_to_a_plain_http_server_is_one_line_tried_once(
    transport: str,
    monkeypatch: pytest.MonkeyPatch,
    plain_http: tuple[int, type[_Counting]],
) -> None:
    port, handler = plain_http
    exc = run_against(f"https://127.0.0.1:{port}/v1", monkeypatch)
    check_reported(exc, f"the TLS handshake with 127.0.0.1:{port} failed", "not https://")
    assert handler.seen == 1  # one attempt, no retries


def test_a_slow_retry_says_so_once_on_stderr(
    fake: FakeOpenAI,
    transport: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(calls, "NOTICE_AFTER", 0.05)  # the 2 s threshold, scaled down
    fake.configure(fail_markers={"429": "busy"}, retry_after="0.1")
    flow = flownb.load_flow(make_flow({"out": "say {a}"}, ["a"]), cache=False, retries=2)
    with pytest.raises(ProviderError):
        flow.run(a="busy")
    assert len(fake.requests) == 3
    notices = [line for line in capsys.readouterr().err.splitlines() if "retrying in" in line]
    assert len(notices) == 1, notices  # two waits, one kind of failure: said once
    assert notices[0].startswith("flownb: OpenAI API error 429: Rate limit reached")
    assert "(attempt 2 of 3)" in notices[0] and "retrying in 0.1 s" in notices[0]


def test_a_quick_retry_says_nothing(
    fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.configure(fail_markers={"429": "busy"}, retry_after="0")
    flow = flownb.load_flow(make_flow({"out": "say {a}"}, ["a"]), cache=False, retries=2)
    with pytest.raises(ProviderError):
        flow.run(a="busy")
    assert "retrying" not in capsys.readouterr().err


def test_a_slow_retry_shows_in_the_progress_bar(
    fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(calls, "NOTICE_AFTER", 0.05)
    fake.configure(fail_markers={"429": "busy"}, retry_after="0.1")
    flow = flownb.load_flow(make_flow({"out": "say {a}"}, ["a"]), cache=False, retries=1)
    seen: list[BaseException | None] = []
    flow.run_each([{"a": "busy"}, {"a": "fine"}], lambda i, r, e: seen.append(e), progress=True)
    assert sum(e is not None for e in seen) == 1
    err = capsys.readouterr().err
    # The bar (tqdm, in a terminal here) shows it as its postfix, after the rate ...
    assert ", OpenAI API error 429: Rate limit reached" in err
    assert "(attempt 2 of 2)]" in err
    # ... and, outside a notebook, as one line above the bar.
    assert err.count("flownb: OpenAI API error 429") == 1


def test_the_cli_says_why_an_endpoint_cannot_be_reached(tmp_path: Path) -> None:
    path = write_flow(tmp_path / "f.json", make_flow({"out": "say {a}"}, ["a"]))
    env = {
        "OPENAI_BASE_URL": "http://no-such-host.invalid/v1",
        "OPENAI_API_KEY": "sk-test-endpoint",
        "FLOWNB_HOME": str(tmp_path / "home"),
    }
    res = run_cli("run", str(path), "--provider", "openai", "--var", "a=x", env=env)
    assert res.returncode != 0
    lines = [line for line in res.stderr.splitlines() if "no-such-host.invalid" in line]
    assert len(lines) >= 1 and "does not resolve" in lines[-1]
    assert "Traceback" not in res.stderr
