"""Scale-out: Dask DataFrames on a LocalCluster of 2 process workers, and ``serve --workers``.

Three measurements, each against a reference taken in the same run:

1. **CPU-bound images**: an offline image flow (each row draws a 256x256 PNG) over ``--images``
   rows, single-process pandas path vs the same rows as a Dask DataFrame on 2 process workers
   (one thread each). Every run draws new prompts (the offline provider skips images it already
   drew). Aim: >= 1.6x faster on 2 cores.
2. **Latency-bound rows**: ``--rows`` rows of a one-node flow through 2 workers at a cluster-wide
   concurrency of 32, against the loopback fake OpenAI server (its own process) answering after
   ``--latency`` s. Ideal = rows x latency / 32. Aim: within 1.15x of ideal. The peak in flight
   the server saw is printed (it must not exceed 32).
3. **serve --workers 2 vs 1** on the image route (each request draws a new image): requests/s
   with ``--connections`` connections kept busy, rounds alternating. Aim: >= 1.5x.

    python -m bench.dask_scale [--images 960] [--rows 10000] [--latency 0.1] [--quick]

The machine may be shared: rounds alternate and medians are reported; compare ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench.latency_batch import Server
from bench.server_throughput import free_port, start, stop

C = 32


def image_flow() -> dict:
    """One variable ``topic``; one image node; one output ``picture``."""
    return {
        "nodes": [
            {"id": "v", "type": "variableNode",
             "data": {"variable": {"label": "topic", "value": ""}}},
            {"id": "img", "type": "imageNode",
             "data": {"name": "picture", "prompt": "A poster of {topic}", "modelParams": {}}},
            {"id": "o", "type": "outputNode", "data": {"name": "picture"}},
        ],
        "edges": [{"id": "e1", "source": "v", "target": "img"},
                  {"id": "e2", "source": "img", "target": "o"}],
    }  # fmt: skip


def text_flow() -> dict:
    """One variable ``word``; one text node; one output ``say``."""
    return {
        "nodes": [
            {"id": "v", "type": "variableNode",
             "data": {"variable": {"label": "word", "value": ""}}},
            {"id": "a", "type": "actionNode",
             "data": {"name": "say", "prompt": "say {word}", "modelParams": {"model": "m"}}},
            {"id": "o", "type": "outputNode", "data": {"name": "say"}},
        ],
        "edges": [{"id": "e1", "source": "v", "target": "a"},
                  {"id": "e2", "source": "a", "target": "o"}],
    }  # fmt: skip


def frame(n: int, column: str) -> Any:
    import pandas as pd

    tag = uuid.uuid4().hex[:8]  # new prompts every run
    return pd.DataFrame({column: [f"{tag} item {i}" for i in range(n)]})


def bench_images(client: Any, n: int, rounds: int) -> float:
    import dask.dataframe as dd

    import flownb

    flow = flownb.load_flow(image_flow(), log=False)
    flow.run_dataframe(dd.from_pandas(frame(8, "topic"), npartitions=2)).compute()  # warm up
    pandas_t, dask_t, pandas_cpu, dask_cpu = [], [], [], []
    for r in range(rounds):
        order = ("pandas", "dask") if r % 2 == 0 else ("dask", "pandas")
        for which in order:
            df = frame(n, "topic")
            workers_cpu = sum(client.run(time.process_time).values())
            c0, t0 = time.process_time(), time.perf_counter()
            if which == "pandas":
                out = flow.run_dataframe(df, progress=False)
            else:
                out = flow.run_dataframe(dd.from_pandas(df, npartitions=8)).compute()
            elapsed = time.perf_counter() - t0
            cpu = time.process_time() - c0
            if which == "dask":  # the work happened in the worker processes
                cpu += sum(client.run(time.process_time).values()) - workers_cpu
            assert out["picture"].str.startswith("file://").all()
            (pandas_t if which == "pandas" else dask_t).append(elapsed)
            (pandas_cpu if which == "pandas" else dask_cpu).append(cpu)
            print(
                f"  round {r + 1}: {which:6s} {elapsed:6.2f} s wall, {cpu:6.2f} s CPU", flush=True
            )
    p, d = statistics.median(pandas_t), statistics.median(dask_t)
    pc, dc = statistics.median(pandas_cpu), statistics.median(dask_cpu)
    print(
        f"images: {n} rows, pandas {p:.2f} s, Dask 2 workers {d:.2f} s: {p / d:.2f}x (aim >= 1.6)"
        f"; CPU per row: pandas {pc / n * 1000:.1f} ms, Dask {dc / n * 1000:.1f} ms (client + "
        f"workers; the wall-time speed-up needs two idle cores, CPU per row does not)"
    )
    return p / d


def bench_latency(client: Any, n: int, latency: float) -> tuple[float, float]:
    import dask.dataframe as dd

    import flownb

    server = Server(latency)
    try:
        os.environ["OPENAI_BASE_URL"] = server.url  # the flow's spec carries it to the workers
        flow = flownb.load_flow(text_flow(), provider="openai", cache=False, log=False)
        flow.run_dataframe(
            dd.from_pandas(frame(64, "word"), npartitions=2), concurrency=C
        ).compute()
        # The same rows through one process (the pandas path) first: the reference for what
        # this machine allows right now.
        t0 = time.perf_counter()
        flow.run_dataframe(frame(n, "word"), progress=False, concurrency=C)
        single = time.perf_counter() - t0
        server.reset()
        t0 = time.perf_counter()
        out = flow.run_dataframe(dd.from_pandas(frame(n, "word"), npartitions=8), concurrency=C)
        out = out.compute()
        elapsed = time.perf_counter() - t0
        stats = server.stats()
    finally:
        server.stop()
    assert out["error"].isna().all() and len(out) == n
    ideal = n * latency / C
    print(
        f"latency: {n} rows x {latency * 1000:.0f} ms at cluster C={C} on 2 workers: "
        f"{elapsed:.2f} s vs ideal {ideal:.2f} s = {elapsed / ideal:.3f}x (aim <= 1.15); "
        f"one process (pandas path) {single:.2f} s = {single / ideal:.3f}x; server peak in "
        f"flight {stats['peak_in_flight']} (limit {C}), requests {stats['requests']}"
    )
    assert stats["peak_in_flight"] <= C
    return elapsed / ideal, single / ideal


async def _load(url: str, key: str, seconds: float, connections: int) -> float:
    import aiohttp

    done = 0
    tag = uuid.uuid4().hex[:8]
    counter = iter(range(10**9))
    # A new connection per request, as from many clients or a load balancer: a kept-alive
    # connection stays with the worker process that accepted it.
    connector = aiohttp.TCPConnector(limit=connections, force_close=True)
    async with aiohttp.ClientSession(connector=connector) as s:

        async def worker(until: float) -> None:
            nonlocal done
            while time.perf_counter() < until:
                body = {"variables": {"topic": f"{tag} {next(counter)}"}}
                async with s.post(url, json=body, headers={"x-api-key": key}) as resp:
                    await resp.read()
                    if resp.status != 200:
                        raise SystemExit(f"{url}: HTTP {resp.status}")
                done += 1

        await asyncio.gather(*(worker(time.perf_counter() + 0.5) for _ in range(connections)))
        done = 0
        t0 = time.perf_counter()
        await asyncio.gather(*(worker(t0 + seconds) for _ in range(connections)))
        return done / (time.perf_counter() - t0)


def tree_cpu(pid: int) -> float:
    """CPU seconds used so far by process ``pid`` and its children (from /proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(stat.parent.name) == pid or int(fields[1]) == pid:
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def bench_serve(seconds: float, connections: int, rounds: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        flows = Path(tmp) / "flows"
        flows.mkdir()
        (flows / "poster.json").write_text(json.dumps(image_flow()))
        env = {**os.environ, "FLOWNB_HOME": str(Path(tmp) / "home"), "NO_PROXY": "127.0.0.1"}
        env.pop("FLOWNB_PROVIDER", None)
        key = subprocess.run(
            [sys.executable, "-m", "flownb", "keys", "create", "--name", "bench"],
            env=env, capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
        rates: dict[int, list[float]] = {1: [], 2: []}
        cpu: dict[int, list[float]] = {1: [], 2: []}  # server CPU seconds per request
        procs = {}
        try:
            for workers in (1, 2):
                port = free_port()
                cmd = [sys.executable, "-m", "flownb", "serve", "--flows", str(flows), "--port",
                       str(port), "--log-level", "warning", "--workers", str(workers)]  # fmt: skip
                procs[workers] = (
                    start(cmd, env, port),
                    f"http://127.0.0.1:{port}/api/flows/run/poster",
                )
            time.sleep(2)  # the second worker process of --workers 2 is up too
            for r in range(rounds):
                for workers in (1, 2) if r % 2 == 0 else (2, 1):
                    used = tree_cpu(procs[workers][0].pid)
                    t0 = time.perf_counter()
                    rate = asyncio.run(_load(procs[workers][1], key, seconds, connections))
                    served = rate * (time.perf_counter() - t0)  # with the warm-up requests
                    per = (tree_cpu(procs[workers][0].pid) - used) / max(served, 1.0)
                    rates[workers].append(rate)
                    cpu[workers].append(per)
                    print(
                        f"  round {r + 1}: --workers {workers} {rate:7.1f} req/s, "
                        f"{per * 1000:5.1f} ms server CPU per request",
                        flush=True,
                    )
        finally:
            for proc, _ in procs.values():
                stop(proc)
    one, two = statistics.median(rates[1]), statistics.median(rates[2])
    print(
        f"server CPU per request: --workers 1 {statistics.median(cpu[1]) * 1000:.1f} ms, "
        f"--workers 2 {statistics.median(cpu[2]) * 1000:.1f} ms (the speed-up needs idle cores)"
    )
    print(f"serve image route: --workers 1 {one:.1f} req/s, --workers 2 {two:.1f} req/s: "
          f"{two / one:.2f}x (aim >= 1.5)")  # fmt: skip
    return two / one


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Run the three measurements, print their figures and return the ratios."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=960)
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--latency", type=float, default=0.1)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", choices=("images", "latency", "serve"), action="append")
    parser.add_argument("--quick", action="store_true", help="small sizes, one round")
    args = parser.parse_args(argv)
    if args.quick:
        args.images, args.rows, args.seconds, args.rounds = 48, 1000, 2.0, 1
    only = set(args.only or ("images", "latency", "serve"))

    import dask
    from distributed import Client, LocalCluster

    ratios: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as home:
        os.environ["FLOWNB_HOME"] = home  # the flows' specs carry it to the workers
        os.environ.pop("FLOWNB_PROVIDER", None)
        if only & {"images", "latency"}:
            with (
                dask.config.set({"distributed.worker.daemon": False}),
                LocalCluster(
                    n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
                ) as cluster,  # fmt: skip
                Client(cluster) as client,
            ):
                if "images" in only:
                    ratios["Dask 2 workers / pandas, images (speed-up)"] = bench_images(
                        client, args.images, args.rounds
                    )
                if "latency" in only:
                    dask_ratio, single_ratio = bench_latency(client, args.rows, args.latency)
                    ratios["Dask C=32 latency batch / ideal"] = dask_ratio
                    ratios["one process C=32 (reference) / ideal"] = single_ratio
    if "serve" in only:
        ratios["serve --workers 2 / --workers 1 (req/s)"] = bench_serve(
            args.seconds, args.connections, args.rounds
        )
    return ratios


if __name__ == "__main__":
    main()
