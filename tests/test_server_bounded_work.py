"""Issue 20, server items: work per request is bounded by what a provider would accept, a run
whose client went away is cancelled, and a stopping server does not wait on runs in flight.

Real uvicorn servers on 127.0.0.1: in a thread (``tests/serving.py``), and ``flownb serve`` in a
subprocess for the shutdown. Conditions and counts are checked, with generous deadlines.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import pytest
import requests

import flownb
from flownb.errors import InputError
from flownb.server import KeyStore
from tests.conftest import make_flow, write_flow
from tests.serving import InlineScriptedProvider, ScriptedProvider, free_port, run_server

pytestmark = pytest.mark.timeout(180)

NINE_MIB = "x" * (9 * 1024 * 1024)
PICTURE = make_flow({"Picture": "A picture of {topic}"}, ["topic"], images=("Picture",))
ECHO = make_flow({"say": "{topic}"}, ["topic"])


def wait_for(condition: Callable[[], bool], what: str, deadline: float = 60) -> None:
    """Poll ``condition`` until it holds; fail naming ``what`` after ``deadline`` seconds."""
    end = time.monotonic() + deadline
    while not condition():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


@contextmanager
def healthz_answers(url: str) -> Iterator[list[int]]:
    """Poll ``/healthz`` in a thread while the block runs; yield the statuses (a poll that does
    not answer within 10 s counts as 0)."""
    statuses: list[int] = []
    stop = threading.Event()

    def poll() -> None:
        with requests.Session() as s:
            while not stop.is_set():
                try:
                    statuses.append(s.get(f"{url}/healthz", timeout=10).status_code)
                except requests.RequestException:
                    statuses.append(0)
                stop.wait(0.02)

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    try:
        yield statuses
    finally:
        stop.set()
        thread.join(30)


@pytest.fixture
def flows(tmp_path: Path) -> Path:
    d = tmp_path / "flows"
    d.mkdir()
    write_flow(d / "picture.json", PICTURE)
    write_flow(d / "echo.json", ECHO)
    return d


def test_a_9_mib_value_to_an_image_flow_is_refused_before_any_work(
    flows: Path, flownb_env: Path
) -> None:
    with run_server(flows, flownb_env) as server:
        body = json.dumps({"variables": {"topic": NINE_MIB}}).encode()

        def attack() -> requests.Response:
            return requests.post(
                f"{server.url}/api/flows/run/picture",
                data=body,
                headers={"x-api-key": server.key, "content-type": "application/json"},
                timeout=120,
            )

        with healthz_answers(server.url) as statuses, ThreadPoolExecutor(3) as pool:
            answers = list(pool.map(lambda _: attack(), range(3)))
        for r in answers:
            assert r.status_code == 422, r.text[:500]
            data = r.json()
            assert data["code"] == "prompt_too_long"
            assert "over the limit of 4,000 for image prompts" in data["message"]
            assert data["errors"][0]["variable"] == "topic"
            assert len(r.content) < 4096  # the value is not echoed
        assert statuses and set(statuses) == {200}, statuses
        media = server.config.media.directory
        assert not media.exists() or not any(media.iterdir())  # nothing was drawn

        # A batch: every element over the limit is named, and none of the others runs either.
        r = requests.post(
            f"{server.url}/api/flows/run/picture",
            json={"variables": [{"topic": "owls"}, {"topic": "y" * 5000}]},
            headers={"x-api-key": server.key},
            timeout=60,
        )
        assert r.status_code == 422 and r.json()["errors"][0]["index"] == 1
        assert not media.exists() or not any(media.iterdir())
        # A text prompt has a generous limit: the same value well under it runs.
        r = requests.post(
            f"{server.url}/api/flows/run/echo",
            json={"variables": {"topic": "z" * 100_000}},
            headers={"x-api-key": server.key},
            timeout=60,
        )
        assert r.status_code == 200 and r.json()[0]["output"] == "z" * 100_000
        r = requests.post(
            f"{server.url}/api/flows/run/echo",
            data=json.dumps({"variables": {"topic": NINE_MIB}}).encode(),
            headers={"x-api-key": server.key, "content-type": "application/json"},
            timeout=120,
        )
        assert r.status_code == 422
        assert "over the limit of 1,000,000 for text prompts" in r.json()["message"]


def test_the_same_limit_holds_locally_in_one_line(tmp_path: Path) -> None:
    flow = flownb.load_flow(PICTURE, provider="offline")
    with pytest.raises(InputError) as caught:
        flow.run(topic="y" * 5000)
    assert caught.value.code == "prompt_too_long"
    message = flownb.errors.one_line(caught.value)
    assert "the image prompt of node 'Picture' would be 5,013 characters" in message
    assert "over the limit of 4,000" in message and "\n" not in str(caught.value)
    assert flow.run(topic="owls")["Picture"].startswith("file://")

    path = write_flow(tmp_path / "picture.json", PICTURE)
    res = subprocess.run(
        [sys.executable, "-m", "flownb", "run", str(path), "--var", "topic=" + "y" * 5000],
        capture_output=True, text=True, timeout=120, env=os.environ.copy(),
    )  # fmt: skip
    assert res.returncode != 0 and "Traceback" not in res.stderr
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("flownb: error:") and "over the limit of 4,000" in last


def _send_and_hold(url: str, key: str, flow_id: str, variables: object) -> socket.socket:
    """POST a run over a raw socket and return it without reading the answer."""
    host, port = url.removeprefix("http://").split(":")
    body = json.dumps({"variables": variables}).encode()
    sock = socket.create_connection((host, int(port)), timeout=30)
    head = (
        f"POST /api/flows/run/{flow_id} HTTP/1.1\r\nHost: {host}\r\nx-api-key: {key}\r\n"
        f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
    )
    sock.sendall(head.encode() + body)
    return sock


@pytest.mark.parametrize("inline", [True, False], ids=["inline-thread", "async"])
def test_a_run_whose_client_went_away_is_cancelled(
    flows: Path, flownb_env: Path, caplog: pytest.LogCaptureFixture, inline: bool
) -> None:
    # Inline: 100 elements of 0.2 s each in the server's worker thread, 20 s if nothing stops
    # it. Async: 100 calls of 2 s, 16 at a time, about 14 s.
    provider = InlineScriptedProvider(delay=0.2) if inline else ScriptedProvider(delay=2)
    write_flow(flows / "slow.json", make_flow({"say": "SLOW {topic}"}, ["topic"]))
    caplog.set_level(logging.INFO, logger="flownb.server")
    with run_server(flows, flownb_env, provider=provider) as server:
        batch = [{"topic": f"t{i}"} for i in range(100)]
        sock = _send_and_hold(server.url, server.key, "slow", batch)
        wait_for(lambda: sum(provider.calls.values()) >= 2, "the run to start")
        sock.close()
        wait_for(
            lambda: any("went away" in r.getMessage() for r in caplog.records),
            "the server to cancel the run",
        )
        # The run returned only once its thread stopped: the count is final.
        done = sum(provider.calls.values())
        assert done < 100, f"{done} of 100 elements ran for a client that was gone"
        assert provider.in_flight == 0
        assert requests.get(f"{server.url}/healthz", timeout=10).status_code == 200


def test_serve_stops_within_its_shutdown_timeout_with_a_run_in_flight(
    tmp_path: Path, flows: Path, flownb_env: Path
) -> None:
    # A scripted provider is not a serve option: an offline batch of images that takes long.
    key = KeyStore(flownb_env).create("t")
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "flownb", "serve", "--flows", str(flows), "--port", str(port),
         "--shutdown-timeout", "2", "--log-level", "warning"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ.copy(),
    )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}"

        def up() -> bool:
            try:
                return requests.get(f"{url}/healthz", timeout=2).status_code == 200
            except requests.RequestException:
                return False

        wait_for(up, "the server to start")
        media = flownb_env / "media"
        # 1000 distinct images: many seconds of drawing on two shared cores.
        batch = [{"topic": f"image {i} " + "w" * 3000} for i in range(1000)]
        sock = _send_and_hold(url, key, "picture", batch)
        wait_for(lambda: media.exists() and any(media.iterdir()), "drawing to start")
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)  # a guard only: the count below is the proof
        drawn = len(list(media.iterdir()))
        sock.close()
        # The shutdown timeout (2 s) ended the run: without it the server waits for the batch
        # and draws every image.
        assert drawn < 1000, "the whole batch was drawn before the server stopped"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_prompt_made_long_by_an_upstream_output_is_refused_before_its_call() -> None:
    # "Draft" (text) echoes the topic offline; "Picture" draws from the draft twice. The topic
    # alone fits every prompt, so only measuring the rendered prompt can catch it.
    chain = make_flow(
        {"Draft": "{topic}", "Picture": "{Draft} / {Draft}"}, ["topic"], images=("Picture",)
    )
    chain["edges"].append(
        {"id": "e-chain", "source": "node-Draft", "sourceHandle": "output",
         "target": "node-Picture", "targetHandle": "variables"}
    )  # fmt: skip
    flow = flownb.load_flow(chain, provider="offline", log=False)
    assert flow.run(topic="owls")["Picture"].startswith("file://")
    with pytest.raises(InputError) as caught:
        flow.run(topic="y" * 3000)
    message = str(caught.value)
    assert "the image prompt of node 'Picture' would be 6,003 characters" in message
    # The prompt uses no variable directly (only Draft's output): none is blamed.
    assert caught.value.problems[0].variable is None and "variable '" not in message
