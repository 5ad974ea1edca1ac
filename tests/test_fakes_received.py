"""Every fake reports every request it received: a DataFrame run through each vendor's fake
shows up in its ``received`` request by request (path, query, headers, body)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

import flownb
from bench.crash_rerun import unread_answers
from flownb.testing.fake_anthropic import FakeAnthropic
from flownb.testing.fake_gemini import FakeGemini
from flownb.testing.fake_openai import FakeOpenAI
from tests.conftest import make_flow

_MODELS = {
    "openai": "gpt-4o-mini",
    "anthropic": "claude-3-5-haiku-latest",
    "gemini": "gemini-2.0-flash",
}
_ENV = {"openai": "OPENAI", "anthropic": "ANTHROPIC", "gemini": "GEMINI"}
_FAKES: dict[str, type[FakeOpenAI]] = {
    "openai": FakeOpenAI,
    "anthropic": FakeAnthropic,
    "gemini": FakeGemini,
}


@pytest.mark.parametrize("provider", sorted(_FAKES))
def test_each_fake_reports_every_request_of_a_dataframe_run(
    provider: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    flow = make_flow({"A": "first about {topic}", "B": "second about {topic}"}, ["topic"])
    for node in flow["nodes"]:
        if node["type"] == "actionNode":
            node["data"]["modelParams"] = {"model": _MODELS[provider]}
    topics = [f"topic{i}" for i in range(5)]
    with _FAKES[provider]() as fake:
        prefix = _ENV[provider]
        monkeypatch.setenv(f"{prefix}_BASE_URL", fake.url)
        monkeypatch.setenv(f"{prefix}_API_KEY", "test-key-0123456789")
        f = flownb.load_flow(flow, provider=provider, cache=False)
        out = f.run_dataframe(pd.DataFrame({"topic": topics}), progress=False)
        sent = fake.settled_stats()["requests"]
        received = fake.received
    assert len(out) == 5 and out["A"].notna().all() and out["B"].notna().all()
    assert sent == 10
    assert len(received) == sent == len(fake.requests)
    for entry in received:
        assert set(entry) == {"path", "query", "headers", "body"}
        assert isinstance(entry["query"], dict) and isinstance(entry["headers"], dict)
    # Each vendor nests the prompt its own way: look for it anywhere in the body.
    bodies = [repr(entry["body"]) for entry in received]
    for word in ("first", "second"):
        for topic in topics:
            assert sum(f"{word} about {topic}" in b for b in bodies) == 1, (word, topic)


_CLIENT = """
import http.client, json, sys, time
conn = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]))
def ask(prompt):
    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": prompt}]}
    conn.request("POST", "/v1/chat/completions", json.dumps(body),
                 {"Content-Type": "application/json", "Authorization": "Bearer sk-test"})
ask("read")
conn.getresponse().read()
ask("unread")  # its answer is left in the socket
print("asked", flush=True)
time.sleep(600)
"""


def test_an_answer_a_killed_client_never_read_is_told_apart() -> None:
    """What the crash benchmark counts as still in the kernel at a kill: a client (another
    process, stopped) has read its first answer and not its second; the fake's last answer per
    connection and the client's sockets' unread bytes in /proc name exactly the second."""
    if not Path("/proc/self/net/tcp").exists():
        pytest.skip("needs Linux's /proc")
    with FakeOpenAI() as fake:
        client = subprocess.Popen(
            [sys.executable, "-c", _CLIENT, str(fake.port)], stdout=subprocess.PIPE, text=True
        )
        try:
            assert client.stdout is not None and client.stdout.readline() == "asked\n"
            deadline = time.monotonic() + 60
            while fake.answered_prompts != ["read", "unread"]:  # written to its socket
                assert time.monotonic() < deadline, fake.answered_prompts
                time.sleep(0.01)
            client.send_signal(signal.SIGSTOP)
            assert unread_answers(client.pid, fake) == {"unread"}
        finally:
            client.kill()
            client.wait()


def test_a_stopped_loopback_server_leaves_no_event_loop_open() -> None:
    # Every fake serves on one. An open loop is reported (ResourceWarning) whenever it is
    # collected, in whatever test runs then: one recording warnings found it among its own.
    import gc
    import warnings

    from aiohttp import web

    from flownb.testing.loopback import LoopbackServer

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with LoopbackServer(web.Application) as server:
            loop = server.loop
        assert loop is not None and loop.is_closed()
        del server, loop
        gc.collect()
    assert [str(w.message) for w in caught if "event loop" in str(w.message)] == []
