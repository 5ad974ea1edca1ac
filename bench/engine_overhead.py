"""Engine overhead: 10,000 rows of a two-node text flow on the offline provider, against a plain
Python loop doing the same substitutions, in the same run. Aim: ratio under 3x.

    python -m bench.engine_overhead [--rows 10000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from collections.abc import Callable

import pandas as pd

import flownb

PROMPTS = {
    "intro": "Write a {tone} two-sentence intro for a blog post about {topic}.",
    "title": "Suggest a {tone} title for a post about {topic}.",
}


def two_node_flow() -> dict:
    """A flow of two text nodes, each using both variables, each feeding an output."""
    nodes: list[dict] = [
        {"id": f"v-{v}", "type": "variableNode", "data": {"variable": {"label": v, "value": ""}}}
        for v in ("topic", "tone")
    ]
    edges: list[dict] = []
    for name, prompt in PROMPTS.items():
        nodes.append(
            {
                "id": f"a-{name}",
                "type": "actionNode",
                "data": {"name": name, "prompt": prompt, "modelParams": {"model": "m"}},
            }
        )
        nodes.append({"id": f"o-{name}", "type": "outputNode", "data": {"name": name}})
        edges += [
            {"id": f"{v}-{name}", "source": f"v-{v}", "target": f"a-{name}"}
            for v in ("topic", "tone")
        ]
        edges.append({"id": f"{name}-out", "source": f"a-{name}", "target": f"o-{name}"})
    return {"nodes": nodes, "edges": edges}


def plain_loop(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    """The reference: what a user would write by hand with str.replace."""
    out = []
    for row in rows:
        result = {}
        for name, prompt in PROMPTS.items():
            text = prompt
            for label, value in row.items():
                text = text.replace("{" + label + "}", value)
            result[name] = text
        out.append(result)
    return out


def best_of(fn: Callable[[], object], repeat: int) -> float:
    """Return the median wall time of ``repeat`` calls (GC collected between, not during)."""
    times = []
    for _ in range(repeat):
        gc.collect()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Run the benchmark, print its figures and return the ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)

    rows = [
        {"topic": f"topic {i}", "tone": ("dry", "playful", "earnest")[i % 3]}
        for i in range(args.rows)
    ]
    flow = flownb.load_flow(two_node_flow(), provider="offline")
    # The engine must agree with the reference before its speed means anything.
    assert [dict(r) for r in flow.run_batch(rows)] == plain_loop(rows)
    df = pd.DataFrame(rows)

    t_loop = best_of(lambda: plain_loop(rows), args.repeat)
    t_batch = best_of(lambda: flow.run_batch(rows), args.repeat)
    t_frame = best_of(lambda: flow.run_dataframe(df, progress=False), args.repeat)
    t_frame_bar = best_of(lambda: flow.run_dataframe(df, progress=True), args.repeat)
    ratios = {
        "run_batch / plain loop": t_batch / t_loop,
        "run_dataframe / plain loop": t_frame / t_loop,
        "run_dataframe with progress bar / plain loop": t_frame_bar / t_loop,
    }
    n, ms = args.rows, 1e3
    print(f"engine overhead: {n} rows x 2 text nodes, offline provider (median of {args.repeat})")
    for label, t in (
        ("plain loop (str.replace)", t_loop),
        ("flow.run_batch", t_batch),
        ("flow.run_dataframe", t_frame),
        ("flow.run_dataframe + tqdm bar", t_frame_bar),
    ):
        print(f"  {label:32s}{t * ms:8.1f} ms  ({t / n * 1e6:.2f} us/row)")
    for name, ratio in ratios.items():
        print(f"  ratio {name:45s} {ratio:5.2f}x  (aim < 3x)")
    return ratios


if __name__ == "__main__":
    main()
