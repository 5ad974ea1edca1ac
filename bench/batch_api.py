"""Client CPU and memory of a DataFrame sent through the provider's batch API (10,000 and 50,000
rows x 2 nodes: build the lines, upload, read the results into the cache, build the frame),
against the floor measured in the same run: a bare loop that formats the same prompts, dumps the
same JSONL lines with orjson and parses as many result lines, shaped as OpenAI's Batch API (and
the loopback fake) writes them (the whole ``chat.completion`` body, its usage with the two detail
sections), reading each one's text and usage. (Until the fake sent every field OpenAI sends, the
floor's lines held only a text and an empty usage: flownb then read lines about six times the
size of the floor's, which doubled the ratio without a line of flownb changing.)

    python -m bench.batch_api [--rows 10000,50000] [--passes 2]

The loopback fake runs in another process, so only the client's work is counted. CPU time
(``time.process_time``, every thread of the process) and memory (tracemalloc's peak of Python
allocations) are measured in separate passes, for flownb and for the floor alike: tracemalloc
hooks every allocation, which slows allocation-heavy code many times over (a flownb run that
imported the HTTP stack under it took about 25x its untraced CPU, the floor about 4x), so a CPU
figure taken while it traces says more about the allocations than about the time. Each flownb
pass starts from an empty ``FLOWNB_HOME`` (nothing cached, no batch on record). The costs a
process pays once, whatever the number of requests (the lazily imported HTTP stack, the price
table, the first client), are paid by a 10-row warm-up run before the passes and printed on
their own line. flownb's CPU is the best of ``--passes`` passes, the floor's the best of at
least three, interleaved with them (a loaded machine only adds to either; the floor's extra
passes err against flownb).
"""

from __future__ import annotations

import argparse
import gc
import os
import socket
import subprocess
import sys
import tempfile
import time
import tracemalloc
import urllib.request
from collections.abc import Callable

import orjson
import pandas as pd

from bench.flows import two_node_flow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _floor_pass(df: pd.DataFrame) -> int:
    """Do the bare work once: lines out, result lines in. Returns the number of lines."""
    lines = []
    for i, (topic, tone) in enumerate(zip(df["topic"], df["tone"], strict=True)):
        for node, prompt in (
            ("intro", f"Write a {tone} intro about {topic}."),
            ("title", f"A title for {topic}."),
        ):
            body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": prompt}]}
            line = {"custom_id": f"{i}-{node}", "method": "POST", "url": "/v1/chat/completions"}
            line["body"] = body
            lines.append(orjson.dumps(line))
    data = b"\n".join(lines)
    # Result lines as OpenAI's Batch API (and the fake) writes them: the whole chat.completion
    # body, usage with its two detail sections; read for their text and usage.
    results = [orjson.dumps(_result_line(i)) for i in range(len(lines))]
    texts = []
    for r in results:
        body = orjson.loads(r)["response"]["body"]
        texts.append((body["choices"][0]["message"]["content"], body["usage"]))
    assert len(texts) == len(lines) and data
    return len(lines)


def _result_line(i: int) -> dict[str, object]:
    """Return the ``i``-th result line of a batch's output file, shaped as OpenAI sends it."""
    usage = {
        "prompt_tokens": 7,
        "completion_tokens": 9,
        "total_tokens": 16,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }
    message = {"role": "assistant", "content": f"echo {i}", "refusal": None, "annotations": []}
    body = {
        "id": f"chatcmpl-{i}",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "gpt-4o-mini",
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": "stop"}],
        "usage": usage,
        "service_tier": "default",
        "system_fingerprint": "fp_bench",
    }
    response = {"status_code": 200, "request_id": f"req_{i}", "body": body}
    return {"id": f"batch_req_{i}", "custom_id": f"{i}", "response": response, "error": None}


def _measure(work: Callable[[], object], traced: bool) -> float:
    """Run ``work`` once. Returns its CPU seconds (untraced) or its peak traced bytes (traced)."""
    gc.collect()
    if traced:
        tracemalloc.start()
        try:
            work()
            return float(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
    started = time.process_time()
    work()
    return time.process_time() - started


def _flownb_pass(df: pd.DataFrame, traced: bool) -> float:
    """Run ``df`` through the batch API from an empty FLOWNB_HOME. Returns what
    :func:`_measure` returns."""
    import flownb

    with tempfile.TemporaryDirectory() as home:
        os.environ["FLOWNB_HOME"] = home
        flow = flownb.load_flow(two_node_flow())
        out: list[pd.DataFrame] = []
        figure = _measure(
            lambda: out.append(flow.run_dataframe(df, batch_api=True, progress=False)), traced
        )
        assert "error" not in out[0].columns and out[0]["intro"].notna().all()
    return figure


def _frame(rows: int, label: str = "topic number") -> pd.DataFrame:
    return pd.DataFrame(
        {
            "topic": [f"{label} {i}" for i in range(rows)],
            "tone": [("dry", "playful", "earnest")[i % 3] for i in range(rows)],
        }
    )


def _sizes(text: str) -> list[int]:
    return [int(part.replace("_", "")) for part in text.split(",") if part.strip()]


def _wait_for(base: str) -> None:
    for _ in range(200):
        try:
            urllib.request.urlopen(f"{base}/_fake/stats", timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)


def _one_size(rows: int, passes: int) -> tuple[float, float, float, float]:
    """Measure ``rows`` rows: flownb's and the floor's CPU (each the best of ``passes``
    interleaved passes; the floor at least three), then each one's traced peak. Returns
    ``(cpu, floor_cpu, peak, floor_peak)``."""
    df = _frame(rows)
    cpus, floors = [], []
    for _ in range(max(passes, 3)):
        if len(cpus) < passes:
            cpus.append(_flownb_pass(df, traced=False))
        floors.append(_measure(lambda: _floor_pass(df), traced=False))
    peak = _flownb_pass(df, traced=True)
    floor_peak = _measure(lambda: _floor_pass(df), traced=True)
    return min(cpus), min(floors), peak, floor_peak


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Run the benchmark, print its figures and return the ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--rows", type=_sizes, default=[10_000, 50_000], help="sizes, comma-separated"
    )
    parser.add_argument("--passes", type=int, default=2, help="flownb CPU passes per size")
    args = parser.parse_args(argv)
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "flownb.testing.fake_openai", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    figures: dict[int, tuple[float, float, float, float]] = {}
    try:
        _wait_for(base)
        config = urllib.request.Request(
            f"{base}/_fake/config",
            data=orjson.dumps({"batch_seconds": 0.5}),
            headers={"Content-Type": "application/json"},
        )
        urllib.request.urlopen(config, timeout=10).close()
        os.environ.update(
            FLOWNB_PROVIDER="openai",
            OPENAI_BASE_URL=f"{base}/v1",
            OPENAI_API_KEY="sk-bench",
            FLOWNB_BATCH_POLL="0.2",
            FLOWNB_RUNLOG="0",
        )
        import openai  # noqa: F401  - the SDK's import (seconds, once a process) is not counted

        once = _flownb_pass(_frame(10, "warm-up topic"), traced=False)
        for rows in args.rows:
            figures[rows] = _one_size(rows, args.passes)
    finally:
        server.terminate()
        server.wait(timeout=10)
    mib = 1024 * 1024
    print(f"  once a process (10-row warm-up: imports, price table, client): CPU {once:.2f} s")
    ratios: dict[str, float] = {}
    for rows, (cpu, floor_cpu, peak, floor_peak) in figures.items():
        calls = 2 * rows
        print(f"batch API: {rows} rows x 2 text nodes = {calls} requests")
        print(
            f"  flownb: CPU {cpu:.2f} s ({cpu / calls * 1e6:.0f} us/request), "
            f"peak {peak / mib:.0f} MiB"
        )
        print(
            f"  floor:  CPU {floor_cpu:.2f} s, peak {floor_peak / mib:.0f} MiB "
            "(lines out, results in)"
        )
        size = f"{rows // 1000}k rows"
        ratios[f"client CPU / bare JSONL loop, {size}"] = cpu / floor_cpu
        ratios[f"peak memory / bare JSONL loop, {size}"] = peak / floor_peak
    for name, ratio in ratios.items():
        print(f"  ratio {name:48s} {ratio:5.2f}x")
    return ratios


if __name__ == "__main__":
    main()
