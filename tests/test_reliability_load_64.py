"""Issue 10's probe repeated at its concurrency: the load suite's mixed requests (every kind of
valid and invalid request, each answer checked) from 64 concurrent clients against a real
``flownb serve``: no 5xx, no wrong answer, no connection refused or reset, flat memory.

It sends the probe's 10,000 requests from 64 concurrent clients (the load suite's ``drive``:
asyncio tasks on one aiohttp session, each with one request in flight at a time, over 64 kept-open
connections).
"""

from __future__ import annotations

import statistics
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.test_reliability_load import Mix, Outcome, Sampler, drive, loaded_server

pytestmark = pytest.mark.timeout(180)

CONCURRENCY = 64
REQUESTS = 10_000


def _drive(mix: Mix, numbers: range) -> list[Outcome]:
    return drive(mix, numbers, clients=CONCURRENCY, timeout=60)


def test_64_concurrent_mixed_requests_get_no_5xx_and_memory_stays_flat(
    tmp_path: Path, flownb_env: Path
) -> None:
    with loaded_server(tmp_path, "load64") as (server, mix):
        _drive(mix, range(200))  # warm-up
        started = time.monotonic()
        with Sampler(server.process.pid) as sampler:
            outcomes = _drive(mix, range(200, 200 + REQUESTS))
        elapsed = time.monotonic() - started
        assert server.process.poll() is None, "the server died under load"

    statuses = Counter(o.status for o in outcomes)
    bad = [o for o in outcomes if o.problem]
    assert not [o for o in outcomes if o.status >= 500], statuses
    assert not bad, f"{len(bad)} of {len(outcomes)} wrong, e.g.:\n" + "\n".join(
        f"[{o.kind}] {o.problem}" for o in bad[:10]
    )
    samples = sampler.samples
    third = max(1, len(samples) // 3)
    first, last = statistics.median(samples[:third]), statistics.median(samples[-third:])
    mib = 1024 * 1024
    assert last <= first * 1.10 + 8 * mib, f"RSS grew {first / mib:.1f} -> {last / mib:.1f} MiB"
    print(
        f"\nload at {CONCURRENCY}: {REQUESTS} requests in {elapsed:.1f}s "
        f"({REQUESTS / elapsed:.0f} req/s), statuses {dict(statuses)}, "
        f"RSS {first / mib:.1f} -> {last / mib:.1f} MiB"
    )
