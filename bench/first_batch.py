"""The first batch of a fresh process: 1,000 calls (500 rows x 2 nodes) at 50 ms, C=32, 10% of
calls answered 429 at once (``Retry-After: 0``), each run in a new Python process (its imports and
``load_flow`` not timed, only ``run_batch``), against the ideal (calls x latency / C) and against
a bare aiohttp loop that retries 429s, also started fresh each time (aiohttp imported untimed).

Also: a fresh process's first 1-row batch against its second one (what the first batch pays for
starting up: imports, client building), the measured latency, and how long after the call to
``run_batch`` the first request reached the fake (its arrival, on the wall clock both processes
share). Aims: worst of ten <= 1.15x ideal, median <= 1.10x; the first request leaves within
50 ms of the call.

    python -m bench.first_batch [--calls 1000] [--latency 0.05] [--repeat 10]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from bench.flows import PROMPTS, two_node_flow
from bench.latency_batch import KEY, MODEL_PARAMS, Server, measure_latency


def _rows(n: int) -> list[dict[str, str]]:
    return [{"topic": f"topic {i}", "tone": ("dry", "playful", "earnest")[i % 3]} for i in range(n)]


def child_flownb(rows: int, concurrency: int, second: bool) -> dict[str, float]:
    """In a fresh process: the wall seconds of the first ``run_batch`` (and of a second one),
    and the wall-clock time of the first call (``called``, for the first request's delay)."""
    import flownb

    flow = flownb.load_flow(two_node_flow(MODEL_PARAMS), provider="openai", cache=False)
    batch = _rows(rows)
    called = time.time()
    started = time.perf_counter()
    out = [dict(r) for r in flow.run_batch(batch, concurrency=concurrency, progress=False)]
    first = time.perf_counter() - started
    result = {"first": first, "rows": float(len(out)), "called": called}
    if second:
        started = time.perf_counter()
        flow.run_batch(_rows(rows), concurrency=concurrency, progress=False)
        result["second"] = time.perf_counter() - started
    return result


def child_bare(rows: int, concurrency: int) -> dict[str, float]:
    """In a fresh process: the wall seconds of the same calls through aiohttp + Semaphore."""
    import aiohttp  # noqa: F401  (imported before the clock starts, as flownb's import is)

    from bench.backoff import bare_loop

    called = time.time()
    return {
        "first": bare_loop(os.environ["OPENAI_BASE_URL"], _rows(rows), concurrency),
        "called": called,
    }


def first_request_delay(server: Server, measured: dict[str, float]) -> float:
    """Return the seconds from the child's call to the first request's arrival at ``server``
    (reset just before the child started)."""
    arrived = server.stats()["first_request_at"]
    return float("nan") if arrived is None else arrived - measured["called"]


def fresh(kind: str, rows: int, concurrency: int, second: bool = False) -> dict[str, float]:
    """Run one child process and return what it measured."""
    env = {**os.environ, "FLOWNB_HOME": tempfile.mkdtemp(prefix="flownb-bench-")}
    code = (
        "import json, sys; from bench import first_batch as b; "
        f"r = b.child_{kind}({rows}, {concurrency}"
        + (f", {second})" if kind == "flownb" else ")")
        + "; print(json.dumps(r))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Run the benchmark, print its figures and return the ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args(argv)

    server = Server(args.latency)
    os.environ.update(OPENAI_BASE_URL=server.url, OPENAI_API_KEY=KEY, NO_PROXY="127.0.0.1")
    for name in ("FLOWNB_CACHE", "FLOWNB_RPM", "FLOWNB_CONCURRENCY", "FLOWNB_OPENAI_TRANSPORT"):
        os.environ.pop(name, None)
    nodes, conc = len(PROMPTS), args.concurrency
    n = max(1, args.calls // nodes)
    ratios: dict[str, float] = {}
    try:
        latency = measure_latency(server.url)
        ideal = n * nodes * latency / conc
        print(f"load average before: {os.getloadavg()[0]:.2f} (others' work skews wall time)")
        print(
            f"{n * nodes} calls ({n} rows x {nodes} nodes), C={conc}, fresh process each run, "
            f"latency measured {latency * 1e3:.1f} ms, ideal {ideal:.2f} s",
            flush=True,
        )
        server.configure(instant_429=0.0, retry_after="0")
        one, one_delay = [], []
        for _ in range(3):
            server.reset()
            one.append(fresh("flownb", 1, conc, second=True))
            one_delay.append(first_request_delay(server, one[-1]))
        tax = statistics.median(r["first"] - r["second"] for r in one)
        print(
            f"  1-row batch, fresh process: first {statistics.median(r['first'] for r in one):.3f}"
            f" s, second {statistics.median(r['second'] for r in one):.3f} s: start-up "
            f"{tax * 1e3:.0f} ms; first request {statistics.median(one_delay) * 1e3:.0f} ms after "
            "the call (aims <= 50 ms)",
            flush=True,
        )
        ratios["first 1-row batch minus second (s)"] = tax
        ours, floor, against, delays, bare_delays = [], [], [], [], []
        for i in range(args.repeat):
            server.configure(instant_429=0.10, retry_after="0", seed=i)
            server.reset()
            got = fresh("flownb", n, conc)
            delays.append(first_request_delay(server, got))
            server.reset()
            bare = fresh("bare", n, conc)
            bare_delays.append(first_request_delay(server, bare))
            ours.append(got["first"] / ideal)
            floor.append(bare["first"] / ideal)
            against.append(got["first"] / bare["first"])
        print(
            f"  10% instant 429s x{args.repeat}: flownb/ideal worst {max(ours):.2f} median "
            f"{statistics.median(ours):.2f} (aims 1.15, 1.10); bare/ideal worst {max(floor):.2f} "
            f"median {statistics.median(floor):.2f}; flownb/bare median "
            f"{statistics.median(against):.2f}",
            flush=True,
        )
        print(f"      flownb/ideal per run: {' '.join(f'{r:.2f}' for r in ours)}")
        print(
            f"      first request after the call: median {statistics.median(delays) * 1e3:.0f} ms,"
            f" worst {max(delays) * 1e3:.0f} ms (aim <= 50 ms); bare loop: median "
            f"{statistics.median(bare_delays) * 1e3:.0f} ms, worst {max(bare_delays) * 1e3:.0f} ms",
            flush=True,
        )
        ratios["fresh 429 run: worst first request after the call (s)"] = max(delays)
        ratios["fresh 429 run: worst flownb / ideal"] = max(ours)
        ratios["fresh 429 run: median flownb / ideal"] = statistics.median(ours)
        ratios["fresh 429 run: median bare / ideal"] = statistics.median(floor)
        ratios["fresh 429 run: median flownb / bare"] = statistics.median(against)
        print(f"load average after: {os.getloadavg()[0]:.2f}")
    finally:
        server.stop()
    return ratios


if __name__ == "__main__":
    main(sys.argv[1:])
