"""Peak memory of a 100,000-row DataFrame batch, against the DataFrame's own size, in the same
run (tracemalloc: Python allocations, which is where a batch's memory goes).

    python -m bench.memory_frame [--rows 100000]

Two ratios: peak extra memory during ``run_dataframe`` over the input frame's deep size, and
over the input plus the output columns it must produce (the part that is overhead). Then the
output columns' own size as the ``string`` dtype run_dataframe gives them, against the same text
as ``object`` columns (what it gave before) and pandas' default ``str``.
"""

from __future__ import annotations

import argparse
import gc
import tracemalloc

import pandas as pd

import flownb
from bench.flows import two_node_flow


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Run the benchmark, print its figures and return the ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    args = parser.parse_args(argv)

    df = pd.DataFrame(
        {
            "topic": [f"topic number {i}" for i in range(args.rows)],
            "tone": [("dry", "playful", "earnest")[i % 3] for i in range(args.rows)],
        }
    )
    input_size = df.memory_usage(deep=True).sum()
    mib = 1024 * 1024
    print(f"memory: run_dataframe over {args.rows} rows x 2 text nodes, offline provider")
    print(f"  input frame (deep)          {input_size / mib:8.1f} MiB")
    ratios: dict[str, float] = {}
    for label, log in (("run log off", False), ("run log on (default)", True)):
        flow = flownb.load_flow(two_node_flow(), provider="offline", log=log)
        gc.collect()
        tracemalloc.start()
        base, _ = tracemalloc.get_traced_memory()
        out = flow.run_dataframe(df, progress=False)
        if flow.runlog is not None:
            flow.runlog.sync()  # the log's serialising counts too
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert len(out) == args.rows and out["intro"].notna().all()
        output_size = out.memory_usage(deep=True).sum() - input_size
        extra = peak - base
        print(f"  {label}: output columns {output_size / mib:.1f} MiB, peak {extra / mib:.1f} MiB")
        ratios[f"peak / input frame, {label}"] = extra / input_size
        ratios[f"peak / (input + output columns), {label}"] = extra / (input_size + output_size)
    ratios.update(text_dtypes(out[flow.outputs]))
    for name, ratio in ratios.items():
        print(f"  ratio {name:52s} {ratio:5.2f}x")
    return ratios


def text_dtypes(outputs: pd.DataFrame) -> dict[str, float]:
    """Print the deep size of ``outputs`` (run_dataframe's text columns) as ``string`` (what
    run_dataframe gives), ``object`` and ``str``; return the ratios to ``string``."""
    mib = 1024 * 1024
    sizes = {}
    for dtype in ("string", "object", "str"):
        sizes[dtype] = outputs.astype(dtype).memory_usage(deep=True, index=False).sum()
    storage = pd.StringDtype().storage
    print(f"  output columns, {len(outputs)} rows, as dtype:")
    for dtype, size in sizes.items():
        mark = f" (run_dataframe's; storage {storage})" if dtype == "string" else ""
        print(f"    {dtype:8s} {size / mib:8.1f} MiB{mark}")
    return {
        f"output columns object / string ({storage})": sizes["object"] / sizes["string"],
        f"output columns str / string ({storage})": sizes["str"] / sizes["string"],
    }


if __name__ == "__main__":
    main()
