"""Requests per second of ``POST /api/flows/run/{id}`` on ``flownb serve`` (offline provider)
against a bare FastAPI route returning the same JSON, same load tool, same run; prints the ratio.

Both servers are separate processes started the same way (uvicorn, one worker, access log off,
on 127.0.0.1); the load generator is this process (aiohttp, a fixed number of connections kept
busy for a fixed time). Rounds alternate between the two servers and the median of each is
reported, so drift on a shared machine hits both alike. Every response is checked (status 200 and
the expected output), so a fast wrong answer cannot count.

    python bench/server_throughput.py [--seconds 5] [--connections 32] [--rounds 3]

The bare route does the least a real route must: parse the JSON body and answer the same items
through FastAPI's default response path (no response model). A third target, the "floor", answers
the same JSON pre-encoded without reading the body: no route can be faster on this stack.
flownb's route additionally checks the key (a constant-time digest comparison; the key file looked
at once a second), finds the flow (in memory; its file looked at once a second), validates the
variables, renders the prompt with the engine and adds a request id. Aim: ratio vs the bare route
>= 0.95, p99 at most 1.2x the bare route's, and no request over 25 ms (the worst request of each
round is printed: a stall such as a full garbage collection shows there). The machine is
shared: compare ratios, not req/s, and read the load printed beside them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from fastapi import FastAPI, Request, Response

ROOT = Path(__file__).resolve().parent.parent
FLOW = {
    "nodes": [
        {"id": "v-a", "type": "variableNode", "position": {"x": 0, "y": 0},
         "data": {"variable": {"label": "a", "value": ""}}},
        {"id": "v-b", "type": "variableNode", "position": {"x": 0, "y": 0},
         "data": {"variable": {"label": "b", "value": ""}}},
        {"id": "n-say", "type": "actionNode", "position": {"x": 0, "y": 0},
         "data": {"name": "say", "prompt": "A={a} B={b}", "modelParams": {"model": "m"},
                  "variables": [], "output": ""}},
        {"id": "o-say", "type": "outputNode", "position": {"x": 0, "y": 0},
         "data": {"name": "say", "output": {}}},
    ],
    "edges": [
        {"id": "e1", "source": "v-a", "target": "n-say", "sourceHandle": "output",
         "targetHandle": "variables"},
        {"id": "e2", "source": "v-b", "target": "n-say", "sourceHandle": "output",
         "targetHandle": "variables"},
        {"id": "e3", "source": "n-say", "target": "o-say", "sourceHandle": "output",
         "targetHandle": "input"},
    ],
}  # fmt: skip
BODY = {"variables": {"a": "owls", "b": "dry"}}
EXPECTED = [{"name": "say", "output": "A=owls B=dry", "type": "output"}]


def bare_app() -> object:
    """Return the reference: a FastAPI app whose run route parses the body and answers the
    same JSON (FastAPI's default response path)."""
    app = FastAPI()

    # No response model: FastAPI's plain path (jsonable_encoder + JSONResponse), nothing extra.
    @app.post("/api/flows/run/{flow_id}", response_model=None)
    async def run(flow_id: str, request: Request) -> Any:
        v = (await request.json())["variables"]
        return [{"name": "say", "output": f"A={v['a']} B={v['b']}", "type": "output"}]

    # The floor: the same JSON pre-encoded, no body parsing at all.
    canned = json.dumps(EXPECTED).encode()

    @app.post("/floor/{flow_id}", response_model=None)
    async def floor(flow_id: str) -> Response:
        return Response(canned, media_type="application/json")

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    return app


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(cmd: list[str], env: dict[str, str], port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{cmd[:4]} exited: {proc.stderr.read().decode()[-2000:]}")  # type: ignore[union-attr]
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return proc
        except OSError:
            time.sleep(0.1)
    stop(proc)
    raise RuntimeError(f"{cmd[:4]} did not start")


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@dataclass
class Round:
    """One round against one target: checked responses a second, and each request's latency."""

    rate: float
    latencies: list[float]

    @property
    def p99(self) -> float:
        """The 99th percentile latency, in seconds."""
        return statistics.quantiles(self.latencies, n=100)[98]

    @property
    def worst(self) -> float:
        """The slowest request, in seconds: a stall (GC, a flush, a warm-up) shows here."""
        return max(self.latencies)


async def load(url: str, headers: dict[str, str], seconds: float, connections: int) -> Round:
    """Keep ``connections`` requests in flight for ``seconds``; return checked responses/s and
    the latency of each request (after half a second of warm-up, not counted)."""
    payload = json.dumps(BODY).encode()
    hdrs = {**headers, "Content-Type": "application/json"}
    latencies: list[float] = []
    bad: list[str] = []
    connector = aiohttp.TCPConnector(limit=connections)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def one() -> None:
            async with session.post(url, data=payload, headers=hdrs) as resp:
                body = await resp.read()
                if resp.status != 200 or json.loads(body) != EXPECTED:
                    bad.append(f"{resp.status} {body[:200]!r}")

        async def worker(until: float) -> None:
            while (sent := time.perf_counter()) < until:
                await one()
                latencies.append(time.perf_counter() - sent)

        warm = time.perf_counter() + 0.5
        await asyncio.gather(*(worker(warm) for _ in range(connections)))
        latencies.clear()
        started = time.perf_counter()
        await asyncio.gather(*(worker(started + seconds) for _ in range(connections)))
        elapsed = time.perf_counter() - started
    if bad:
        raise SystemExit(f"{len(bad)} wrong answers from {url}, e.g. {bad[0]}")
    return Round(len(latencies) / elapsed, latencies)


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Run the benchmark, print its figures and return the ratios."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--bare-server", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.bare_server:  # the reference server's own process
        import uvicorn

        uvicorn.run(bare_app(), host="127.0.0.1", port=args.bare_server, log_level="warning",
                    access_log=False)  # fmt: skip
        return {}

    with tempfile.TemporaryDirectory() as tmp:
        flows = Path(tmp) / "flows"
        flows.mkdir()
        (flows / "echo.json").write_text(json.dumps(FLOW))
        env = {**os.environ, "FLOWNB_HOME": str(Path(tmp) / "home"), "NO_PROXY": "127.0.0.1"}
        env.pop("FLOWNB_PROVIDER", None)
        key = subprocess.run(
            [sys.executable, "-m", "flownb", "keys", "create", "--name", "bench"],
            env=env, capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip

        flownb_port, bare_port = free_port(), free_port()
        flownb_cmd = [
            sys.executable, "-m", "flownb", "serve", "--flows", str(flows), "--port",
            str(flownb_port), "--provider", "offline", "--log-level", "warning",
        ]  # fmt: skip
        bare_cmd = [sys.executable, __file__, "--bare-server", str(bare_port)]
        servers = [
            ("flownb serve", start(flownb_cmd, env, flownb_port),
             f"http://127.0.0.1:{flownb_port}/api/flows/run/echo", {"x-api-key": key}),
            ("bare FastAPI", start(bare_cmd, env, bare_port),
             f"http://127.0.0.1:{bare_port}/api/flows/run/echo", {}),
        ]  # fmt: skip
        floor_url = f"http://127.0.0.1:{bare_port}/floor/echo"
        targets = [(name, url, headers) for name, _, url, headers in servers]
        targets.append(("floor", floor_url, {}))
        rounds: dict[str, list[Round]] = {name: [] for name, *_ in targets}
        try:
            for r in range(args.rounds):
                for name, url, headers in targets if r % 2 == 0 else targets[::-1]:
                    got = asyncio.run(load(url, headers, args.seconds, args.connections))
                    rounds[name].append(got)
                    print(
                        f"round {r + 1}: {name:13s} {got.rate:8.0f} req/s  "
                        f"{len(got.latencies):6d} requests  p99 {got.p99 * 1000:5.1f} ms  "
                        f"worst {got.worst * 1000:5.1f} ms",
                        flush=True,
                    )
        finally:
            for _, proc, *_ in servers:
                stop(proc)

    def median(name: str, figure: Callable[[Round], float]) -> float:
        return statistics.median(figure(r) for r in rounds[name])

    ours, ref, floor = (
        median(n, lambda r: r.rate) for n in ("flownb serve", "bare FastAPI", "floor")
    )
    p99 = {n: median(n, lambda r: r.p99) for n in rounds}
    worst = {n: max(r.worst for r in rounds[n]) for n in rounds}
    print(
        f"\nrun, offline provider, {args.connections} connections, {args.seconds:g} s x "
        f"{args.rounds} rounds (median; worst: the slowest request of every round):\n"
        f"  flownb serve  {ours:8.0f} req/s  p99 {p99['flownb serve'] * 1000:5.1f} ms  "
        f"worst {worst['flownb serve'] * 1000:5.1f} ms\n"
        f"  bare FastAPI  {ref:8.0f} req/s  p99 {p99['bare FastAPI'] * 1000:5.1f} ms  "
        f"worst {worst['bare FastAPI'] * 1000:5.1f} ms  (parses the body, returns the list)\n"
        f"  floor         {floor:8.0f} req/s  p99 {p99['floor'] * 1000:5.1f} ms  "
        f"worst {worst['floor'] * 1000:5.1f} ms  (pre-encoded bytes, body not read)\n"
        f"  ratio vs bare FastAPI {ours / ref:6.2f}  (aim >= 0.95)\n"
        f"  p99 vs bare FastAPI   {p99['flownb serve'] / p99['bare FastAPI']:6.2f}  (aim <= 1.2)\n"
        f"  ratio vs floor        {ours / floor:6.2f}\n"
        f"  load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores"
    )
    return {
        "flownb serve / bare FastAPI route, req/s (aim >= 0.95)": ours / ref,
        "flownb serve / bare FastAPI route, p99 (aim <= 1.2)": p99["flownb serve"]
        / p99["bare FastAPI"],
        "flownb serve worst request, ms (aim <= 25)": worst["flownb serve"] * 1000,
        "bare FastAPI worst request, ms": worst["bare FastAPI"] * 1000,
        "flownb serve / floor": ours / floor,
    }


if __name__ == "__main__":
    main()
