"""Client CPU and memory of a DataFrame sent through the provider's batch API (50,000 requests:
build the lines, upload, read the results into the cache, build the frame), against the floor
measured in the same run: a bare loop that formats the same prompts, dumps the same JSONL lines
with orjson and parses the same number of result lines.

    python -m bench.batch_api [--rows 25000]

The loopback fake runs in another process, so only the client's work is counted (CPU time:
``time.process_time``; memory: tracemalloc's peak of Python allocations).
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

import orjson
import pandas as pd

from bench.flows import two_node_flow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _floor(df: pd.DataFrame) -> tuple[float, int]:
    """CPU seconds and peak bytes of the bare work: lines out, result lines in."""
    gc.collect()
    tracemalloc.start()
    started = time.process_time()
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
    results = [
        orjson.dumps(
            {
                "custom_id": f"{i}",
                "response": {
                    "status_code": 200,
                    "body": {"choices": [{"message": {"content": f"echo {i}"}}], "usage": {}},
                },
            }
        )
        for i in range(len(lines))
    ]
    texts = [
        orjson.loads(r)["response"]["body"]["choices"][0]["message"]["content"] for r in results
    ]
    cpu = time.process_time() - started
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(texts) == len(lines) and data
    return cpu, peak


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Run the benchmark, print its figures and return the ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=25_000)
    args = parser.parse_args(argv)
    df = pd.DataFrame(
        {
            "topic": [f"topic number {i}" for i in range(args.rows)],
            "tone": [("dry", "playful", "earnest")[i % 3] for i in range(args.rows)],
        }
    )
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "flownb.testing.fake_openai", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(200):
            try:
                urllib.request.urlopen(f"{base}/_fake/stats", timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        config = urllib.request.Request(
            f"{base}/_fake/config",
            data=orjson.dumps({"batch_seconds": 0.5}),
            headers={"Content-Type": "application/json"},
        )
        urllib.request.urlopen(config, timeout=10).close()
        with tempfile.TemporaryDirectory() as home:
            os.environ.update(
                FLOWNB_HOME=home,
                FLOWNB_PROVIDER="openai",
                OPENAI_BASE_URL=f"{base}/v1",
                OPENAI_API_KEY="sk-bench",
                FLOWNB_BATCH_POLL="0.2",
                FLOWNB_RUNLOG="0",
            )
            import openai  # noqa: F401  - the SDK's import (seconds, once a process) is not counted

            import flownb

            flow = flownb.load_flow(two_node_flow())
            gc.collect()
            tracemalloc.start()
            started = time.process_time()
            out = flow.run_dataframe(df, batch_api=True, progress=False)
            cpu = time.process_time() - started
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            assert "error" not in out.columns and out["intro"].notna().all()
    finally:
        server.terminate()
        server.wait(timeout=10)
    floor_cpu, floor_peak = _floor(df)
    calls = 2 * args.rows
    mib = 1024 * 1024
    print(f"batch API: {args.rows} rows x 2 text nodes = {calls} requests in one batch")
    print(
        f"  flownb: CPU {cpu:.2f} s ({cpu / calls * 1e6:.0f} us/request), peak {peak / mib:.0f} MiB"
    )
    print(
        f"  floor:  CPU {floor_cpu:.2f} s, peak {floor_peak / mib:.0f} MiB (lines out, results in)"
    )
    ratios = {
        "client CPU / bare JSONL loop": cpu / floor_cpu,
        "peak memory / bare JSONL loop": peak / floor_peak,
    }
    for name, ratio in ratios.items():
        print(f"  ratio {name:40s} {ratio:5.2f}x")
    return ratios


if __name__ == "__main__":
    main()
