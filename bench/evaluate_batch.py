"""Evaluation at scale, two figures, each against a reference measured in the same run.

1. Latency: two prompt variants x 1,000 rows of a two-node flow plus one judge call per
   (variant, row), against the loopback fake OpenAI server (another process) answering after
   50 ms, at C=32. Every call of both variants and the judge shares one limit, so the ideal is
   ``calls x measured latency / 32``; aim: at most 1.2x. Also against bare aiohttp making the
   same number of calls in the same run (on a loaded machine both drift from the ideal). A
   second run must make 0 calls.
2. Memory: 100,000 rows x 2 variants, offline, deterministic scorers; tracemalloc's peak
   during ``evaluate`` over the deep size of the input frame plus the results frame. Aim: at
   most 3x.

    python -m bench.evaluate_batch [--rows 1000] [--latency 0.05] [--memory-rows 100000]
"""

from __future__ import annotations

import argparse
import gc
import os
import tempfile
import time
import tracemalloc

import pandas as pd

from bench.flows import two_node_flow
from bench.latency_batch import KEY, MODEL_PARAMS, Server, measure_latency, run_aiohttp

CONCURRENCY = 32


def _frame(n: int) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "topic": [f"topic number {i}" for i in range(n)],
            "tone": [("dry", "playful", "earnest")[i % 3] for i in range(n)],
        }
    )


def latency_part(rows: int, latency_set: float) -> dict[str, float]:
    """Run the latency-bound evaluation twice; return its ratios."""
    server = Server(latency_set)
    os.environ.update(
        FLOWNB_HOME=tempfile.mkdtemp(prefix="flownb-bench-eval-"),
        OPENAI_BASE_URL=server.url,
        OPENAI_API_KEY=KEY,
        NO_PROXY="127.0.0.1,localhost",
    )
    for name in ("FLOWNB_CACHE", "FLOWNB_RPM", "FLOWNB_CONCURRENCY"):
        os.environ.pop(name, None)
    import flownb
    from flownb import scorers as S

    try:
        server.configure(replies={S.JUDGE_MARKER: '{"score": {score}, "reason": "bench"}'})
        latency = measure_latency(server.url)
        base = flownb.load_flow(two_node_flow(MODEL_PARAMS), provider="openai")
        variants = {
            "base": base,
            "terse": base.with_prompts({"intro": "One {tone} line about {topic}."}),
        }
        data = _frame(rows)
        judge = S.judge("intro", "Is this about {topic} and {tone}?", provider="openai")
        run = lambda: flownb.evaluate(  # noqa: E731
            variants, data, [judge], concurrency=CONCURRENCY, progress=False
        )
        server.reset()
        started = time.perf_counter()
        report = run()
        wall = time.perf_counter() - started
        calls = server.stats()["requests"]
        ideal = calls * latency / CONCURRENCY
        scored = int(report.results["judge_intro"].notna().sum())
        print(
            f"latency: 2 variants x {rows} rows x 2 nodes + 1 judge per (variant, row), "
            f"C={CONCURRENCY}, latency measured {latency * 1e3:.1f} ms"
        )
        print(f"  calls {calls}, ideal {ideal:.2f} s, wall {wall:.2f} s, judged {scored} rows")
        # The floor on this machine right now: bare aiohttp + Semaphore making the same number
        # of calls (a loaded machine slows both; the ratio to it shows flownb's own cost).
        rows_for_floor = [{"topic": f"floor {i}", "tone": "dry"} for i in range(calls // 2)]
        server.reset()
        started = time.perf_counter()
        run_aiohttp(server.url, rows_for_floor, CONCURRENCY)
        floor = time.perf_counter() - started
        print(f"  bare aiohttp + Semaphore, same {calls} calls: {floor:.2f} s")
        server.reset()
        started = time.perf_counter()
        again = run()
        wall2 = time.perf_counter() - started
        calls2 = server.stats()["requests"]
        same = again.results["judge_intro"].equals(report.results["judge_intro"])
        print(f"  second run: {calls2} provider calls, {wall2:.2f} s, same scores: {same}")
        return {
            "evaluate wall / ideal (C=32)": wall / ideal,
            "evaluate wall / bare aiohttp floor, same calls": wall / floor,
            "evaluate second run provider calls": float(calls2),
        }
    finally:
        server.stop()


def memory_part(rows: int) -> dict[str, float]:
    """Run the offline 2-variant evaluation under tracemalloc; return the peak ratio."""
    os.environ["FLOWNB_HOME"] = tempfile.mkdtemp(prefix="flownb-bench-evalmem-")
    import flownb
    from flownb import scorers as S

    base = flownb.load_flow(two_node_flow(), provider="offline")
    variants = {"base": base, "terse": base.with_prompts({"intro": "One {tone} line: {topic}."})}
    data = _frame(rows)
    scorers = [
        S.contains("intro", S.col("topic")),
        S.length("intro", max=60),
        S.regex("title", r"\btitle\b"),
    ]
    input_size = data.memory_usage(deep=True).sum()
    gc.collect()
    tracemalloc.start()
    base_mem, _ = tracemalloc.get_traced_memory()
    started = time.perf_counter()
    report = flownb.evaluate(variants, data, scorers, progress=False)
    wall = time.perf_counter() - started
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    results_size = report.results.memory_usage(deep=True).sum()
    assert len(report.results) == 2 * rows and report.results["error"].isna().all()
    mib = 1024 * 1024
    extra = peak - base_mem
    print(
        f"memory: {rows} rows x 2 variants, offline, 3 scorers: input {input_size / mib:.1f} MiB, "
        f"results {results_size / mib:.1f} MiB, peak {extra / mib:.1f} MiB "
        f"({wall:.1f} s under tracemalloc)"
    )
    return {"evaluate peak / (input + results frames)": extra / (input_size + results_size)}


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Run both parts, print their figures and return the ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--memory-rows", type=int, default=100_000)
    args = parser.parse_args(argv)
    ratios = latency_part(args.rows, args.latency)
    ratios.update(memory_part(args.memory_rows))
    for name, ratio in ratios.items():
        print(f"  ratio {name:48s} {ratio:6.2f}")
    return ratios


if __name__ == "__main__":
    main()
