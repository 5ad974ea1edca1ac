"""Latency-bound batch: 1,000 rows of a two-node flow against the loopback fake OpenAI server (in
another process, so it does not share our GIL) answering after 50 ms, at concurrency 32 and 8.

Prints wall time against the ideal N x nodes x latency / concurrency, with the latency measured
in the same run; the same work through the openai SDK (a sync loop, and AsyncOpenAI + Semaphore)
and bare aiohttp + Semaphore (the floor) for contrast; the number of provider calls a second run
of the same batch makes (aim: zero); and a fault run (10% 429 with Retry-After: 0, 5% 500) that
must lose nothing. Aim: flownb within 1.15x of ideal at C=32.

Client CPU: flownb and the floor run in interleaved rounds (a fresh FLOWNB_HOME each flownb round,
so every round pays for every call), at C=32 and at C=128; each prints its process CPU time per
call (the fake server is another process, so this is the client's alone: every thread of it) and
wall time, min / median / max over the rounds. flownb runs its calls on its background loop
(uvloop's where installed, as on a default install); the floor on ``asyncio.run``'s loop, as a
script written by hand does. Aims: flownb at most 0.35 ms of CPU a call at C=32,
and at C=128 (where the client's CPU, not the latency, bounds a 2-core machine) at most 1.15x the
floor's wall time.

    python -m bench.latency_batch [--rows 1000] [--latency 0.05] [--quick] [--repeat 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from typing import Any

from bench.flows import PROMPTS, two_node_flow

KEY = "sk-fake-bench-key"
MODEL_PARAMS = {"model": "gpt-4o-mini", "temperature": 0.7, "max_tokens": 64}


def prompts_of(row: dict[str, str]) -> list[str]:
    return [
        p.replace("{topic}", row["topic"]).replace("{tone}", row["tone"]) for p in PROMPTS.values()
    ]


# -- the fake server in its own process ----------------------------------------------------------


class Server:
    def __init__(self, latency: float) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.base = f"http://127.0.0.1:{self.port}"
        self.url = self.base + "/v1"
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "flownb.testing.fake_openai",
                "--port",
                str(self.port),
                "--latency",
                str(latency),
            ],
            stdout=subprocess.DEVNULL,
        )
        for _ in range(200):
            try:
                self.stats()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("fake server did not start")

    def _call(self, path: str, body: dict | None = None) -> dict:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base + path, data=data, method="POST" if data else "GET")
        with urllib.request.urlopen(req, timeout=10) as resp:
            return json.loads(resp.read())

    def stats(self) -> dict:
        return self._call("/_fake/stats")

    def reset(self) -> None:
        self._call("/_fake/reset", {})

    def configure(self, **config: Any) -> None:
        self._call("/_fake/config", config)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


# -- runners -------------------------------------------------------------------------------------


def timed(fn: Callable[[], Any]) -> tuple[float, float, Any]:
    """Return (wall seconds, process CPU seconds, result)."""
    c0, t0 = time.process_time(), time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, time.process_time() - c0, out


def measure_latency(url: str, n: int = 20) -> float:
    """Median round trip of one chat completion, sequential, over a warm connection."""
    import aiohttp

    async def go() -> float:
        times = []
        async with aiohttp.ClientSession() as session:
            for i in range(n):
                body = {"model": "m", "messages": [{"role": "user", "content": f"ping {i}"}]}
                t0 = time.perf_counter()
                async with session.post(url + "/chat/completions", json=body) as resp:
                    await resp.read()
                times.append(time.perf_counter() - t0)
        return statistics.median(times[2:])

    return asyncio.run(go())


def run_flownb(flow: Any, rows: list[dict[str, str]], concurrency: int) -> list[dict[str, str]]:
    return [dict(r) for r in flow.run_batch(rows, concurrency=concurrency)]


def run_sdk_sync(url: str, rows: list[dict[str, str]]) -> list[dict[str, str]]:
    from openai import OpenAI

    client = OpenAI(api_key=KEY, base_url=url)
    out = []
    for row in rows:
        texts = []
        for prompt in prompts_of(row):
            resp = client.chat.completions.create(
                model="gpt-4o-mini",
                messages=[{"role": "user", "content": prompt}],
                temperature=0.7,
                max_tokens=64,
            )
            texts.append(resp.choices[0].message.content)
        out.append(dict(zip(PROMPTS, texts, strict=True)))
    client.close()
    return out


def run_sdk_async(url: str, rows: list[dict[str, str]], concurrency: int) -> list[dict[str, Any]]:
    """AsyncOpenAI + Semaphore + gather, the SDK's default retries; a failed call -> None."""
    from openai import AsyncOpenAI

    async def go() -> list[dict[str, Any]]:
        client = AsyncOpenAI(api_key=KEY, base_url=url)
        sem = asyncio.Semaphore(concurrency)

        async def one(prompt: str) -> str | None:
            async with sem:
                try:
                    resp = await client.chat.completions.create(
                        model="gpt-4o-mini",
                        messages=[{"role": "user", "content": prompt}],
                        temperature=0.7,
                        max_tokens=64,
                    )
                except Exception:
                    return None
                return resp.choices[0].message.content

        async def row(r: dict[str, str]) -> dict[str, Any]:
            texts = await asyncio.gather(*(one(p) for p in prompts_of(r)))
            return dict(zip(PROMPTS, texts, strict=True))

        try:
            return list(await asyncio.gather(*(row(r) for r in rows)))
        finally:
            await client.close()

    return asyncio.run(go())


def run_aiohttp(url: str, rows: list[dict[str, str]], concurrency: int) -> list[dict[str, str]]:
    """Bare aiohttp + Semaphore: the floor (no retries, no cache, nothing)."""
    import aiohttp

    async def go() -> list[dict[str, str]]:
        sem = asyncio.Semaphore(concurrency)
        headers = {"Authorization": f"Bearer {KEY}"}
        async with aiohttp.ClientSession(
            headers=headers, connector=aiohttp.TCPConnector(limit=0)
        ) as s:

            async def one(prompt: str) -> str:
                body = {
                    "model": "gpt-4o-mini",
                    "messages": [{"role": "user", "content": prompt}],
                    "temperature": 0.7,
                    "max_tokens": 64,
                }
                async with sem, s.post(url + "/chat/completions", json=body) as resp:
                    data = await resp.json()
                return data["choices"][0]["message"]["content"]

            async def row(r: dict[str, str]) -> dict[str, str]:
                texts = await asyncio.gather(*(one(p) for p in prompts_of(r)))
                return dict(zip(PROMPTS, texts, strict=True))

            return list(await asyncio.gather(*(row(r) for r in rows)))

    return asyncio.run(go())


def median_run(runs: list[tuple[float, float, int, int]]) -> tuple[float, float, int, int]:
    """Return the run of median wall time (its CPU, calls and losses with it)."""
    return sorted(runs)[len(runs) // 2]


Run = tuple[float, float, int, int]  # wall seconds, CPU seconds, calls, rows lost


def spread(values: list[float]) -> tuple[float, float, float]:
    """Return (min, median, max) of ``values``."""
    return min(values), statistics.median(values), max(values)


def shown(values: tuple[float, float, float], unit: str = "") -> str:
    return " / ".join(f"{v:.3f}{unit}" for v in values)


def check(out: list[dict[str, Any]], rows: list[dict[str, str]]) -> int:
    """Return how many rows are missing or wrong (every output must be the fake's echo)."""
    from flownb.testing.fake_openai import echo

    bad = 0
    for got, row in zip(out, rows, strict=True):
        want = dict(zip(PROMPTS, (echo(p) for p in prompts_of(row)), strict=True))
        bad += got != want
    return bad


def interleaved(
    server: Server, make_flow: Callable[[], Any], rows: list[dict[str, str]], conc: int, rounds: int
) -> tuple[list[Run], list[Run]]:
    """Run flownb (a fresh flow and FLOWNB_HOME each round: every call paid for) and the floor
    ``rounds`` times each, alternately. Returns (flownb's runs, the floor's runs)."""
    calls = len(rows) * len(PROMPTS)
    flownb_runs: list[Run] = []
    floor_runs: list[Run] = []
    for _ in range(rounds):
        os.environ["FLOWNB_HOME"] = tempfile.mkdtemp(prefix="flownb-bench-")
        flow = make_flow()
        server.reset()
        wall, cpu, out = timed(lambda f=flow: run_flownb(f, rows, conc))
        flownb_runs.append((wall, cpu, server.stats()["requests"], check(out, rows)))
        server.reset()
        wall, cpu, out = timed(lambda: run_aiohttp(server.url, rows, conc))
        floor_runs.append((wall, cpu, calls, check(out, rows)))
    return flownb_runs, floor_runs


def client_cpu(
    conc: int, flownb_runs: list[Run], floor_runs: list[Run], lines: list[str]
) -> dict[str, float]:
    """Print CPU per call and wall time of both sides' rounds at ``conc`` (min / median / max)
    and the ratios of their medians; return the figures under their labels."""
    mine = spread([cpu / calls * 1e3 for _, cpu, calls, _ in flownb_runs])
    floor = spread([cpu / calls * 1e3 for _, cpu, calls, _ in floor_runs])
    walls = spread([w for w, *_ in flownb_runs])
    floor_walls = spread([w for w, *_ in floor_runs])
    lost = sum(r[3] for r in flownb_runs)
    lines += [
        f"C={conc}, {len(flownb_runs)} interleaved rounds (min / median / max):",
        f"  flownb client CPU per call   {shown(mine, ' ms')}   wall {shown(walls, ' s')}"
        f"   lost {lost}",
        f"  bare aiohttp CPU per call    {shown(floor, ' ms')}   wall {shown(floor_walls, ' s')}",
        f"  flownb / bare: CPU {mine[1] / floor[1]:.2f}x, wall {walls[1] / floor_walls[1]:.2f}x "
        "(medians)",
    ]
    for line in lines[-4:]:
        print(line, flush=True)
    return {
        f"flownb client CPU per call C={conc}, ms": mine[1],
        f"bare aiohttp CPU per call C={conc}, ms": floor[1],
        f"flownb / bare aiohttp wall C={conc}": walls[1] / floor_walls[1],
    }


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Run the benchmark, print its figures and return the main ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--sync-rows", type=int, default=40, help="rows for the SDK sync loop")
    parser.add_argument("--quick", action="store_true", help="skip the C=8 contrast runs")
    parser.add_argument("--repeat", type=int, default=5, help="interleaved rounds at C=32, C=128")
    args = parser.parse_args(argv)

    home = tempfile.mkdtemp(prefix="flownb-bench-")
    server = Server(args.latency)
    os.environ.update(
        FLOWNB_HOME=home,
        OPENAI_BASE_URL=server.url,
        OPENAI_API_KEY=KEY,
        NO_PROXY="127.0.0.1,localhost",
    )
    for name in ("FLOWNB_CACHE", "FLOWNB_RPM", "FLOWNB_CONCURRENCY", "FLOWNB_OPENAI_TRANSPORT"):
        os.environ.pop(name, None)
    import aiohttp  # noqa: F401  (imports and their one-off costs before any timing, for all)
    import openai  # noqa: F401

    import flownb

    n, nodes = args.rows, len(PROMPTS)
    rows = [{"topic": f"topic {i}", "tone": ("dry", "playful", "earnest")[i % 3]} for i in range(n)]
    ratios: dict[str, float] = {}
    lines: list[str] = []

    def make_flow() -> Any:
        return flownb.load_flow(two_node_flow(MODEL_PARAMS), provider="openai")

    def report(label: str, wall: float, cpu: float, calls: int, ideal: float, lost: int) -> None:
        ratio = wall / ideal
        per_call = f"{cpu / calls * 1e3:5.2f} ms" if calls else "    -   "
        lines.append(
            f"  {label:44s}{wall:7.2f} s  {ratio:6.2f}x ideal  cpu/call {per_call}  lost {lost}"
        )
        print(lines[-1], flush=True)
        ratios[label] = ratio

    try:
        latency = measure_latency(server.url)
        print(f"load average before: {os.getloadavg()[0]:.2f} (2 cores; others' work skews wall)")
        print(
            f"latency batch: {n} rows x {nodes} nodes, fake OpenAI in another process, "
            f"latency set {args.latency * 1e3:.0f} ms, measured {latency * 1e3:.1f} ms"
        )
        for conc in (32,) if args.quick else (32, 8):
            ideal = n * nodes * latency / conc
            print(f"C={conc}: ideal {ideal:.2f} s (N x nodes x measured latency / C)")
            # flownb with its defaults (cache and run log on), a fresh FLOWNB_HOME per round so
            # every round pays for every call; interleaved with the floor, medians reported.
            reps = args.repeat if conc == 32 else 1
            flownb_runs, floor_runs = interleaved(server, make_flow, rows, conc, reps)
            flow = make_flow()  # the last round's home: the second run below is all hits
            wall, cpu, calls, lost = median_run(flownb_runs)
            report(f"flownb run_batch C={conc}", wall, cpu, calls, ideal, lost)
            if conc == 32:
                server.reset()
                wall2, _, out2 = timed(lambda f=flow: run_flownb(f, rows, 32))
                calls2 = server.stats()["requests"]
                lines.append(
                    f"  second run of the same batch: {calls2} provider calls, "
                    f"{wall2:.2f} s, {check(out2, rows)} rows wrong"
                )
                print(lines[-1], flush=True)
                ratios["second run provider calls"] = calls2
            wall, cpu, calls, lost = median_run(floor_runs)
            report(f"bare aiohttp + Semaphore C={conc} (floor)", wall, cpu, calls, ideal, lost)
            server.reset()
            wall, cpu, out = timed(lambda c=conc: run_sdk_async(server.url, rows, c))
            report(
                f"openai AsyncOpenAI + Semaphore C={conc}",
                wall,
                cpu,
                n * nodes,
                ideal,
                check(out, rows),
            )
            if conc == 32:
                ratios.update(client_cpu(conc, flownb_runs, floor_runs, lines))
            sub = rows[: args.sync_rows]
            wall, cpu, out = timed(lambda s=sub: run_sdk_sync(server.url, s))
            scale = n / len(sub)  # one at a time: the full batch takes scale x as long
            report(
                f"openai SDK sync loop ({len(sub)} rows, scaled)",
                wall * scale,
                cpu * scale,
                n * nodes,
                ideal,
                check(out, sub),
            )

        # High concurrency: the latency hides less, the client's CPU shows in the wall time.
        ratios.update(
            client_cpu(128, *interleaved(server, make_flow, rows, 128, args.repeat), lines)
        )

        # Faults: 10% 429 (Retry-After: 0) and 5% 500. flownb must lose nothing.
        server.configure(faults={"429": 0.10, "500": 0.05}, retry_after="0", seed=7)
        ideal = n * nodes * latency / 32
        print("C=32 with 10% 429 (Retry-After: 0) + 5% 500:")
        flow = flownb.load_flow(two_node_flow(MODEL_PARAMS), provider="openai", cache=False)
        server.reset()
        wall, cpu, out = timed(lambda f=flow: run_flownb(f, rows, 32))
        st = server.stats()
        report("flownb run_batch C=32, faults", wall, cpu, st["requests"], ideal, check(out, rows))
        ratios["flownb lost under faults"] = check(out, rows)
        server.reset()
        wall, cpu, out = timed(lambda: run_sdk_async(server.url, rows, 32))
        report(
            "openai AsyncOpenAI + Semaphore C=32, faults",
            wall,
            cpu,
            server.stats()["requests"],
            ideal,
            check(out, rows),
        )
    finally:
        server.stop()
    return ratios


if __name__ == "__main__":
    main()
