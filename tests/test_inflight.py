"""A call sent is a call paid: stopping a run lets the calls in flight end, into the cache and
the run log, so the next run buys none of them again.

Each surface is stopped while the loopback fake (a set latency per answer) holds calls in
flight, then the same work runs again; the fake counts every request over both runs, and no
prompt may have been asked twice:

- ``flownb run --csv`` in a subprocess, stopped by SIGINT: it announces the calls it waits for,
  keeps their rows and counts them in its cost line;
- ``run_dataframe`` interrupted by a real SIGINT, as Jupyter's "interrupt kernel" sends it: it
  returns at once, and the calls end in the background;
- ``flownb serve``'s event stream (real uvicorn), whose client goes away mid-answer: the server
  finishes the call without it.
"""

from __future__ import annotations

import asyncio
import contextlib
import csv
import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pandas as pd
import pytest
import requests

import flownb
from flownb.frames.run import INTERRUPTED
from flownb.testing.fake_openai import FakeOpenAI, echo
from tests.cli_inprocess import run_cli
from tests.conftest import make_flow, write_flow
from tests.serving import Running, post_run, run_server

pytestmark = pytest.mark.timeout(120)

SAY = make_flow({"say": "say {word}"}, ["word"])
FAKE_KEY = "sk-fake-inflight-" + "Xy7" * 12


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    """Poll ``condition`` until it holds; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"still waiting after {timeout:.0f} s: {what}")
        time.sleep(0.01)


def _prompts(fake: FakeOpenAI) -> Counter[str]:
    """How many times the fake was asked each prompt."""
    return Counter(body["messages"][-1]["content"] for body in fake.requests)


def _cached_calls(home: Path) -> int:
    """How many answers the call cache under ``home`` holds on disk (0 before it exists)."""
    try:
        with contextlib.closing(sqlite3.connect(home / "cache.sqlite", timeout=5)) as db:
            return int(db.execute("SELECT count(*) FROM calls").fetchone()[0])
    except sqlite3.Error:
        return 0


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI]:
    # Every answer takes a second: Ctrl-C always finds calls in flight.
    with FakeOpenAI(latency=1.0) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.url)
        monkeypatch.setenv("OPENAI_API_KEY", FAKE_KEY)
        yield server


def _words(n: int) -> list[dict[str, str]]:
    return [{"word": f"w{i}"} for i in range(n)]


def test_ctrl_c_in_flownb_run_waits_for_the_calls_in_flight_and_buys_none_twice(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    rows, concurrency = 40, 8
    flow = write_flow(tmp_path / "say.json", SAY)
    data = tmp_path / "rows.csv"
    with data.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=["word"])
        writer.writeheader()
        writer.writerows(_words(rows))
    out = tmp_path / "out.csv"
    cmd = [
        sys.executable, "-m", "flownb", "run", str(flow), "--csv", str(data),
        "--provider", "openai", "--concurrency", str(concurrency), "--out", str(out),
        "--no-progress",
    ]  # fmt: skip
    first = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True
    )
    try:
        # Ctrl-C once the first calls were answered and a full set is in flight.
        wait_until(
            lambda: (
                fake.stats()["answered"] >= concurrency and fake.stats()["in_flight"] == concurrency
            ),
            "calls in flight",
        )
        first.send_signal(signal.SIGINT)
        _, err = first.communicate(timeout=60)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert first.returncode == 130, err[-2000:]
    waited = re.search(r"waiting for (\d+) calls? in flight, Ctrl-C again to abandon", err)
    assert waited is not None, err[-2000:]
    assert 1 <= int(waited.group(1)) <= concurrency
    sent = fake.stats()
    assert sent["answered"] == sent["requests"], "a request sent was not waited for"
    with out.open(newline="", encoding="utf-8") as fh:
        written = list(csv.DictReader(fh))
    kept = [line for line in written if not line["error"]]
    assert {line["error"] for line in written} == {"", INTERRUPTED}
    assert all(line["say"] == echo(f"say {line['word']}") for line in kept)
    # Every answer bought is a row of the output, and counted in the cost line.
    assert len(kept) == sent["answered"]
    counted = re.search(r"flownb: cost: .* for (\d+) run\(s\)", err)
    assert counted is not None, err[-2000:]
    assert int(counted.group(1)) == len(kept)

    fake.configure(latency=0.0)  # the re-run needs no call held: it only counts purchases
    second = run_cli(*cmd[3:])  # the re-run, in this process: only the first needs a signal
    assert second.returncode == 0, second.stderr[-2000:]
    asked = _prompts(fake)
    assert len(asked) == rows and max(asked.values()) == 1, "some call was bought twice"


def test_a_second_ctrl_c_abandons_the_calls_in_flight(tmp_path: Path) -> None:
    with FakeOpenAI(fail_markers={"hang": "slow"}) as slow:  # held until the client leaves
        env = {**os.environ, "OPENAI_BASE_URL": slow.url, "OPENAI_API_KEY": FAKE_KEY}
        flow = write_flow(tmp_path / "say.json", SAY)
        err_path = tmp_path / "err.txt"
        cmd = [
            sys.executable, "-m", "flownb", "run", str(flow), "--var", "word=slow",
            "--provider", "openai",
        ]  # fmt: skip
        with err_path.open("w") as err:
            proc = subprocess.Popen(
                cmd, env=env, stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL
            )
        try:
            wait_until(lambda: slow.stats()["in_flight"] == 1, "the call in flight")
            proc.send_signal(signal.SIGINT)
            wait_until(lambda: "Ctrl-C again to abandon" in err_path.read_text(), "the notice")
            proc.send_signal(signal.SIGINT)
            code = proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert code == 130
        assert slow.stats()["answered"] == 0  # abandoned before its answer came
        assert "waiting for 1 call in flight" in err_path.read_text()
        wait_until(lambda: slow.stats()["in_flight"] == 0, "the fake to see the client leave")


def test_interrupted_run_dataframe_returns_at_once_and_the_calls_end_in_the_background(
    fake: FakeOpenAI, flownb_env: Path
) -> None:
    rows, concurrency = 40, 8
    flow = flownb.load_flow(SAY, provider="openai", name="say", concurrency=concurrency)
    df = pd.DataFrame(_words(rows))
    running = threading.Event()

    def interrupt() -> None:
        # A real SIGINT, as Jupyter's "interrupt kernel" sends it, while a full set of calls
        # is in flight; only while the frame runs, so a stray one cannot stop the session.
        wait_until(
            lambda: (
                fake.stats()["answered"] >= concurrency and fake.stats()["in_flight"] == concurrency
            ),
            "calls in flight",
        )
        if running.is_set():
            os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt, daemon=True).start()
    with pytest.warns(UserWarning, match="already sent finish in the background"):
        running.set()
        try:
            out = flow.run_dataframe(df, progress=False)
        finally:
            running.clear()
    finished = int(out["error"].isna().sum())
    assert 0 < finished < rows and (out["error"].dropna() == INTERRUPTED).all()
    # The calls in flight were sent before Ctrl-C and end after the frame came back: into the
    # cache and the run log, not into the frame.
    wait_until(lambda: fake.stats()["in_flight"] == 0, "the calls in flight")
    sent = fake.stats()["requests"]
    assert sent == fake.stats()["answered"]
    wait_until(lambda: _cached_calls(flownb_env) == sent, "the late answers in the cache")
    wait_until(lambda: len(flownb.runs("say")) == sent, "the late rows in the run log")
    assert finished < sent

    fake.configure(latency=0.0)  # the re-run needs no call held: it only counts purchases
    again = flow.run_dataframe(df, progress=False)
    assert list(again["say"]) == [echo(f"say w{i}") for i in range(rows)]
    asked = _prompts(fake)
    assert len(asked) == rows and max(asked.values()) == 1, "some call was bought twice"


@pytest.fixture
def server(
    flownb_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Running, FakeOpenAI]]:
    # One word every 200 ms: the client leaves after the first, with the answer half sent.
    with FakeOpenAI(stream_delay=0.2) as fake:
        monkeypatch.setenv("OPENAI_BASE_URL", fake.url)
        monkeypatch.setenv("OPENAI_API_KEY", FAKE_KEY)
        flows = tmp_path / "flows"
        flows.mkdir()
        write_flow(flows / "story.json", make_flow({"story": "{x}"}, ["x"]))
        with run_server(flows, flownb_env, provider="openai", cache=True, log=True) as running:
            yield running, fake


WORDS = "one two three four five six seven eight nine ten"


def test_a_client_leaving_the_event_stream_does_not_make_the_call_bought_twice(
    server: tuple[Running, FakeOpenAI], flownb_env: Path
) -> None:
    running, fake = server
    resp = requests.post(
        f"{running.url}/api/flows/run/story",
        json={"variables": {"x": WORDS}},
        headers={"x-api-key": running.key, "Accept": "text/event-stream"},
        stream=True,
        timeout=60,
    )
    assert resp.status_code == 200
    lines = resp.iter_lines(chunk_size=None)  # type: ignore[call-overload]
    assert next(line for line in lines if line.startswith(b"event: ")) == b"event: text"
    resp.close()  # the client goes away with the answer half streamed
    # The server finishes the call without it: answered, cached and logged.
    _finished_then_served_from_the_cache(running, fake, flownb_env)


def test_a_client_leaving_a_plain_run_does_not_make_the_call_bought_twice(
    flownb_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FakeOpenAI(latency=2.0) as fake:
        monkeypatch.setenv("OPENAI_BASE_URL", fake.url)
        monkeypatch.setenv("OPENAI_API_KEY", FAKE_KEY)
        flows = tmp_path / "flows"
        flows.mkdir()
        write_flow(flows / "story.json", make_flow({"story": "{x}"}, ["x"]))
        with run_server(flows, flownb_env, provider="openai", cache=True, log=True) as running:
            # The client gives up while the call is in flight (its read times out).
            with pytest.raises(requests.exceptions.ReadTimeout):
                requests.post(
                    f"{running.url}/api/flows/run/story",
                    json={"variables": {"x": WORDS}},
                    headers={"x-api-key": running.key},
                    timeout=(5, 0.5),
                )
            _finished_then_served_from_the_cache(running, fake, flownb_env)


def _finished_then_served_from_the_cache(running: Running, fake: FakeOpenAI, home: Path) -> None:
    """Wait until the server has finished the one call its client left (answered, cached and
    logged), then check that the same run is answered from the cache, with no second request."""
    wait_until(lambda: fake.stats()["answered"] == 1, "the call's end")
    wait_until(lambda: _cached_calls(home) == 1, "the answer in the cache")
    wait_until(lambda: len(flownb.runs("story")) == 1, "the run in the run log")
    again = post_run(running, "story", {"x": WORDS})
    assert again.status_code == 200, again.text
    assert again.json() == [{"name": "story", "type": "output", "output": echo(WORDS)}]
    assert fake.stats()["requests"] == 1, "the call was bought twice"


# -- a row's nodes side by side: some waiting to be sent, others in flight -----------------------

PAIR = make_flow({"first": "first {word}", "second": "second {word}"}, ["word"])
TRIO = make_flow(
    {"first": "first {word}", "second": "second {word}", "third": "third {word}"}, ["word"]
)


class _Hold:
    """A gate that holds the calls of the node whose prompts start with ``node`` (it never
    opens for them: only a cancellation ends their wait) and lets the others through."""

    def __init__(self, node: str) -> None:
        self.node = node + " "
        self.ended = 0  # holds ended (by a cancellation)

    def __call__(self, call: object) -> contextlib.AbstractAsyncContextManager[object]:
        return self._gate(str(getattr(call, "prompt", "")).startswith(self.node))

    @contextlib.asynccontextmanager
    async def _gate(self, hold: bool) -> AsyncIterator[object]:
        if hold:
            try:
                await asyncio.Event().wait()
            finally:
                self.ended += 1
        yield lambda _gen: None


def _cancel_with_calls_in_flight(
    fake: FakeOpenAI, flow_d: dict, hold: str, in_flight: int, times: int
) -> None:
    """Run one row of ``flow_d`` with node ``hold`` held by the gate, and cancel the run
    ``times`` times once ``in_flight`` of its calls are in flight: once is Ctrl-C, twice
    abandons the calls in flight."""
    flow = flownb.load_flow(flow_d, provider="openai")
    gate = _Hold(hold)

    async def go() -> None:
        task = asyncio.ensure_future(
            flow.engine.run_async([{"word": "owl"}], lambda *_: None, 4, gate=gate)
        )
        while fake.stats()["in_flight"] < in_flight:
            await asyncio.sleep(0.01)
        task.cancel()
        while not gate.ended:  # the stop has ended the held call's wait
            await asyncio.sleep(0.01)
        if times == 2:
            task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await flow.provider.aclose()

    asyncio.run(go())


def test_a_stopped_row_waits_for_its_other_node_in_flight(
    fake: FakeOpenAI, flownb_env: Path
) -> None:
    # The row's first node waits to be sent (the stop ends that wait) while its second is in
    # flight: the run waits for that answer and keeps it.
    _cancel_with_calls_in_flight(fake, PAIR, "first", in_flight=1, times=1)
    # Settled: the fake counts an answer once written, when the run may have read it already.
    sent = fake.settled_stats()
    assert sent["requests"] == sent["answered"] == 1
    assert _prompts(fake) == {"second owl": 1}
    assert _cached_calls(flownb_env) == 1
    fake.configure(latency=0.0)
    result = flownb.load_flow(PAIR, provider="openai").run(word="owl")
    assert result.cached == {"second"}
    assert _prompts(fake) == {"second owl": 1, "first owl": 1}, "a call was bought twice"


def test_an_abandoned_row_does_not_wait_for_its_nodes_in_flight(
    fake: FakeOpenAI, flownb_env: Path
) -> None:
    # Two of the row's nodes in flight, the third waiting: Ctrl-C twice gives up both answers
    # (they would take a minute) rather than waiting for either.
    fake.configure(latency=60.0)
    _cancel_with_calls_in_flight(fake, TRIO, "third", in_flight=2, times=2)
    assert fake.stats()["requests"] == 2
    assert fake.stats()["answered"] == 0
    assert _cached_calls(flownb_env) == 0
