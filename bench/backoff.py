"""Back-off that fits the signal: a latency-bound batch (two-node flow, loopback fake OpenAI server
in another process, 50 ms answers, C=32) under three kinds of 429, each against its own ideal
measured in the same run.

- **Random 429s**: 10% of calls answered 429 with ``Retry-After: 0`` (a retry succeeds at once).
  Ideal: N x nodes x latency / C. Aim: at most 1.25x (the 429s themselves cost about 1.11x).
  Also shown: the same with 5% 500s on top (exponential backoff), and no faults at all.
- **A concurrency limit**: the server serves at most ``--in-flight`` (8) requests at once and
  answers 429 beyond. Ideal: calls x latency / limit. Aims: throughput converges to the limit
  (ratio near 1) with under 5% of requests answered 429.
- **A rate limit with headers**: ``--rate`` requests per ``--window`` seconds, OpenAI's
  ``x-ratelimit-*`` headers on every answer, 429 beyond. Ideal: calls / rate. Aim: under 5% of
  requests answered 429.

    python -m bench.backoff [--rows 1000] [--latency 0.05]
"""

from __future__ import annotations

import argparse
import os
import tempfile
from typing import Any

from bench.flows import PROMPTS, two_node_flow
from bench.latency_batch import KEY, MODEL_PARAMS, Server, check, measure_latency, timed


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Run the benchmark, print its figures and return the ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--in-flight", type=int, default=8, help="the server's concurrency limit")
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

    n, nodes, conc = args.rows, len(PROMPTS), args.concurrency
    rows = [{"topic": f"topic {i}", "tone": ("dry", "playful", "earnest")[i % 3]} for i in range(n)]
    ratios: dict[str, float] = {}

    def run(label: str, ideal: float, aim: str, **config: Any) -> dict[str, Any]:
        server.configure(**config)
        server.reset()
        flow = flownb.load_flow(two_node_flow(MODEL_PARAMS), provider="openai", cache=False)
        wall, _, out = timed(lambda: [dict(r) for r in flow.run_batch(rows, concurrency=conc)])
        st = server.stats()
        refused = st["faults"]["429"] + st["limited"]
        share = refused / st["requests"]
        lost = check(out, rows)
        print(
            f"  {label:46s}{wall:6.2f} s  {wall / ideal:5.2f}x ideal ({aim})  "
            f"429s {refused:4d} = {share:5.1%} of {st['requests']} requests  "
            f"peak in flight {st['peak_in_flight']:3d}  lost {lost}",
            flush=True,
        )
        ratios[f"{label}: wall / ideal ({aim})"] = wall / ideal
        return {"share": share, "lost": lost, "wall": wall, "requests": st["requests"]}

    try:
        latency = measure_latency(server.url)
        print(f"load average before: {os.getloadavg()[0]:.2f} (2 cores; others' work skews wall)")
        print(
            f"{n} rows x {nodes} nodes, C={conc}, latency set {args.latency * 1e3:.0f} ms, "
            f"measured {latency * 1e3:.1f} ms"
        )
        calls = n * nodes
        ideal = calls * latency / conc
        base = {"faults": {}, "max_in_flight": None, "rate_limit": None, "retry_after": "0"}
        clean = run("no faults", ideal, "reference", **base)
        noisy = run(
            "10% 429 (Retry-After: 0)", ideal, "aim <= 1.25", **{**base, "faults": {"429": 0.1}}
        )
        # The fake answers a 429 after the same latency as a success: the refused calls alone
        # take their share of the slots, whatever the client does.
        with_refused = noisy["requests"] * latency / conc
        print(
            f"  10% 429 run / no-fault run: {noisy['wall'] / clean['wall']:.2f}; against the "
            f"ideal counting the refused calls ({with_refused:.2f} s): "
            f"{noisy['wall'] / with_refused:.2f}x (no-fault run: {clean['wall'] / ideal:.2f}x)"
        )
        run(
            "10% 429 + 5% 500",
            ideal,
            "no aim",
            **{**base, "faults": {"429": 0.1, "500": 0.05}, "seed": 7},
        )
        limit = args.in_flight
        got = run(
            f"server allows {limit} in flight",
            calls * latency / limit,
            "aim ~1",
            **{**base, "max_in_flight": limit},
        )
        ratios[f"429 share, {limit} in flight (aim < 0.05)"] = got["share"]
        rate = args.rate / args.window
        got = run(
            f"server allows {args.rate} per {args.window:g} s, headers",
            calls / rate,
            "aim ~1",
            **{**base, "rate_limit": args.rate, "rate_window": args.window},
        )
        ratios["429 share, rate limit with headers (aim < 0.05)"] = got["share"]
    finally:
        server.stop()
    return ratios


if __name__ == "__main__":
    main()
