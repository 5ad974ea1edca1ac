"""``python -m bench``: every benchmark in turn, then a summary of the ratios.

Each benchmark measures its own reference in the same run (a plain loop, the ideal bound, a bare
FastAPI route, the DataFrame's size), so the ratios are comparable across noisy machines where
absolute times are not. ``python -m bench NAME ...`` runs only the named ones, and
``python -m bench NAME --its-options`` one with its own options (``--quick``, ``--rows 100000``);
``python -m bench --write [NAME ...]`` also writes their figures into the pages' generated blocks
(see :mod:`bench.pages`). Before anything is timed, flownb, the benchmarks and every installed
package are compiled to bytecode (both sides of every ratio), or the run is refused.
"""

from __future__ import annotations

import compileall
import importlib
import os
import sys
import sysconfig
import time
from pathlib import Path

BENCHMARKS = {
    "engine_overhead": "engine vs a plain loop (10,000 rows, offline)",
    "scaling": "run_dataframe at 10k, 100k, 1M rows: bar, str.format loop, run log, memory, disk",
    "latency_batch": "latency-bound batch vs the ideal bound (loopback OpenAI server)",
    "crash_rerun": "answers bought again after kill -9 of a CLI batch vs those received",
    "backoff": "random 429s, a concurrency limit, a rate limit with headers vs their ideals",
    "server_throughput": "flownb serve vs a bare FastAPI route (requests/s)",
    "memory_frame": "peak memory of a 100,000-row DataFrame batch vs the frame",
    "evaluate_batch": "evaluation: 2 variants + judge vs the ideal; 100,000 x 2 peak memory",
    "dask_scale": "Dask on 2 process workers vs pandas; cluster C=32 vs ideal; serve --workers",
    "batch_api": "10k and 50k rows x 2 nodes via the batch API: client CPU, memory vs a bare loop",
    "endpoints": "2 endpoints x 1,000 calls, one with 10% 429s: the clean one vs alone",
    "live_view": "notebook live view vs the tqdm bar: 1,000 rows at 50 ms in a kernel",
    "stream_first_token": "first streamed text seen vs the provider's first token (aim <= 50 ms)",
    "cold_start": "import flownb, flownb --help, a one-row offline run vs import pandas",
    "first_batch": "a fresh process's first batch under 10% instant 429s vs ideal and bare aiohttp",
    "cached_rerun": "10k and 100k rows, every call a cache hit, vs a bare SELECT + json.loads loop",
}


def compiled() -> list[str]:
    """Compile flownb, the benchmarks and the installed packages to bytecode (``compileall``
    writes it whatever ``PYTHONDONTWRITEBYTECODE`` says); return the folders that failed."""
    import flownb

    folders = {Path(flownb.__file__).parent, Path(__file__).parent}
    folders |= {Path(sysconfig.get_paths()[key]) for key in ("purelib", "platlib")}
    failed = []
    for folder in sorted(folders):
        if folder.is_dir() and not compileall.compile_dir(folder, quiet=2, workers=0):
            failed.append(str(folder))
    return failed


def main(argv: list[str]) -> int:
    """Run the named benchmarks (all by default); print a summary. Returns an exit status."""
    write = "--write" in argv
    args = [a for a in argv if a != "--write"]
    # The names come first; from the first option on, everything is that benchmark's.
    first = next((i for i, a in enumerate(args) if a.startswith("-")), len(args))
    names, options = args[:first], args[first:]
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        print(f"unknown benchmark(s): {', '.join(unknown)}; choose from {', '.join(BENCHMARKS)}")
        return 2
    if options and (len(names) != 1 or write):
        print(
            "options go to one named benchmark, and not with --write (the pages hold the "
            "figures of its defaults): python -m bench NAME [its options]"
        )
        return 2
    failed = compiled()
    if failed:
        print(f"refused: cannot compile {', '.join(failed)} to bytecode (timings would differ)")
        return 1
    summary: list[tuple[str, str, float]] = []
    for name in names or list(BENCHMARKS):
        print(f"\n=== {name}: {BENCHMARKS[name]}", flush=True)
        started, load = time.perf_counter(), os.getloadavg()[0]
        ratios = importlib.import_module(f"bench.{name}").main(options) or {}
        print(f"({time.perf_counter() - started:.0f} s)", flush=True)
        summary += [(name, label, value) for label, value in ratios.items()]
        if write:
            from bench.pages import write as write_pages

            pages = write_pages(name, ratios, loads=(load, os.getloadavg()[0]))
            print(f"written into {', '.join(p.name for p in pages) or 'no page (no block)'}")
    print("\n=== summary (ratios measured in the same run)")
    for name, label, value in summary:
        print(f"  {name:18s} {label:48s} {value:7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
