"""Two endpoints in one evaluation: a 429 from one never slows the other.

Two loopback fake OpenAI servers (each in its own process), 50 ms answers, 1,000 calls each, each
endpoint with its own C=16 limit; the "noisy" one answers 10% of requests 429 at once. The clean
endpoint's calls are timed alone (a plain ``run_batch``), then inside one ``flownb.evaluate``
with the noisy one. Its finish time is read from the outside: a thread polls the clean server's
count of answered requests and notes when the last one is sent.

Aim: the clean endpoint finishes no later than alone (ratio near 1.0); the ideal is
calls x latency / C.

    python -m bench.endpoints [--calls 1000] [--latency 0.05] [--concurrency 16]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time

from bench.latency_batch import Server


def _finish_time(server: Server, target: int, started: float, stop: threading.Event) -> list[float]:
    """Poll ``server`` until it has answered ``target`` requests; return [seconds since start]."""
    found: list[float] = []

    def poll() -> None:
        while not stop.is_set():
            if server.stats()["answered"] >= target:
                found.append(time.perf_counter() - started)
                return
            time.sleep(0.01)

    threading.Thread(target=poll, daemon=True).start()
    return found


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Run the benchmark, print its figures and return the ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--noise", type=float, default=0.10, help="share of instant 429s")
    args = parser.parse_args(argv)

    clean_server, noisy_server = Server(args.latency), Server(args.latency)
    os.environ.update(
        FLOWNB_HOME=tempfile.mkdtemp(prefix="flownb-bench-"), NO_PROXY="127.0.0.1,localhost"
    )
    for name in ("FLOWNB_CACHE", "FLOWNB_RPM", "FLOWNB_CONCURRENCY", "FLOWNB_OPENAI_TRANSPORT"):
        os.environ.pop(name, None)
    import pandas as pd

    import flownb

    flow = {
        "nodes": [
            {"id": "v", "type": "variableNode", "data": {"variable": {"label": "topic"}}},
            {
                "id": "g",
                "type": "actionNode",
                "data": {"name": "say", "prompt": "Say {topic}.", "modelParams": {}},
            },
            {"id": "o", "type": "outputNode", "data": {"name": "say"}},
        ],
        "edges": [
            {"id": "e1", "source": "v", "target": "g"},
            {"id": "e2", "source": "g", "target": "o"},
        ],
    }
    n, c = args.calls, args.concurrency

    def load(name: str, server: Server) -> flownb.LocalFlow:
        endpoint = flownb.Endpoint(name, "openai", base_url=server.url, concurrency=c)
        return flownb.load_flow(flow, name=name, endpoint=endpoint, cache=False, log=False)

    clean, noisy = load("clean", clean_server), load("noisy", noisy_server)
    rows = [{"topic": f"topic {i}"} for i in range(n)]
    ideal = n * args.latency / c
    try:
        noisy_server.configure(instant_429=args.noise)
        clean.run_batch(rows[:50], concurrency=c)  # warm up connections and the loop
        clean_server.reset()
        started = time.perf_counter()
        clean.run_batch(rows, concurrency=c)
        alone = time.perf_counter() - started

        data = pd.DataFrame({"topic": [r["topic"] for r in rows]})

        def together(noise: float) -> tuple[float, float, int, int, int]:
            """Return (clean finish, whole evaluation, failed rows, 429s, clean peak C)."""
            noisy_server.configure(instant_429=noise)
            clean_server.reset()
            noisy_server.reset()
            stop = threading.Event()
            started = time.perf_counter()
            found = _finish_time(clean_server, n, started, stop)
            report = flownb.evaluate(
                {"clean": clean, "noisy": noisy}, data, progress=False, log=False
            )
            whole = time.perf_counter() - started
            for _ in range(200):  # the poller's last look, at most 2 s after the evaluation
                if found:
                    break
                time.sleep(0.01)
            stop.set()
            return (
                found[0] if found else whole,
                whole,
                int(report.results["error"].notna().sum()),
                noisy_server.stats()["faults"]["429"],
                clean_server.stats()["peak_in_flight"],
            )

        twin, _, _, _, twin_peak = together(0.0)
        beside, both, errors, refused, peak = together(args.noise)
    finally:
        clean_server.proc.terminate()
        noisy_server.proc.terminate()
    ratio = beside / alone
    print(f"load average before: {os.getloadavg()[0]:.2f} (2 cores; others' work skews wall)")
    print(
        f"2 endpoints x {n} calls, C={c} each, {args.latency * 1e3:.0f} ms answers; "
        f"ideal {ideal:.2f} s per endpoint"
    )
    print(
        f"  clean endpoint alone                       {alone:6.2f} s  {alone / ideal:5.2f}x ideal"
    )
    print(
        f"  clean beside a clean twin (CPU shared)     {twin:6.2f} s  {twin / ideal:5.2f}x ideal"
        f"  peak in flight {twin_peak}"
    )
    print(
        f"  clean beside one with {args.noise:.0%} instant 429s     {beside:6.2f} s  "
        f"{beside / ideal:5.2f}x ideal  peak in flight {peak}"
    )
    print(
        f"  whole evaluation: {both:.2f} s, {refused} 429s on the noisy one, {errors} failed rows"
    )
    print(
        f"  clean finish beside the noisy one / alone:     {ratio:.2f} (aim: <= 1.0 within noise)"
    )
    print(f"  clean finish beside the noisy one / beside a clean twin: {beside / twin:.2f}")
    return {
        "clean endpoint beside a 429-ing one / alone (aim ~1)": ratio,
        "clean beside a 429-ing one / beside a clean one": beside / twin,
    }


if __name__ == "__main__":
    main()
