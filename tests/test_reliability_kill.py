"""A crash pays at most once: ``kill -9`` of a ``flownb run --csv`` batch in full flow (answers
arriving every few milliseconds, 429s and 500s being retried), then a re-run, buys again at
most 1% of the answers the provider had already sent (or 2, for a small run).

The loopback fake records the prompt of every answer it sent. The first run is killed the moment
the fake has sent ``KILL_AT`` answers, with no pause before the kill (so whatever the cache had
not committed by then is lost); the answers sent up to the kill are the ones that were paid for.
The re-run, against the same cache, must ask again for hardly any of them, and must produce the
complete, correct output.
"""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from flownb.testing.fake_openai import FakeOpenAI, echo
from tests.conftest import make_flow, write_flow

pytestmark = pytest.mark.timeout(120)

ROWS = 500
PROMPTS = {"intro": "Intro about {topic}.", "title": "Title about {topic}."}
KILL_AT = 600  # answers sent when the first run is killed (of 2 x ROWS calls)
FAKE_KEY = "sk-fake-kill-" + "Xy7" * 12


def _requested_prompts(fake: FakeOpenAI) -> list[str]:
    return [body["messages"][-1]["content"] for body in fake.requests]


def test_kill_9_mid_batch_then_rerun_buys_back_at_most_one_percent(
    tmp_path: Path, flownb_env: Path
) -> None:
    flow = write_flow(tmp_path / "two.json", make_flow(PROMPTS, ["topic"]))
    data = tmp_path / "rows.csv"
    with data.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=["topic"])
        writer.writeheader()
        writer.writerows({"topic": f"topic {i}"} for i in range(ROWS))
    out = tmp_path / "out.csv"
    cmd = [
        sys.executable, "-m", "flownb", "run", str(flow), "--csv", str(data),
        "--provider", "openai", "--concurrency", "8", "--out", str(out), "--no-progress",
    ]  # fmt: skip

    # The conditions: 30 ms answers, 10% 429 (Retry-After: 0) and 5% 500.
    faults = {"429": 0.10, "500": 0.05}
    with FakeOpenAI(latency=0.03, faults=faults, retry_after="0", seed=13) as fake:
        env = {**os.environ, "OPENAI_BASE_URL": fake.url, "OPENAI_API_KEY": FAKE_KEY}
        first = subprocess.Popen(
            cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        paid: list[str] = []

        def kill_when_enough_answered() -> None:
            deadline = time.monotonic() + 90
            while fake.stats()["answered"] < KILL_AT and time.monotonic() < deadline:
                time.sleep(0.001)
            first.send_signal(signal.SIGKILL)
            # Answers sent from here on cannot have been received: they are not "paid".
            paid.extend(fake.answered_prompts)

        killer = threading.Thread(target=kill_when_enough_answered, daemon=True)
        killer.start()
        try:
            _, err = first.communicate(timeout=100)
        finally:
            if first.poll() is None:
                first.kill()
                first.wait()
        killer.join(5)
        assert first.returncode == -signal.SIGKILL, (
            f"the first run was not killed but ended with {first.returncode}: {err[-2000:]!r}"
        )
        assert KILL_AT <= len(paid) < 2 * ROWS, "the kill did not strike mid-batch"
        assert not out.exists()

        fake.reset()
        second = subprocess.run(
            cmd, env=env, capture_output=True, text=True, timeout=100, check=False
        )
        assert second.returncode == 0, second.stderr[-2000:]
        asked_again = set(_requested_prompts(fake))

    with out.open(newline="", encoding="utf-8") as fh:
        written = list(csv.DictReader(fh))
    assert [line["intro"] for line in written] == [
        echo(f"Intro about topic {i}.") for i in range(ROWS)
    ]
    assert [line["title"] for line in written] == [
        echo(f"Title about topic {i}.") for i in range(ROWS)
    ]

    paid_set = set(paid)
    bought_again = paid_set & asked_again
    allowed = max(2, len(paid_set) // 100)
    assert len(bought_again) <= allowed, (
        f"{len(bought_again)} of the {len(paid_set)} answers received before kill -9 were bought "
        f"again (at most {allowed} allowed), e.g. {sorted(bought_again)[:3]}"
    )
    # Nothing was lost either: every call not answered before the kill was made on the re-run.
    every = {p.replace("{topic}", f"topic {i}") for p in PROMPTS.values() for i in range(ROWS)}
    assert every - paid_set <= asked_again
