"""Requests per second, p99 and worst latency of ``POST /api/flows/run/{id}`` on ``flownb serve``
(offline provider) against a bare FastAPI route answering the same JSON, under the same loads in
the same run; prints each figure's min / median / max over the rounds and the ratios.

    python -m bench server_throughput
    python bench/server_throughput.py [--requests 15000] [--connections 32] [--rounds 5]

What both sides do, exactly:

- **The servers.** Two processes started the same way, each uvicorn with one worker on
  127.0.0.1, access log off (log level warning), no ``server`` header and no proxy headers
  (``flownb serve``'s defaults, which the bare server is given too), uvicorn's default
  keep-alive timeout and no connection limit for the bare server (``flownb serve``'s are 5 s, as
  uvicorn's, and 1,000 connections plus requests, never reached here), bytecode compiled for
  both (``python -m bench`` compiles flownb, the benchmarks and every installed package first).
  ``flownb serve`` is the command users run; its uvicorn protocol adds the connection guards of
  :mod:`flownb.server.protocol` (head size and time limits, a share of the connection limit).
- **The HTTP parser.** Both parse with httptools (uvicorn's httptools protocol): the bare
  server is left to uvicorn's ``http="auto"``, what a stock ``uvicorn.run(app)`` gets on a
  clean install of flownb (httptools is one of flownb's dependencies, and ``"auto"`` picks it
  where it is installed); ``flownb serve``'s protocol is uvicorn's httptools one, subclassed.
  The bare server says which protocol it runs, and the run is refused when it is not the one
  ``flownb serve``'s is built on.
- **The event loop.** Both run asyncio's loop: ``flownb serve`` names it
  (:data:`flownb.server.protocol.EVENT_LOOP`, rather than uvicorn's ``"auto"``, which picks
  uvloop, installed with flownb but on Windows) and the bare server is given the same (it says
  which loop it runs on, and the run is refused when it is not the one ``flownb serve`` names,
  whose start-up log line says the same). On uvloop (measured when both sides parsed with h11),
  both answered as many requests a second, with a p99 about 1.4x and a slowest request about
  1.8x asyncio's.
- **The requests.** The same bytes to both: the same headers (``content-type``, the
  ``x-api-key`` header, which the bare route ignores), the same 40-byte JSON body.
- **The bare route** reads and parses the JSON body (``await request.json()``), builds the
  answer from its variables and returns it through FastAPI's default response path (no response
  model): 56 bytes of JSON, the same bytes ``flownb serve`` answers. It checks no key, loads no
  flow, validates nothing and renders no template: it is the least a route can do and still
  answer from the request.
- **flownb's route** checks the key (constant-time digest comparison; the key file looked at at
  most once a second) and the key's spend cap, finds the flow in memory (its file looked at at
  most once a second), reads the body with a size cap, decodes and validates the variables,
  renders the prompt through the engine's offline provider, encodes the answer with orjson and
  adds an ``x-request-id`` header (the one byte count that differs: 36 bytes of head). Its
  protocol sends the head and body of an answer in one write (uvicorn's own writes them
  separately, two sends and two packets: the bare route pays that, as any stock uvicorn app
  does).
- **The floor**, in the bare server's process, answers the same JSON pre-encoded without
  reading the body: no route can be faster on this stack.

Two load generators, each this process on its own event loop, keep ``--connections``
keep-alive connections busy: **aiohttp** (a client session, as a Python client would call) and
**sockets** (asyncio streams writing pre-encoded request bytes and reading the answer by its
``content-length``: a tenth of aiohttp's CPU a request, so more of the machine is left to the
server). Each round sends every target, under each generator, a warm-up of ``--warmup``
requests (not counted), then ``--requests`` timed ones on the same connections, once every
connection has finished its share of the warm-up: no connection is opened while the clock runs,
for either side. The order of the targets alternates from round to round so drift on a shared
machine hits both sides alike. The generator collects no garbage while it measures: it
collects just before, while no request is in flight (a full collection of this process takes
tens of milliseconds, which would otherwise land inside some request's latency). Every answer
is checked (status 200 and the expected JSON): a fast wrong answer cannot count.

Aim: requests a second at least 0.95x the bare route's, p99 at most 1.2x, and no request over 25
ms (the slowest request of every round is printed, for both sides: a stall such as a full
garbage collection, a first-request import or a file flush shows there). With every connection
kept busy, a request that arrives just after the server took up the others waits for them and
then for its own turn: even without a stall, the slowest request is about twice the time the
server takes for ``--connections`` requests, plus the generator's turn, so it follows the
server's CPU a request and the machine's load. The machine is shared: compare ratios, not
requests a second, and read the load printed beside them.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from fastapi import FastAPI, Request, Response

from flownb.server.protocol import EVENT_LOOP, http_protocol

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
    same JSON (FastAPI's default response path), and the floor route."""
    app = FastAPI()

    # No response model: FastAPI's plain path (jsonable_encoder + JSONResponse), nothing extra.
    @app.post("/api/flows/run/{flow_id}", response_model=None)
    async def run(flow_id: str, request: Request) -> Any:
        v = (await request.json())["variables"]
        return [{"name": "say", "output": f"A={v['a']} B={v['b']}", "type": "output"}]

    # The floor: the same JSON pre-encoded, no body parsing at all.
    canned = json.dumps(EXPECTED, separators=(",", ":")).encode()

    @app.post("/floor/{flow_id}", response_model=None)
    async def floor(flow_id: str) -> Response:
        return Response(canned, media_type="application/json")

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    # Which event loop and HTTP protocol this server runs on (the benchmark checks they are
    # flownb serve's).
    @app.get("/stack")
    async def stack() -> dict[str, str]:
        loop = type(asyncio.get_running_loop()).__module__.partition(".")[0]
        return {"loop": loop, "http": app.state.http}

    return app


def serve_bare(port: int) -> None:
    """Run the reference server in this process with ``flownb serve``'s uvicorn settings (see
    the module's docstring), less flownb's own connection guards, and uvicorn's own HTTP
    protocol (``"auto"``: httptools)."""
    import uvicorn

    app: Any = bare_app()
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        loop=EVENT_LOOP,  # flownb serve's: asyncio's, not uvicorn's "auto" (uvloop)
        http="auto",  # a stock uvicorn.run(app)'s: httptools, installed with flownb
        log_level="warning",
        access_log=False,
        server_header=False,
        proxy_headers=False,
    )
    config.load()
    app.state.http = config.http_protocol_class.__name__
    uvicorn.Server(config).run()


def parser_of_flownb_serve() -> str:
    """Return the name of the uvicorn HTTP protocol ``flownb serve``'s protocol is built on."""
    return next(c.__name__ for c in http_protocol().__mro__ if c.__module__.startswith("uvicorn."))


async def bare_stack_of(port: int) -> tuple[str, str]:
    """Return the event loop and the HTTP protocol the bare server on ``port`` runs on."""
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{port}/stack") as resp,
    ):
        got = await resp.json()
        return str(got["loop"]), str(got["http"])


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
    """One round against one target under one load generator: checked responses a second,
    each request's latency, and the serving process's CPU seconds a timed request (``nan``
    where the process's CPU time cannot be read)."""

    rate: float
    latencies: list[float]
    cpu: float

    @property
    def p99(self) -> float:
        """The 99th percentile latency, in seconds."""
        return statistics.quantiles(self.latencies, n=100)[98]

    @property
    def worst(self) -> float:
        """The slowest request, in seconds: a stall (GC, a flush, a warm-up) shows here."""
        return max(self.latencies)


@dataclass(frozen=True)
class Target:
    """Where a load generator sends its requests: a loopback port and a path, and the id of
    the process serving them (whose CPU time is read around the timed requests)."""

    name: str
    port: int
    path: str
    headers: dict[str, str]
    pid: int


def cpu_seconds(pid: int) -> float:
    """Return the CPU time (user and system) process ``pid`` has used so far, in seconds; ``nan``
    where ``/proc`` does not say (not Linux)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return float("nan")
    # The fields after the command name (which may hold spaces) in parentheses: utime and stime
    # are the 12th and 13th of them, in clock ticks.
    fields = stat.rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# One connection's way of sending the request: returns the answer's status and body.
Send = Callable[[], Awaitable[tuple[int, bytes]]]

# A load generator: sends the target ``warmup`` untimed requests then ``n`` timed ones over
# ``connections`` connections; returns each timed request's latency, the time they took and the
# serving process's CPU time over them (seconds); raises SystemExit on a wrong answer.
Generator = Callable[[Target, int, int, int], Awaitable[tuple[list[float], float, float]]]


def _checked(status: int, body: bytes, target: Target) -> None:
    if status != 200 or json.loads(body) != EXPECTED:
        raise SystemExit(f"wrong answer from {target.name}: {status} {body[:200]!r}")


async def _drive(
    target: Target,
    connect: Callable[[], AbstractAsyncContextManager[Send]],
    warmup: int,
    n: int,
    connections: int,
) -> tuple[list[float], float, float]:
    """Keep ``connections`` connections (each opened by ``connect``) busy: ``warmup`` requests,
    then, once every connection has finished its share of them, ``n`` timed ones on the same
    connections, with this process's garbage collection off while they run (so neither a
    connection being opened nor the generator's own collection is counted as the server's).
    Returns each timed request's latency, the time they all took and the CPU time the serving
    process used meanwhile."""
    warm = asyncio.Barrier(connections + 1)
    go = asyncio.Event()
    latencies: list[float] = []
    left = warmup

    async def worker() -> None:
        nonlocal left
        async with connect() as send:
            while left > 0:
                left -= 1
                _checked(*await send(), target)
            await warm.wait()
            await go.wait()
            while left > 0:
                left -= 1
                sent = time.perf_counter()
                status, body = await send()
                latencies.append(time.perf_counter() - sent)
                _checked(status, body, target)

    workers = [asyncio.ensure_future(worker()) for _ in range(connections)]
    ready = asyncio.ensure_future(warm.wait())
    await asyncio.wait({ready, *workers}, return_when=asyncio.FIRST_COMPLETED)
    if not ready.done():  # a worker failed during the warm-up
        ready.cancel()
        for task in workers:
            task.cancel()
        next(t for t in workers if t.done() and not t.cancelled()).result()
    gc.collect()
    gc.disable()
    try:
        left = n
        cpu = cpu_seconds(target.pid)
        started = time.perf_counter()
        go.set()
        await asyncio.gather(*workers)
        elapsed = time.perf_counter() - started
        return latencies, elapsed, cpu_seconds(target.pid) - cpu
    finally:
        gc.enable()


async def with_aiohttp(
    target: Target, warmup: int, n: int, connections: int
) -> tuple[list[float], float, float]:
    """Send the requests with an aiohttp session over ``connections`` connections."""
    url = f"http://127.0.0.1:{target.port}{target.path}"
    payload = json.dumps(BODY).encode()
    headers = {**target.headers, "Content-Type": "application/json"}
    connector = aiohttp.TCPConnector(limit=connections)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def send() -> tuple[int, bytes]:
            async with session.post(url, data=payload, headers=headers) as resp:
                return resp.status, await resp.read()

        @asynccontextmanager
        async def connect() -> AsyncIterator[Send]:
            yield send  # the session's pool holds the connections

        return await _drive(target, connect, warmup, n, connections)


async def with_sockets(
    target: Target, warmup: int, n: int, connections: int
) -> tuple[list[float], float, float]:
    """Send pre-encoded requests over ``connections`` keep-alive connections (asyncio streams),
    reading each answer's head and then its ``content-length`` bytes."""
    payload = json.dumps(BODY).encode()
    head = [
        f"POST {target.path} HTTP/1.1",
        f"host: 127.0.0.1:{target.port}",
        "content-type: application/json",
        *(f"{k}: {v}" for k, v in target.headers.items()),
        f"content-length: {len(payload)}",
    ]
    request = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + payload

    @asynccontextmanager
    async def connect() -> AsyncIterator[Send]:
        reader, writer = await asyncio.open_connection("127.0.0.1", target.port)

        async def send() -> tuple[int, bytes]:
            writer.write(request)
            answer_head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in answer_head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            return int(answer_head[9:12]), await reader.readexactly(length)

        try:
            yield send
        finally:
            writer.close()
            await writer.wait_closed()

    return await _drive(target, connect, warmup, n, connections)


GENERATORS: dict[str, Generator] = {"aiohttp": with_aiohttp, "sockets": with_sockets}


def one_round(
    generator: Generator, target: Target, requests: int, warmup: int, connections: int
) -> Round:
    """Send ``target`` ``warmup`` requests, then time ``requests`` of them on the same
    connections."""
    latencies, elapsed, cpu = asyncio.run(generator(target, warmup, requests, connections))
    return Round(len(latencies) / elapsed, latencies, cpu / len(latencies))


def spread(values: Sequence[float], scale: float = 1.0, fmt: str = "{:.2f}") -> str:
    """Return ``min / median / max`` of ``values`` (times ``scale``), formatted."""
    low, mid, high = min(values), statistics.median(values), max(values)
    return " / ".join(fmt.format(v * scale) for v in (low, mid, high))


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Run the benchmark, print its figures and return the ratios."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=15_000, help="timed requests a round")
    parser.add_argument("--warmup", type=int, default=1_000, help="untimed requests first")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--bare-server", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.bare_server:  # the reference server's own process
        serve_bare(args.bare_server)
        return {}

    ours, bare, floor = "flownb serve", "bare FastAPI", "floor"
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
        procs = [start(flownb_cmd, env, flownb_port), start(bare_cmd, env, bare_port)]
        bare_loop, bare_http = asyncio.run(bare_stack_of(bare_port))
        flownb_http = parser_of_flownb_serve()
        if (bare_loop, bare_http) != (EVENT_LOOP, flownb_http):
            for proc in procs:
                stop(proc)
            raise SystemExit(
                f"unfair: flownb serve runs on {EVENT_LOOP} with {flownb_http}, "
                f"the bare route on {bare_loop} with {bare_http}"
            )
        print(f"event loop: {EVENT_LOOP}, HTTP protocol: {flownb_http}, both servers", flush=True)
        headers = {"x-api-key": key}  # sent to every target alike
        flownb_pid, bare_pid = procs[0].pid, procs[1].pid
        targets = [
            Target(ours, flownb_port, "/api/flows/run/echo", headers, flownb_pid),
            Target(bare, bare_port, "/api/flows/run/echo", headers, bare_pid),
            Target(floor, bare_port, "/floor/echo", headers, bare_pid),
        ]
        rounds: dict[tuple[str, str], list[Round]] = {
            (g, t.name): [] for g in GENERATORS for t in targets
        }
        try:
            for r in range(args.rounds):
                for i, (gen_name, generator) in enumerate(GENERATORS.items()):
                    for target in targets if (r + i) % 2 == 0 else targets[::-1]:
                        got = one_round(
                            generator, target, args.requests, args.warmup, args.connections
                        )
                        rounds[gen_name, target.name].append(got)
                        print(
                            f"round {r + 1} {gen_name:8s} {target.name:13s} {got.rate:7.0f} req/s"
                            f"  p99 {got.p99 * 1000:5.1f} ms  worst {got.worst * 1000:5.1f} ms"
                            f"  server CPU {got.cpu * 1000:.3f} ms/req"
                            f"  (load {os.getloadavg()[0]:.2f})",
                            flush=True,
                        )
        finally:
            for proc in procs:
                stop(proc)

    figures: dict[str, float] = {}
    print(
        f"\nPOST /api/flows/run, offline provider, {args.connections} connections, "
        f"{args.requests:,} requests a round x {args.rounds} rounds per load generator "
        "(min / median / max over the rounds):"
    )
    for gen_name in GENERATORS:
        got = {t.name: rounds[gen_name, t.name] for t in targets}
        ratio = [a.rate / b.rate for a, b in zip(got[ours], got[bare], strict=True)]
        p99_ratio = [a.p99 / b.p99 for a, b in zip(got[ours], got[bare], strict=True)]
        print(f"  load generator: {gen_name}")
        for name, runs in got.items():
            print(
                f"    {name:13s} req/s {spread([x.rate for x in runs], fmt='{:.0f}'):20s}"
                f"  p99 ms {spread([x.p99 for x in runs], 1000, '{:.1f}'):17s}"
                f"  worst ms {spread([x.worst for x in runs], 1000, '{:.1f}'):17s}"
                f"  server CPU ms/req {spread([x.cpu for x in runs], 1000, '{:.3f}')}"
            )
        print(f"    req/s vs bare FastAPI  {spread(ratio)}  (aim >= 0.95)")
        print(f"    p99 vs bare FastAPI    {spread(p99_ratio)}  (aim <= 1.2)")
        figures[f"flownb serve / bare FastAPI route, req/s, {gen_name} (aim >= 0.95)"] = (
            statistics.median(ratio)
        )
        figures[f"flownb serve / bare FastAPI route, p99, {gen_name} (aim <= 1.2)"] = (
            statistics.median(p99_ratio)
        )
    worst = {
        name: max(x.worst for g in GENERATORS for x in rounds[g, name]) * 1000
        for name in (ours, bare)
    }
    print(
        f"  slowest request of any round: flownb serve {worst[ours]:.1f} ms (aim <= 25), "
        f"bare FastAPI {worst[bare]:.1f} ms\n"
        f"  load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores"
    )
    figures["flownb serve worst request, ms (aim <= 25)"] = worst[ours]
    figures["bare FastAPI worst request, ms"] = worst[bare]
    floor_ratio = [
        a.rate / b.rate
        for g in GENERATORS
        for a, b in zip(rounds[g, ours], rounds[g, floor], strict=True)
    ]
    figures["flownb serve / floor, req/s"] = statistics.median(floor_ratio)
    cpu = {
        name: statistics.median(x.cpu for g in GENERATORS for x in rounds[g, name])
        for name in (ours, bare)
    }
    if cpu[ours] == cpu[ours]:  # not nan: the servers' CPU time could be read
        print(
            f"  server CPU a request (median of the rounds): flownb serve {cpu[ours] * 1000:.3f}"
            f" ms, bare FastAPI {cpu[bare] * 1000:.3f} ms"
        )
        figures["flownb serve / bare FastAPI route, server CPU a request"] = cpu[ours] / cpu[bare]
    return figures


if __name__ == "__main__":
    main()
