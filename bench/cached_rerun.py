"""A cached re-run at 10,000 and at 100,000 rows: a batch whose every call is in the call cache
(rows x 2 nodes, OpenAI provider against the loopback fake, which must see no request), against
a bare loop over the same keys that does what a hit needs at least: SQLite
``SELECT value WHERE key = ?`` and ``json.loads``, reading the keys in row order (the order a
run needs them: the honest floor; aim at most 1.3x at 100,000 rows) and in key order (the
table's own order). Each size has a cache of its own, filled by a run; the sizes and their
candidates are timed in interleaved rounds (best of ``--repeat``), so flownb's cost a row at
100,000 over that at 10,000 (aim at most 1.15) and the bare loop's own are measured alike;
flownb's ratio is also given in the process's CPU time, which a loaded machine skews less.

    python -m bench.cached_rerun [--rows 10000] [--repeat 5]   # --rows: one size only
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


def fastest(
    candidates: dict[tuple[int, str], Callable[[], object]], rounds: int
) -> tuple[dict[tuple[int, str], float], dict[tuple[int, str], float]]:
    """Return each candidate's best wall time and best CPU time of the process (every thread:
    the run log's writer too; what other processes take of the cores is not in it) over
    ``rounds`` interleaved rounds."""
    wall = dict.fromkeys(candidates, float("inf"))
    cpu = dict.fromkeys(candidates, float("inf"))
    for _ in range(rounds):
        for name, fn in candidates.items():
            gc.collect()
            started, used = time.perf_counter(), time.process_time()
            fn()
            wall[name] = min(wall[name], time.perf_counter() - started)
            cpu[name] = min(cpu[name], time.process_time() - used)
    return wall, cpu


def rows_of(n: int) -> list[dict[str, str]]:
    """Return ``n`` rows of the two-node flow's variables."""
    return [{"topic": f"topic {i}", "tone": ("dry", "playful", "earnest")[i % 3]} for i in range(n)]


def prepared(n: int, home: Path) -> dict[str, Callable[[], object]]:
    """Fill the cache in ``home`` with a run of ``n`` rows; return the candidates that re-run
    them (the environment's ``FLOWNB_HOME`` is ``home`` while the flows load)."""
    import flownb

    os.environ["FLOWNB_HOME"] = str(home)
    rows = rows_of(n)
    flow = flownb.load_flow(two_node_flow(MODEL_PARAMS), provider="openai", log=False)
    flow.run_batch(rows, concurrency=32)  # fills the cache
    logged = flownb.load_flow(two_node_flow(MODEL_PARAMS), provider="openai", log=True)
    path = home / "cache.sqlite"
    db = sqlite3.connect(path)
    keys = [k for (k,) in db.execute("SELECT key FROM calls")]
    db.close()
    assert len(keys) == 2 * n, len(keys)
    in_rows = keys_in_row_order(flow, rows)
    assert sorted(in_rows) == keys  # the same keys, in the order the run needs them

    def logged_run() -> None:
        logged.run_batch(rows)
        logged.runlog.sync()  # type: ignore[union-attr]

    return {
        FLOOR: lambda: bare_loop(path, in_rows),
        "the same loop, keys in key order": lambda: bare_loop(path, keys),
        "run_batch, all hits (run log off)": lambda: flow.run_batch(rows),
        LOGGED: logged_run,
    }


FLOOR = "bare SELECT + json.loads loop"
LOGGED = "run_batch, all hits (run log on)"
SIZES = (10_000, 100_000)


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Run the benchmark, print its figures and return them."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, help="one size only (default: 10,000 and 100,000)")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    sizes = (args.rows,) if args.rows else SIZES

    server = Server(0.0)
    top = Path(tempfile.mkdtemp(prefix="flownb-bench-"))
    os.environ.update(OPENAI_BASE_URL=server.url, OPENAI_API_KEY=KEY, NO_PROXY="127.0.0.1")
    for name in ("FLOWNB_CACHE", "FLOWNB_RPM", "FLOWNB_CONCURRENCY", "FLOWNB_OPENAI_TRANSPORT"):
        os.environ.pop(name, None)
    try:
        candidates = {
            (n, label): fn for n in sizes for label, fn in prepared(n, top / f"rows-{n}").items()
        }
        server.reset()
        print(f"load average before: {os.getloadavg()[0]:.2f} (others' work skews wall time)")
        timings, cpu = fastest(candidates, args.repeat)
        calls = server.stats()["requests"]
    finally:
        server.stop()
    figures: dict[str, float] = {}
    per_row: dict[tuple[int, str], float] = {key: t / key[0] * 1e6 for key, t in timings.items()}
    for n in sizes:
        floor = timings[n, FLOOR]
        print(f"cached re-run: {n:,} rows x 2 nodes, every call a hit (best of {args.repeat})")
        print(f"  {FLOOR:36s}{floor * 1e3:8.1f} ms ({per_row[n, FLOOR]:.1f} us/row), row order")
        figures[f"{n:,} rows: flownb per row, microseconds (run log on)"] = per_row[n, LOGGED]
        figures[f"{n:,} rows: bare loop per row, microseconds"] = per_row[n, FLOOR]
        for (m, label), t in timings.items():
            if m != n or label == FLOOR:
                continue
            figures[f"{n:,} rows: {label} / bare loop"] = t / floor
            print(
                f"  {label:36s}{t * 1e3:8.1f} ms ({per_row[n, label]:.1f} us/row) "
                f"{t / floor:5.2f}x the bare loop (aim <= 1.3)"
            )
    if len(sizes) == 2:
        small, large = sizes
        grows = per_row[large, LOGGED] / per_row[small, LOGGED]
        floor_grows = per_row[large, FLOOR] / per_row[small, FLOOR]
        print(
            f"  per row, {large:,} over {small:,} rows: flownb (run log on) {grows:.2f} "
            f"(aim <= 1.15), the bare loop {floor_grows:.2f}"
        )
        # CPU time: what the process itself spent, which others' work on the cores skews less.
        cpu_grows = (cpu[large, LOGGED] / large) / (cpu[small, LOGGED] / small)
        print(f"  CPU time a row, {large:,} over {small:,} rows: flownb {cpu_grows:.2f}")
        figures[f"flownb per row, {large:,} / {small:,} rows (run log on)"] = grows
        figures[f"bare loop per row, {large:,} / {small:,} rows"] = floor_grows
        figures[f"flownb CPU time per row, {large:,} / {small:,} rows (run log on)"] = cpu_grows
    print(f"  provider requests during the re-runs: {calls} (must be 0)")
    figures["provider requests during re-runs"] = calls
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return figures


if __name__ == "__main__":
    main()
