"""Back-off that fits the signal: a latency-bound batch (two-node flow, loopback fake OpenAI server
in another process, 50 ms answers, C=32, 1,000 calls) under three kinds of 429, each against its
own ideal and against a bare aiohttp loop measured in the same run.

- **Random 429s**: 10% of calls answered 429 with ``Retry-After: 0`` (a retry succeeds at once),
  in two modes: *instant* (the 429 comes at once, before the latency, as a provider's front door
  refuses) and *delayed* (after the latency, as a busy replica does). Each mode runs ``--repeat``
  times (10) with a different fault pattern each time; the bench reports the **worst** and the
  median of flownb / ideal (ideal: calls x latency / C), of the bare loop / ideal, and of flownb /
  bare loop (the bare loop: aiohttp + Semaphore(C), retrying a 429 after its Retry-After, run
  right after each flownb run on the same pattern). Aim: worst of the runs <= 1.15x ideal with
  instant 429s. A single slow run is what users meet, so the worst is the figure that counts.
- **A concurrency limit**: the server serves at most ``--in-flight`` (8) requests at once and
  answers 429 at once beyond. Ideal: calls x latency / limit. Aims: worst <= 1.10x ideal with
  under 5% of requests answered 429.
- **A rate limit with headers**: ``--rate`` requests per ``--window`` seconds, OpenAI's
  ``x-ratelimit-*`` headers on every answer, 429 beyond. Ideal: calls / rate. Aim: under 5% of
  requests answered 429.

Also shown once: no faults at all (the reference), and 10% 429 + 5% 500 (exponential backoff).
The machine may be shared: the load average is printed, and ratios against the bare loop of the
same run are the figures that others' work skews least.

    python -m bench.backoff [--calls 1000] [--latency 0.05] [--repeat 10]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from typing import Any

from bench.flows import PROMPTS, two_node_flow
from bench.latency_batch import (
    KEY,
    MODEL_PARAMS,
    Server,
    check,
    measure_latency,
    prompts_of,
    timed,
)


def bare_loop(url: str, rows: list[dict[str, str]], concurrency: int) -> float:
    """Return the wall seconds of the same calls through aiohttp + Semaphore(concurrency),
    retrying each 429 after its Retry-After (nothing else: the floor a client can reach)."""
    import aiohttp

    async def go() -> None:
        sem = asyncio.Semaphore(concurrency)
        headers = {"Authorization": f"Bearer {KEY}"}
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(headers=headers, connector=connector) as s:

            async def one(prompt: str) -> None:
                body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": prompt}]}
                while True:
                    async with sem, s.post(url + "/chat/completions", json=body) as resp:
                        await resp.read()
                        if resp.status != 429:
                            return
                        wait = float(resp.headers.get("Retry-After") or 0)
                    await asyncio.sleep(wait)

            await asyncio.gather(*(one(p) for r in rows for p in prompts_of(r)))

    started = time.perf_counter()
    asyncio.run(go())
    return time.perf_counter() - started


def spread(values: list[float]) -> str:
    """Return "worst W (median M)" of ratios."""
    return f"worst {max(values):4.2f} (median {statistics.median(values):4.2f})"


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Run the benchmark, print its figures and return the ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000, help="provider calls per run")
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=10, help="runs per random-429 mode")
    parser.add_argument("--in-flight", type=int, default=8, help="the server's concurrency limit")
    parser.add_argument("--limit-repeat", type=int, default=3, help="runs against that limit")
    parser.add_argument("--rate", type=int, default=100, help="requests per --window")
    parser.add_argument("--window", type=float, default=0.5, help="seconds")
    args = parser.parse_args(argv)

    server = Server(args.latency)
    os.environ.update(
        FLOWNB_HOME=tempfile.mkdtemp(prefix="flownb-bench-"),
        OPENAI_BASE_URL=server.url,
        OPENAI_API_KEY=KEY,
        NO_PROXY="127.0.0.1,localhost",
    )
    for name in ("FLOWNB_CACHE", "FLOWNB_RPM", "FLOWNB_CONCURRENCY", "FLOWNB_OPENAI_TRANSPORT"):
        os.environ.pop(name, None)
    import flownb

    nodes, conc = len(PROMPTS), args.concurrency
    n = max(1, args.calls // nodes)
    calls = n * nodes
    rows = [{"topic": f"topic {i}", "tone": ("dry", "playful", "earnest")[i % 3]} for i in range(n)]
    ratios: dict[str, float] = {}
    base = {"faults": {}, "max_in_flight": None, "rate_limit": None, "retry_after": "0"}

    def run(**config: Any) -> dict[str, Any]:
        server.configure(**{**base, **config})
        server.reset()
        flow = flownb.load_flow(two_node_flow(MODEL_PARAMS), provider="openai", cache=False)
        wall, _, out = timed(lambda: [dict(r) for r in flow.run_batch(rows, concurrency=conc)])
        st = server.stats()
        refused = st["faults"]["429"] + st["limited"]
        return {
            "wall": wall,
            "share": refused / st["requests"],
            "refused": refused,
            "requests": st["requests"],
            "lost": check(out, rows),
        }

    def bare(**config: Any) -> float:
        server.configure(**{**base, **config})
        server.reset()
        return bare_loop(server.url, rows, conc)

    try:
        latency = measure_latency(server.url)
        print(f"load average before: {os.getloadavg()[0]:.2f} (others' work skews wall time)")
        print(
            f"{calls} calls ({n} rows x {nodes} nodes), C={conc}, latency set "
            f"{args.latency * 1e3:.0f} ms, measured {latency * 1e3:.1f} ms",
            flush=True,
        )
        ideal = calls * latency / conc
        clean = run()
        print(f"  no faults: flownb {clean['wall'] / ideal:4.2f}x ideal ({ideal:.2f} s)")
        ratios["no faults: flownb / ideal"] = clean["wall"] / ideal

        for mode, first in (("instant", True), ("delayed", False)):
            ours, floor, against, shares, lost = [], [], [], [], 0
            for i in range(args.repeat):
                fault = {"faults": {"429": 0.1}, "faults_first": first, "seed": i}
                got = run(**fault)
                wall_bare = bare(**fault)
                ours.append(got["wall"] / ideal)
                floor.append(wall_bare / ideal)
                against.append(got["wall"] / wall_bare)
                shares.append(got["share"])
                lost += got["lost"]
            aim = "aim worst <= 1.15" if first else "no aim"
            print(
                f"  10% 429 {mode:7s} x{args.repeat}: flownb/ideal {spread(ours)} ({aim}); "
                f"bare/ideal {spread(floor)}; flownb/bare {spread(against)}; "
                f"429s {statistics.mean(shares):.1%}; lost {lost}",
                flush=True,
            )
            print(f"      flownb/ideal per run: {' '.join(f'{r:.2f}' for r in ours)}")
            ratios[f"10% 429 {mode}: worst flownb / ideal"] = max(ours)
            ratios[f"10% 429 {mode}: median flownb / ideal"] = statistics.median(ours)
            ratios[f"10% 429 {mode}: worst bare / ideal"] = max(floor)
            ratios[f"10% 429 {mode}: worst flownb / bare"] = max(against)

        got = run(faults={"429": 0.1, "500": 0.05}, seed=7)
        print(f"  10% 429 + 5% 500 (delayed): flownb {got['wall'] / ideal:4.2f}x ideal (no aim)")

        limit = args.in_flight
        ideal_limit = calls * latency / limit
        walls, shares = [], []
        for _ in range(args.limit_repeat):
            got = run(max_in_flight=limit)
            walls.append(got["wall"] / ideal_limit)
            shares.append(got["share"])
        print(
            f"  server allows {limit} in flight x{args.limit_repeat}: flownb/ideal({limit}) "
            f"{spread(walls)} (aim worst <= 1.10); 429s worst {max(shares):.1%} (aim < 5%)",
            flush=True,
        )
        ratios[f"{limit} in flight: worst flownb / ideal"] = max(walls)
        ratios[f"{limit} in flight: worst 429 share (aim < 0.05)"] = max(shares)

        rate = args.rate / args.window
        got = run(rate_limit=args.rate, rate_window=args.window)
        print(
            f"  server allows {args.rate} per {args.window:g} s, headers: "
            f"{got['wall'] / (calls / rate):4.2f}x ideal; 429s {got['share']:.1%} (aim < 5%)"
        )
        ratios["rate limit with headers: 429 share (aim < 0.05)"] = got["share"]
        print(f"load average after: {os.getloadavg()[0]:.2f}")
    finally:
        server.stop()
    return ratios


if __name__ == "__main__":
    main()
