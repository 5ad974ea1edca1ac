"""Cold start: fresh processes, each timed whole (interpreter start included), against
``python -c "import pandas"`` in the same run: ``import flownb``, ``flownb --help`` and a one-row
offline ``flownb run``. Rounds interleave the four; the median of each is reported (the machine
may be shared). Aims: import flownb <= 0.5x import pandas, --help <= 0.3x, the run <= 1.2x.

    python -m bench.cold_start [--repeat 7]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.flows import two_node_flow


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Run the benchmark, print its figures and return the ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args(argv)

    folder = Path(tempfile.mkdtemp(prefix="flownb-bench-"))
    flow = folder / "flow.json"
    flow.write_text(json.dumps(two_node_flow()), encoding="utf-8")
    env = {**os.environ, "FLOWNB_HOME": str(folder / "home"), "FLOWNB_PROVIDER": "offline"}
    python = sys.executable
    cli = [python, "-c", "from flownb.cli.main import main; main()"]
    commands = {
        "import pandas": [python, "-c", "import pandas"],
        "import flownb": [python, "-c", "import flownb"],
        "flownb --help": [*cli, "--help"],
        "flownb run (1 row, offline)": [
            *cli,
            "run",
            str(flow),
            "--var",
            "topic=a",
            "--var",
            "tone=b",
        ],
    }
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(args.repeat):
        for name, command in commands.items():
            started = time.perf_counter()
            subprocess.run(command, env=env, check=True, capture_output=True)
            times[name].append(time.perf_counter() - started)
    medians = {name: statistics.median(t) for name, t in times.items()}
    floor = medians.pop("import pandas")
    print(f"load average: {os.getloadavg()[0]:.2f} (others' work skews wall time)")
    print(f"cold start, fresh processes, median of {args.repeat} interleaved rounds")
    label = 'python -c "import pandas"'
    print(f"  {label:34s}{floor * 1e3:8.0f} ms")
    aims = {"import flownb": 0.5, "flownb --help": 0.3, "flownb run (1 row, offline)": 1.2}
    ratios: dict[str, float] = {}
    for name, t in medians.items():
        ratios[f"{name} / import pandas"] = t / floor
        print(
            f"  {name:34s}{t * 1e3:8.0f} ms  {t / floor:5.2f}x import pandas (aim <= {aims[name]})"
        )
    return ratios


if __name__ == "__main__":
    main()
