"""Live view overhead: 1,000 rows of the two-node flow against the loopback fake OpenAI server (in
another process) answering after 50 ms, at concurrency 32, in a real Jupyter kernel driven by
jupyter_client (which receives and decodes every message, as a front end does).

The same batch runs with the live results view (``FLOWNB_LIVE=1``) and without it (``0``: the
notebook's tqdm widget bar, today's view), alternating, ``--repeat`` times each, timed inside the
kernel; the cache is off so every run makes its calls. Prints the median ratio live / bar
(aim: <= 1.05) and, for contrast, live / no progress at all; and the number of view updates a
run sent (at most 4 a second).

    python -m bench.live_view [--rows 1000] [--latency 0.05] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
from typing import Any

from bench.flows import two_node_flow
from bench.latency_batch import KEY, MODEL_PARAMS, Server

SETUP = """
import json, os, time
import pandas as pd
import flownb
flow = flownb.load_flow(json.loads({flow!r}), name="bench", provider="openai", cache=False,
                        log=False, concurrency=32)
df = pd.DataFrame({{"topic": [f"topic {{i}}" for i in range({rows})],
                   "tone": [("dry", "playful", "earnest")[i % 3] for i in range({rows})]}})
def timed(live, progress=True):
    os.environ["FLOWNB_LIVE"] = live
    started = time.perf_counter()
    out = flow.run_dataframe(df, progress=progress)
    took = time.perf_counter() - started
    assert "error" not in out.columns
    return took
"""


def _run(kc: Any, code: str) -> tuple[str, int]:
    """Run ``code`` in the kernel; return what it printed and how many view updates it sent."""
    printed: list[str] = []
    updates = 0

    def hook(msg: dict[str, Any]) -> None:
        nonlocal updates
        if msg["msg_type"] == "stream":
            printed.append(msg["content"]["text"])
        elif msg["msg_type"] == "comm_msg" and "flownb-live" in str(msg["content"]["data"]):
            updates += 1
        elif msg["msg_type"] == "error":
            raise RuntimeError("\n".join(msg["content"]["traceback"]))

    reply = kc.execute_interactive(code, output_hook=hook, timeout=600)
    if reply["content"]["status"] != "ok":
        raise RuntimeError(f"kernel: {reply['content'].get('evalue')}")
    return "".join(printed), updates


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Run the benchmark, print its figures and return the ratio live / bar."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    from jupyter_client.manager import KernelManager

    server = Server(args.latency)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLOWNB_", "OPENAI_"))}
    env.update(
        FLOWNB_HOME=tempfile.mkdtemp(prefix="flownb-bench-live-"),
        OPENAI_BASE_URL=server.url,
        OPENAI_API_KEY=KEY,
        NO_PROXY="127.0.0.1,localhost",
    )
    km = KernelManager(kernel_name="python3")
    km.start_kernel(env=env)
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=120)
        flow = json.dumps(two_node_flow(MODEL_PARAMS))
        _run(kc, SETUP.format(flow=flow, rows=args.rows))
        _run(kc, "timed('0'); timed('1')")  # warm: imports, connections, widget classes
        times: dict[str, list[float]] = {"bar": [], "live": [], "none": []}
        rates: list[float] = []
        for _ in range(args.repeat):
            for kind, call in (
                ("bar", "timed('0')"),
                ("live", "timed('1')"),
                ("none", "timed('0', progress=False)"),
            ):
                printed, updates = _run(kc, f"print({call})")
                times[kind].append(float(printed))
                if kind == "live":
                    rates.append(updates / times[kind][-1])
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
        server.stop()
    bar, live, none = (statistics.median(times[k]) for k in ("bar", "live", "none"))
    ratio = live / bar
    print(f"  {args.rows} rows x 2 nodes at {args.latency * 1e3:.0f} ms, C=32, in a kernel")
    print(f"  tqdm bar (FLOWNB_LIVE=0)  {bar:6.2f} s   runs {times['bar']}")
    print(f"  live view (FLOWNB_LIVE=1) {live:6.2f} s   runs {times['live']}")
    print(f"  no progress               {none:6.2f} s   runs {times['none']}")
    print(f"  view updates a second, per live run: {', '.join(f'{r:.1f}' for r in rates)}")
    print(f"  live / bar                {ratio:6.3f}  (aim <= 1.05)")
    print(f"  live / no progress        {live / none:6.3f}")
    return {"live view / tqdm bar (1,000 rows, 50 ms)": ratio}


if __name__ == "__main__":
    main()
