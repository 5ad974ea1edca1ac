"""A crash pays at most once: ``flownb run --csv`` over 1,000 rows of a two-node flow against the
loopback fake OpenAI server (30 ms answers, 10% 429 with ``Retry-After: 0``, 5% 500),
``kill -9``-ed 1.2 s after its first request, then run again to the end.

Prints the share of the answers the server had sent before the kill that the re-run bought again
(aim: at most 1%; the call cache journals each answer as it arrives), and the wall
time of an uninterrupted run with the cache against one with ``--no-cache`` (aim: about 1, the
cache costs no throughput).

No client can keep an answer it has not read: the run is stopped (``SIGSTOP``) just before the
kill, and the answers still unread in its sockets' receive buffers then (``/proc/net/tcp``'s
``rx_queue`` of its sockets, matched to the last answer the server sent on each connection) are
counted apart, with the share bought again of those the client process had read.

    python -m bench.crash_rerun [--rows 1000] [--kill-after 1.2] [--repeat 3]
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.flows import PROMPTS, two_node_flow
from bench.latency_batch import KEY, MODEL_PARAMS


def _prompts(fake: object) -> list[str]:
    return [body["messages"][-1]["content"] for body in fake.requests]  # type: ignore[attr-defined]


def unread_answers(pid: int, fake: object) -> set[str] | None:
    """Return the prompts of the 200 answers still unread in the receive buffers of process
    ``pid``'s sockets (stopped: nothing moves), or ``None`` where ``/proc`` cannot say."""
    try:
        inodes = set()
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        ports = set()
        for table in (f"/proc/{pid}/net/tcp", f"/proc/{pid}/net/tcp6"):
            with open(table, encoding="ascii") as fh:
                for line in fh.read().splitlines()[1:]:
                    fields = line.split()
                    unread = int(fields[4].split(":")[1], 16)  # tx_queue:rx_queue
                    if fields[9] in inodes and unread:
                        ports.add(int(fields[1].rsplit(":", 1)[1], 16))  # local port
    except OSError:
        return None
    last = fake.last_answer_on  # type: ignore[attr-defined]
    return {p for p in (last.get(port) for port in ports) if p is not None}


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Run the benchmark, print its figures and return the ratios."""
    import json

    from flownb.testing.fake_openai import FakeOpenAI

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--kill-after", type=float, default=1.2, help="seconds after 1st request")
    parser.add_argument("--repeat", type=int, default=3, help="kill-and-rerun rounds")
    args = parser.parse_args(argv)

    tmp = Path(tempfile.mkdtemp(prefix="flownb-bench-crash-"))
    flow = tmp / "flow.json"
    flow.write_text(json.dumps(two_node_flow(MODEL_PARAMS)))
    data = tmp / "rows.csv"
    with data.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=["topic", "tone"])
        writer.writeheader()
        writer.writerows(
            {"topic": f"topic {i}", "tone": ("dry", "playful", "earnest")[i % 3]}
            for i in range(args.rows)
        )
    ratios: dict[str, float] = {}
    faults = {"429": 0.10, "500": 0.05}
    with FakeOpenAI(latency=0.03, faults=faults, retry_after="0", seed=5) as fake:
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("FLOWNB_", "OPENAI_"))},
            "OPENAI_BASE_URL": fake.url,
            "OPENAI_API_KEY": KEY,
            "NO_PROXY": "127.0.0.1,localhost",
        }

        def cmd(out: Path, *extra: str) -> list[str]:
            return [
                sys.executable, "-m", "flownb", "run", str(flow), "--csv", str(data),
                "--provider", "openai", "--out", str(out), "--no-progress", *extra,
            ]  # fmt: skip

        print(
            f"{args.rows} rows x {len(PROMPTS)} nodes, 30 ms answers, 10% 429 + 5% 500, "
            f"kill -9 {args.kill_after:g} s after the first request; load average "
            f"{os.getloadavg()[0]:.2f} (2 cores)"
        )
        shares: list[float] = []
        read_shares: list[float] = []
        for r in range(args.repeat):
            run_env = {**env, "FLOWNB_HOME": str(tmp / f"home-{r}")}
            fake.reset()
            first = subprocess.Popen(
                cmd(tmp / f"out-{r}.csv"), env=run_env, stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
            while not fake.requests and first.poll() is None:
                time.sleep(0.001)
            time.sleep(args.kill_after)
            # Stopped, then killed: what it had read and journaled is what it had at the stop;
            # answers sent after the stop never reached it.
            first.send_signal(signal.SIGSTOP)
            paid = set(fake.answered_prompts)
            unread = unread_answers(first.pid, fake)
            first.send_signal(signal.SIGKILL)
            first.wait()
            fake.reset()
            subprocess.run(cmd(tmp / f"out-{r}.csv"), env=run_env, check=True,
                           capture_output=True)  # fmt: skip
            again = paid & set(_prompts(fake))
            share = len(again) / max(1, len(paid))
            shares.append(share)
            split = ""
            if unread is not None:
                unread &= paid
                read = len(paid) - len(unread)
                read_again = len(again - unread)
                read_shares.append(read_again / max(1, read))
                split = (
                    f"; {len(unread)} still unread in its sockets at the kill, of the {read} it "
                    f"had read {read_again} bought again = {read_shares[-1]:6.2%}"
                )
            print(
                f"  round {r + 1}: {len(paid):4d} answers sent before the kill, "
                f"{len(again):3d} bought again = {share:6.2%}  (aim <= 1%){split}",
                flush=True,
            )
        ratios["% of answers bought again after kill -9 (aim <= 1)"] = 100 * max(shares)
        if read_shares:
            ratios["% of the answers the client had read bought again"] = 100 * max(read_shares)

        # Throughput: the same batch to the end, with the cache and without, interleaved.
        walls: dict[str, list[float]] = {"cache": [], "no cache": []}
        for r in range(2):
            for label, extra in (("cache", ()), ("no cache", ("--no-cache",))):
                run_env = {**env, "FLOWNB_HOME": str(tmp / f"full-{label}-{r}")}
                fake.reset()
                started = time.perf_counter()
                subprocess.run(cmd(tmp / "full.csv", *extra), env=run_env, check=True,
                               capture_output=True)  # fmt: skip
                walls[label].append(time.perf_counter() - started)
        with_cache, without = min(walls["cache"]), min(walls["no cache"])
        print(
            f"  uninterrupted run (best of 2, whole process): cache {with_cache:.2f} s, "
            f"--no-cache {without:.2f} s, ratio {with_cache / without:.2f}  (aim ~1)"
        )
        ratios["run with cache / without (aim ~1)"] = with_cache / without
    print(f"  worst round: {max(shares):.2%} bought again; median {statistics.median(shares):.2%}")
    return ratios


if __name__ == "__main__":
    main()
