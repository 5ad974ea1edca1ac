"""A cached re-run: a batch whose every call is in the call cache (10,000 rows x 2 nodes, OpenAI
provider against the loopback fake, which must see no request), against a bare loop over the
same keys that does what a hit needs at least: SQLite ``SELECT value WHERE key = ?`` and
``json.loads``. Best of ``--repeat`` interleaved rounds. Aim: at most 1.5x the bare loop.

    python -m bench.cached_rerun [--rows 10000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sqlite3
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench.flows import two_node_flow
from bench.latency_batch import KEY, MODEL_PARAMS, Server


def bare_loop(path: Path, keys: list[str]) -> int:
    """Return how many of ``keys`` one SELECT each found (each value decoded)."""
    db = sqlite3.connect(path)
    found = 0
    for key in keys:
        row = db.execute("SELECT value FROM calls WHERE key = ?", (key,)).fetchone()
        if row is not None:
            json.loads(row[0])
            found += 1
    db.close()
    return found


def fastest(candidates: dict[str, Callable[[], object]], rounds: int) -> dict[str, float]:
    """Return each candidate's best wall time over ``rounds`` interleaved rounds."""
    best = dict.fromkeys(candidates, float("inf"))
    for _ in range(rounds):
        for name, fn in candidates.items():
            gc.collect()
            started = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - started)
    return best


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Run the benchmark, print its figures and return the ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)

    server = Server(0.0)
    home = Path(tempfile.mkdtemp(prefix="flownb-bench-"))
    os.environ.update(
        FLOWNB_HOME=str(home), OPENAI_BASE_URL=server.url, OPENAI_API_KEY=KEY, NO_PROXY="127.0.0.1"
    )
    for name in ("FLOWNB_CACHE", "FLOWNB_RPM", "FLOWNB_CONCURRENCY", "FLOWNB_OPENAI_TRANSPORT"):
        os.environ.pop(name, None)
    import flownb

    rows = [
        {"topic": f"topic {i}", "tone": ("dry", "playful", "earnest")[i % 3]}
        for i in range(args.rows)
    ]
    try:
        flow = flownb.load_flow(two_node_flow(MODEL_PARAMS), provider="openai", log=False)
        flow.run_batch(rows, concurrency=32)  # fills the cache
        logged = flownb.load_flow(two_node_flow(MODEL_PARAMS), provider="openai")
        server.reset()
        path = home / "cache.sqlite"
        db = sqlite3.connect(path)
        keys = [k for (k,) in db.execute("SELECT key FROM calls")]
        db.close()
        assert len(keys) == 2 * args.rows, len(keys)
        print(f"load average before: {os.getloadavg()[0]:.2f} (others' work skews wall time)")

        def logged_run() -> None:
            logged.run_batch(rows)
            logged.runlog.sync()  # type: ignore[union-attr]

        timings = fastest(
            {
                "bare SELECT + json.loads loop": lambda: bare_loop(path, keys),
                "run_batch, all hits (run log off)": lambda: flow.run_batch(rows),
                "run_batch, all hits (run log on)": logged_run,
            },
            args.repeat,
        )
        calls = server.stats()["requests"]
        floor = timings.pop("bare SELECT + json.loads loop")
        n = args.rows
        print(f"cached re-run: {n} rows x 2 nodes, every call a hit (best of {args.repeat})")
        label = "bare SELECT + json.loads loop"
        print(f"  {label:36s}{floor * 1e3:8.1f} ms ({floor / n * 1e6:.1f} us/row)")
        ratios: dict[str, float] = {}
        for label, t in timings.items():
            ratios[f"{label} / bare loop"] = t / floor
            print(
                f"  {label:36s}{t * 1e3:8.1f} ms ({t / n * 1e6:.1f} us/row) "
                f"{t / floor:5.2f}x the bare loop (aim <= 1.5)"
            )
        print(f"  provider requests during the re-runs: {calls} (must be 0)")
        ratios["provider requests during re-runs"] = calls
        print(f"load average after: {os.getloadavg()[0]:.2f}")
    finally:
        server.stop()
    return ratios


if __name__ == "__main__":
    main()
