"""Issue 9 item 2: one error map shared by server and client, service failures with their own
classes, Retry-After parsed in one place, and one way to show any error on one line."""

from __future__ import annotations

import ast
import socket
import threading
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path

import pytest

import flownb
from flownb import Client
from flownb.error_map import HTTP_ERRORS, from_http, http_status, parse_retry_after
from flownb.errors import (
    ApiError,
    AuthError,
    FlowFileError,
    FlownbError,
    FlowNotFound,
    InputError,
    Problem,
    ProviderError,
    ProviderTimeout,
    RateLimited,
    ServiceTimeout,
    ServiceUnavailable,
    one_line,
)
from flownb.server.errors import ApiProblem
from tests.serving import free_port

ROOT = Path(__file__).resolve().parent.parent


def _sample(cls: type[FlownbError]) -> FlownbError:
    if cls is InputError:
        return InputError([Problem("missing_variable", "missing variable 'a'", variable="a")])
    if cls is AuthError:
        return AuthError("invalid API key", status=401, code="invalid_api_key")
    return cls("boom")


@pytest.mark.parametrize(
    "cls", [row[0] for row in HTTP_ERRORS if row[2] != "internal_error"], ids=lambda c: c.__name__
)
def test_what_the_server_answers_the_client_decodes_into_the_same_class(
    cls: type[FlownbError],
) -> None:
    exc = _sample(cls)
    status, code = http_status(exc)
    problems = exc.problems if isinstance(exc, InputError) else ()
    back = from_http(status, code, exc.message, problems=problems, request_id="r1")
    assert type(back) is cls, (status, code, type(back))
    assert back.message == exc.message


def test_unexpected_exceptions_are_500_internal_error_and_decode_as_api_error() -> None:
    assert http_status(RuntimeError("x")) == (500, "internal_error")
    assert http_status(FlowFileError("flow 'x': bad edge")) == (500, "internal_error")
    back = from_http(500, "internal_error", "internal error")
    assert type(back) is ApiError and back.status == 500


def test_an_element_code_wins_over_the_answers_overall_status() -> None:
    # A batch answered 504 (one element timed out) whose other element failed at the provider.
    assert type(from_http(504, "provider_error", "refused")) is ProviderError
    assert type(from_http(504, "upstream_rate_limited", "slow down")) is RateLimited
    assert type(from_http(504, "", "gateway timeout")) is ProviderTimeout


def test_the_server_problem_class_is_a_flownb_error() -> None:
    problem = ApiProblem(404, "not_found", "nothing here")
    assert isinstance(problem, ApiError) and isinstance(problem, FlownbError)
    assert http_status(problem) == (404, "not_found")


def test_remote_flow_not_found_is_built_with_its_status_not_patched() -> None:
    exc = from_http(404, "flow_not_found", "no flow with id 'x'", request_id="abc")
    assert isinstance(exc, FlowNotFound)
    assert (exc.status, exc.request_id) == (404, "abc")
    assert FlowNotFound("local").status is None


def test_retry_after_takes_seconds_and_http_dates_in_one_place() -> None:
    assert parse_retry_after("3") == 3.0
    assert parse_retry_after("0") == 0.0
    assert parse_retry_after("-5") == 0.0
    assert parse_retry_after(None) is None
    assert parse_retry_after("soon") is None
    assert parse_retry_after("nan") is None
    later = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    assert 25 <= (parse_retry_after(later) or 0) <= 31
    # Every parser of the header is this one function.
    for path in ("flownb/flows/client.py", "flownb/providers/vendor.py"):
        text = (ROOT / path).read_text()
        assert "parse_retry_after" in text and "def _retry_after" not in text, path


def test_one_line_shows_any_error_on_one_line() -> None:
    assert one_line(FlowFileError("flow 'x': bad\n  edge")) == "flow 'x': bad edge"
    assert one_line(KeyError("k")) == "KeyError: 'k'"
    assert one_line(RuntimeError()) == "RuntimeError"
    problems = [Problem("unknown_variable", f"unknown variable 'v{i}'") for i in range(12)]
    text = one_line(InputError(problems, total=15))
    assert "\n" not in text
    assert text.startswith("unknown variable 'v0'; unknown variable 'v1'")
    assert text.endswith("; and 5 more problems")
    assert one_line(InputError(problems), code=True).startswith(
        "unknown_variable: unknown variable 'v0'"
    )


def test_service_errors_are_public_and_also_builtin_kinds() -> None:
    assert {"ServiceUnavailable", "ServiceTimeout"} <= set(flownb.__all__)
    assert issubclass(ServiceUnavailable, ConnectionError)
    assert issubclass(ServiceTimeout, TimeoutError)


def test_no_bare_root_error_is_raised_and_no_attribute_is_patched_onto_an_exception() -> None:
    bad = []
    for path in sorted((ROOT / "flownb").rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "FlownbError"
            ):
                bad.append(f"{path.name}:{node.lineno}: FlownbError(...)")
            if isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    if (
                        isinstance(t, ast.Attribute)
                        and isinstance(t.value, ast.Name)
                        and t.value.id in ("exc", "err", "error")
                    ):
                        bad.append(f"{path.name}:{node.lineno}: {t.value.id}.{t.attr} = ...")
    assert not bad, bad


def test_client_against_a_closed_port_fails_fast_with_service_unavailable(
    sleeps: list[float],
) -> None:
    port = free_port()  # nothing listens here
    # A backoff of 60 s: a retry after backing off would wait up to 20 s.
    client = Client(f"http://127.0.0.1:{port}", api_key="fnb_test", backoff=60.0)
    for call in (lambda: client.get_flow_info("echo"), lambda: client.run("echo", {"a": "x"})):
        with pytest.raises(ServiceUnavailable, match="refused") as info:
            call()
        assert f"127.0.0.1:{port}" in str(info.value)
    assert sleeps == []  # no backoff: a refused port is not a passing state


def test_client_against_a_silent_server_raises_service_timeout() -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:  # accept and never answer
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        port = listener.getsockname()[1]
        client = Client(f"http://127.0.0.1:{port}", api_key="fnb_test", timeout=0.3, max_retries=0)
        with pytest.raises(ServiceTimeout, match=r"no answer within 0\.3 s"):
            client.get_flow_info("echo")
    finally:
        stop.set()
        thread.join(2)
        for conn in accepted:
            conn.close()
        listener.close()
