"""Scaling: ``run_dataframe`` over 10,000, 100,000 and 1,000,000 rows of the two-node flow
(offline, run log on), against a ``str.format`` loop making the same prompts, in the same run.

For each size: the default call (progress bar on) against the same call with
``progress=False`` (aim <= 1.2x) and against the loop (aim <= 0.8x at 1M rows); the run log's
share of the fast path's time (against ``log=False``; aim <= 30%); the run log's size on disk
per row (aim <= 120 bytes) and the peak memory of the default call (tracemalloc, in a pass of its
own, as it slows what it traces). Best of ``--repeat`` interleaved rounds (1M rows: one round
fewer, at least one).

    python -m bench.scaling [--sizes 10000,100000,1000000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import gc
import os
import sqlite3
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pandas as pd

import flownb
from bench.flows import PROMPTS, two_node_flow

SIZES = (10_000, 100_000, 1_000_000)


def format_loop(columns: dict[str, list[str]]) -> dict[str, list[str]]:
    """The reference: each node's prompt made with ``str.format`` for every row."""
    out: dict[str, list[str]] = {name: [] for name in PROMPTS}
    for topic, tone in zip(columns["topic"], columns["tone"], strict=True):
        for name, prompt in PROMPTS.items():
            out[name].append(prompt.format(topic=topic, tone=tone))
    return out


def _disk(home: Path) -> int:
    """Return the run log's bytes on disk, its write-ahead log checkpointed into it."""
    path = home / "runs.sqlite"
    db = sqlite3.connect(path)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    return path.stat().st_size


def measure(rows: int, repeat: int) -> dict[str, float]:
    """Return the figures of one size (see the module docstring)."""
    columns = {
        "topic": [f"topic {i}" for i in range(rows)],
        "tone": [("dry", "playful", "earnest")[i % 3] for i in range(rows)],
    }
    df = pd.DataFrame(columns)
    home = Path(tempfile.mkdtemp(prefix="flownb-bench-scaling-"))
    os.environ["FLOWNB_HOME"] = str(home)
    logged = flownb.load_flow(two_node_flow(), provider="offline")
    unlogged = flownb.load_flow(two_node_flow(), provider="offline", log=False)
    runlog = logged.runlog
    assert runlog is not None
    expected = format_loop(columns)
    assert logged.run_dataframe(df, progress=False)["intro"].tolist() == expected["intro"]
    runlog.sync()
    runlog.clear()

    def run(progress: bool) -> Callable[[], None]:
        def timed() -> None:
            logged.run_dataframe(df, progress=progress)
            runlog.sync()  # the log's writes count

        return timed

    candidates: dict[str, Callable[[], object]] = {
        "format": lambda: format_loop(columns),
        "default": run(True),
        "no bar": run(False),
        "no log": lambda: unlogged.run_dataframe(df, progress=False),
    }
    best = dict.fromkeys(candidates, float("inf"))
    runs = 0
    for _ in range(repeat):
        for name, fn in candidates.items():
            gc.collect()
            started = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - started)
        runs += 2  # the default and the no-bar call each logged every row
    disk = _disk(home) / (rows * runs)
    gc.collect()
    tracemalloc.start()
    run(True)()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {
        "seconds, default": best["default"],
        "default / progress=False": best["default"] / best["no bar"],
        "default / str.format loop": best["default"] / best["format"],
        "progress=False / str.format loop": best["no bar"] / best["format"],
        "run log share of progress=False": 1 - best["no log"] / best["no bar"],
        "run log bytes a row on disk": disk,
        "peak MiB, default": peak / 2**20,
    }


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Run the benchmark, print its figures and return them (by size)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    saved = os.environ.get("FLOWNB_HOME")
    figures: dict[str, float] = {}
    try:
        for rows in (int(s) for s in args.sizes.split(",")):
            repeat = max(1, args.repeat - 1) if rows >= 1_000_000 else args.repeat
            print(f"{rows:,} rows (best of {repeat}), load {os.getloadavg()[0]:.2f}", flush=True)
            for label, value in measure(rows, repeat).items():
                print(f"  {label:40s} {value:10.3f}")
                figures[f"{rows:,} rows: {label}"] = value
    finally:
        if saved is None:
            os.environ.pop("FLOWNB_HOME", None)
        else:
            os.environ["FLOWNB_HOME"] = saved
    return figures


if __name__ == "__main__":
    main()
