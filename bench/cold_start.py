"""Cold start: fresh processes, each timed whole (interpreter start included), against
``python -c "import pandas"`` in the same run: ``import flownb``, ``flownb --help`` and a one-row
offline ``flownb run``. Rounds interleave the four; the median of each is reported (the machine
may be shared). Aims: import flownb <= 0.2x import pandas, --help <= 0.2x, the run <= 1.0x.

Both sides are timed with their bytecode compiled: before timing anything, the benchmark
compiles what is not yet compiled (the environment's site-packages, where pandas lives, and
flownb's own package) with ``compileall``, whatever ``PYTHONDONTWRITEBYTECODE`` says, and checks
that pandas and flownb have their ``.pyc`` files. An uncompiled pandas takes several times
longer to import, which would flatter every ratio against it.

    python -m bench.cold_start [--repeat 7]
"""

from __future__ import annotations

import argparse
import compileall
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from importlib.metadata import entry_points
from pathlib import Path

from bench.flows import two_node_flow


def _compiled(package: str) -> bool:
    """Whether the source of ``package``'s ``__init__`` has its up-to-date ``.pyc``."""
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        return False
    source = Path(spec.origin)
    cached = Path(importlib.util.cache_from_source(str(source)))
    return cached.is_file() and cached.stat().st_mtime >= source.stat().st_mtime


def compile_both_sides() -> None:
    """Compile the environment's site-packages and flownb (what is not compiled yet), then check
    that pandas and flownb have their bytecode.

    Raises:
        SystemExit: a side still has no bytecode (its folder cannot be written).
    """
    import flownb

    folders = {Path(sysconfig.get_paths()["purelib"]), Path(flownb.__file__).parent}
    for folder in sorted(folders):
        # quiet=2: errors only (a test fixture that is not valid Python, ...); a file that does
        # not compile is imported by neither side.
        compileall.compile_dir(folder, quiet=2, workers=0)
    missing = [p for p in ("pandas", "flownb", "pandas.core.frame") if not _compiled(p)]
    if missing:
        raise SystemExit(f"cold_start: no bytecode for {', '.join(missing)}; cannot time fairly")


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Run the benchmark, print its figures and return the ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args(argv)
    compile_both_sides()

    folder = Path(tempfile.mkdtemp(prefix="flownb-bench-"))
    flow = folder / "flow.json"
    flow.write_text(json.dumps(two_node_flow()), encoding="utf-8")
    env = {**os.environ, "FLOWNB_HOME": str(folder / "home"), "FLOWNB_PROVIDER": "offline"}
    python = sys.executable
    # What the `flownb` console script runs (its entry point, as installed).
    (script,) = entry_points(group="console_scripts", name="flownb")
    module, _, function = script.value.partition(":")
    cli = [python, "-c", f"from {module} import {function}; {function}()"]
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
    print(
        "cold start, fresh processes, bytecode compiled, "
        f"median of {args.repeat} interleaved rounds"
    )
    label = 'python -c "import pandas"'
    print(f"  {label:34s}{floor * 1e3:8.0f} ms")
    aims = {"import flownb": 0.2, "flownb --help": 0.2, "flownb run (1 row, offline)": 1.0}
    ratios: dict[str, float] = {}
    for name, t in medians.items():
        ratios[f"{name} / import pandas"] = t / floor
        print(
            f"  {name:34s}{t * 1e3:8.0f} ms  {t / floor:5.2f}x import pandas (aim <= {aims[name]})"
        )
    return ratios


if __name__ == "__main__":
    main()
