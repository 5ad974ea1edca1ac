"""A cached re-run: a batch whose every call is in the call cache (10,000 rows x 2 nodes, OpenAI
provider against the loopback fake, which must see no request), against a bare loop over the
same keys that does what a hit needs at least: SQLite ``SELECT value WHERE key = ?`` and
``json.loads``, reading the keys in row order (the order a run needs them: the honest floor; aim
at most 1.3x) and in key order (the table's own order, which SQLite reads faster). Best of
``--repeat`` interleaved rounds. Run it at 10,000 and 100,000 rows to compare the cost per row.

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
from typing import Any

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


def keys_in_row_order(flow: Any, rows: list[dict[str, str]]) -> list[str]:
    """Return the cache keys of ``flow``'s calls for ``rows``, row by row (each row's nodes in
    plan order), made as the runner makes them."""
    from flownb.runtime.cache import CallCache

    engine = flow.runner.engine
    identity = engine.provider.identity()
    steps = engine.plan.steps
    prefixes = [CallCache.prefix(identity, s.kind, s.params, s.system) for s in steps]
    return [
        CallCache.key(prefix, step.template.render(row))
        for row in rows
        for step, prefix in zip(steps, prefixes, strict=True)
    ]


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
        logged = flownb.load_flow(two_node_flow(MODEL_PARAMS), provider="openai", log=True)
        server.reset()
        path = home / "cache.sqlite"
        db = sqlite3.connect(path)
        keys = [k for (k,) in db.execute("SELECT key FROM calls")]
        db.close()
        assert len(keys) == 2 * args.rows, len(keys)
        in_rows = keys_in_row_order(flow, rows)
        assert sorted(in_rows) == keys  # the same keys, in the order the run needs them
        print(f"load average before: {os.getloadavg()[0]:.2f} (others' work skews wall time)")

        def logged_run() -> None:
            logged.run_batch(rows)
            logged.runlog.sync()  # type: ignore[union-attr]

        timings = fastest(
            {
                "bare SELECT + json.loads loop": lambda: bare_loop(path, in_rows),
                "the same loop, keys in key order": lambda: bare_loop(path, keys),
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
        print(
            f"  {label:36s}{floor * 1e3:8.1f} ms ({floor / n * 1e6:.1f} us/row), keys in row order"
        )
        ratios: dict[str, float] = {"flownb per row, microseconds (run log on)": 0.0}
        for label, t in timings.items():
            ratios[f"{label} / bare loop"] = t / floor
            print(
                f"  {label:36s}{t * 1e3:8.1f} ms ({t / n * 1e6:.1f} us/row) "
                f"{t / floor:5.2f}x the bare loop (aim <= 1.3)"
            )
        ratios["flownb per row, microseconds (run log on)"] = (
            timings["run_batch, all hits (run log on)"] / n * 1e6
        )
        print(f"  provider requests during the re-runs: {calls} (must be 0)")
        ratios["provider requests during re-runs"] = calls
        print(f"load average after: {os.getloadavg()[0]:.2f}")
    finally:
        server.stop()
    return ratios


if __name__ == "__main__":
    main()
