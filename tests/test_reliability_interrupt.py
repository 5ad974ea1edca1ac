"""Interrupt and resume: a batch stopped part-way, then run again, pays only for what is missing.

The loopback fake answers the first rows of the batch at once and holds every call of the later
rows (their topic carries a marker the fake hangs on), so the moment of the interruption is
exact: all calls of the first rows answered, nothing else. The batch is stopped there — by
Ctrl-C in-process (``KeyboardInterrupt``) and by ``SIGKILL`` of a ``flownb run --csv`` process
— and run again with the fake healthy. The fake records every request: the second run must not
ask for any call of the rows the first run finished (the call cache makes them free), must ask
for each call of the other rows once, and must yield the complete, correct result.
"""

from __future__ import annotations

import contextlib
import csv
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest

import flownb
from flownb.testing.fake_openai import FakeOpenAI, echo, image_bytes
from tests.conftest import FLOWS
from tests.reliability.exposure import Exposure, record

pytestmark = pytest.mark.timeout(120)

ROWS = 60
DONE = 30  # rows 0..DONE-1 are answered; the others hang until the interruption
HANG = "HANGROW"
FAKE_KEY = "sk-fake-interrupt-" + "Zq8" * 12


def _rows(tag: str) -> list[dict[str, str]]:
    return [
        {"topic": f"{tag} topic {i}" + (f" {HANG}" if i >= DONE else ""), "tone": f"tone {i % 3}"}
        for i in range(ROWS)
    ]


def _prompts(row: dict[str, str]) -> set[str]:
    """The two prompts blog-intro sends for ``row``: the text node's and the image node's."""
    topic, tone = row["topic"], row["tone"]
    return {
        f"Write a {tone} two-sentence intro for a blog post about {topic}.",
        f"A {tone} watercolour illustration of {topic}",
    }


def _matches(row: dict[str, str], got: Mapping[str, str]) -> bool:
    """Whether ``got`` holds the fake's answers for ``row``: the echoed intro, and the fake's
    image, which flownb keeps in its media (a file:// URL), compared by its bytes."""
    topic, tone = row["topic"], row["tone"]
    intro = echo(f"Write a {tone} two-sentence intro for a blog post about {topic}.")
    image = image_bytes(f"A {tone} watercolour illustration of {topic}")
    url = got.get("header_image", "")
    if got.get("intro") != intro or not url.startswith("file://"):
        return False
    return Path(unquote(urlsplit(url).path)).read_bytes() == image


def _requested(fake: FakeOpenAI) -> list[str]:
    """The prompt of every request the fake received, in order."""
    out = []
    for body in fake.requests:
        if "messages" in body:
            out.append(body["messages"][-1]["content"])
        else:
            out.append(body["prompt"])
    return out


def _cached_calls(home: Path) -> int:
    """How many answers the call cache under ``home`` holds on disk (0 before it exists)."""
    try:
        with contextlib.closing(sqlite3.connect(home / "cache.sqlite", timeout=5)) as db:
            return int(db.execute("SELECT count(*) FROM calls").fetchone()[0])
    except sqlite3.Error:  # not created yet, or its table not made yet
        return 0


def _when_stalled(fake: FakeOpenAI, home: Path, answered: int, then: Callable[[], None]) -> None:
    """In a thread: once the fake has answered ``answered`` calls and every one of them is in
    the call cache on disk, call ``then``; after 60 s call it anyway (the test then fails on
    its checks)."""

    def watch() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and fake.stats()["answered"] < answered:
            time.sleep(0.02)
        while time.monotonic() < deadline and _cached_calls(home) < answered:
            time.sleep(0.02)
        then()

    threading.Thread(target=watch, name="interrupter", daemon=True).start()


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Any:
    with FakeOpenAI(latency=0.01, fail_markers={"hang": HANG}) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.url)
        monkeypatch.setenv("OPENAI_API_KEY", FAKE_KEY)
        # Held calls stay held until interrupted (an attempt that times out is tried again), and
        # once interrupted they end within one attempt's timeout: the re-run waits for them.
        monkeypatch.setenv("FLOWNB_TIMEOUT", "5")
        yield server


def _check_resume(fake: FakeOpenAI, rows: list[dict[str, str]]) -> None:
    """The second run (whose requests are all the fake recorded since its reset) asked exactly
    for the calls of the unfinished rows, each once."""
    again = _requested(fake)
    finished = set().union(*(_prompts(r) for r in rows[:DONE]))
    missing = set().union(*(_prompts(r) for r in rows[DONE:]))
    repaid = [p for p in again if p in finished]
    assert not repaid, f"{len(repaid)} calls of finished rows were paid again, e.g. {repaid[:3]}"
    assert sorted(again) == sorted(missing), (
        f"the re-run asked for {len(again)} calls; expected the {len(missing)} unfinished ones once"
    )


def test_ctrl_c_then_rerun_pays_only_for_unfinished_rows(
    fake: FakeOpenAI, flownb_env: Path
) -> None:
    rows = _rows("inproc")
    flow = flownb.load_flow(FLOWS / "blog-intro.json", provider="openai", concurrency=4)
    running = threading.Event()

    def ctrl_c() -> None:
        # A real SIGINT, as a terminal's Ctrl-C or Jupyter's "interrupt kernel" sends (it wakes
        # the blocked main thread; _thread.interrupt_main would not). Only while the batch runs,
        # so a stray KeyboardInterrupt cannot abort the test session.
        if running.is_set():
            os.kill(os.getpid(), signal.SIGINT)

    _when_stalled(fake, flownb_env, 2 * DONE, ctrl_c)
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        running.set()
        try:
            flow.run_batch(rows)
        finally:
            running.clear()
    assert time.monotonic() - started < 30, "Ctrl-C did not stop the batch promptly"
    assert fake.stats()["answered"] == 2 * DONE

    fake.reset()
    fake.configure(fail_markers={})
    again = flownb.load_flow(FLOWS / "blog-intro.json", provider="openai", concurrency=4)
    results = again.run_batch(rows)
    assert all(_matches(row, r) for row, r in zip(rows, results, strict=True))
    # The finished rows came from the cache, and say so.
    assert all(set(r.cached) == {"intro", "header_image"} for r in results[:DONE])
    assert not any(r.cached for r in results[DONE:])
    _check_resume(fake, rows)


def test_sigkill_of_cli_run_then_rerun_pays_only_for_unfinished_rows(
    fake: FakeOpenAI, tmp_path: Path, flownb_env: Path
) -> None:
    rows = _rows("cli")
    data = tmp_path / "rows.csv"
    with data.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=["topic", "tone"])
        writer.writeheader()
        writer.writerows(rows)
    out = tmp_path / "out.csv"
    cmd = [
        sys.executable, "-m", "flownb", "run", str(FLOWS / "blog-intro.json"), "--csv", str(data),
        "--provider", "openai", "--concurrency", "4", "--out", str(out), "--no-progress",
    ]  # fmt: skip
    env = dict(os.environ)
    logs = tmp_path / "logs"
    logs.mkdir()
    with (logs / "run1.out").open("wb") as o, (logs / "run1.err").open("wb") as e:
        first = subprocess.Popen(cmd, env=env, stdout=o, stderr=e, stdin=subprocess.DEVNULL)
    # Killed once every answer is on disk: none of them may be bought again.
    _when_stalled(fake, flownb_env, 2 * DONE, lambda: first.send_signal(signal.SIGKILL))
    try:
        code = first.wait(timeout=90)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert code == -signal.SIGKILL, f"the first run was not killed but ended with {code}"
    assert fake.stats()["answered"] == 2 * DONE
    assert not out.exists(), "the killed run wrote its output file"

    fake.reset()
    fake.configure(fail_markers={})
    second = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=90, check=False)
    (logs / "run2.out").write_text(second.stdout)
    (logs / "run2.err").write_text(second.stderr)
    record(Exposure("interrupt", {FAKE_KEY}, [flownb_env, logs], []))
    assert second.returncode == 0, second.stderr[-2000:]

    with out.open(newline="", encoding="utf-8") as fh:
        written = list(csv.DictReader(fh))
    assert len(written) == ROWS
    for row, line in zip(rows, written, strict=True):
        assert line["topic"] == row["topic"] and line["tone"] == row["tone"]
        assert _matches(row, line)
    _check_resume(fake, rows)
