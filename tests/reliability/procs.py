"""Real flownb processes for the reliability suites: ``flownb serve`` on a free loopback port,
``flownb keys create``, and the server's resident memory read from /proc."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

__all__ = ["Served", "create_key", "flownb_cli", "free_port", "rss_bytes", "serve"]


@dataclass
class Served:
    """A running ``flownb serve``: its base URL, process and log files."""

    url: str
    process: subprocess.Popen[bytes]
    stdout: Path
    stderr: Path

    def logs(self) -> str:
        """Return everything the server wrote to stdout and stderr so far."""
        return "".join(p.read_text(errors="replace") for p in (self.stdout, self.stderr))


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def flownb_cli(
    args: Sequence[str], env: Mapping[str, str], timeout: float = 60, **kwargs: object
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m flownb ARGS`` (the installed CLI) and return the completed process."""
    return subprocess.run(
        [sys.executable, "-m", "flownb", *args],
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        **kwargs,  # type: ignore[arg-type]
    )


def create_key(env: Mapping[str, str], name: str) -> str:
    """Create an API key in ``env``'s FLOWNB_HOME with the CLI and return it.

    Raises:
        AssertionError: the CLI failed or printed more than the key.
    """
    done = flownb_cli(["keys", "create", "--name", name], env)
    assert done.returncode == 0, done.stderr
    key = done.stdout.strip()
    assert key and "\n" not in key, f"keys create printed more than a key: {done.stdout!r}"
    return key


def rss_bytes(pid: int) -> int:
    """Return the resident set size of process ``pid`` in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


@contextmanager
def serve(
    flows_dir: Path,
    env: Mapping[str, str],
    logs_dir: Path,
    *,
    provider: str = "offline",
    extra: Sequence[str] = (),
    timeout: float = 30,
) -> Iterator[Served]:
    """Run ``flownb serve`` on 127.0.0.1 until the block ends, then stop it (SIGTERM, then
    SIGKILL after 15 s).

    Raises:
        RuntimeError: the server exited or did not answer ``/healthz`` within ``timeout`` s.
    """
    port = free_port()
    logs_dir.mkdir(parents=True, exist_ok=True)
    out, err = logs_dir / f"serve-{port}.out", logs_dir / f"serve-{port}.err"
    cmd = [
        sys.executable, "-m", "flownb", "serve", "--flows", str(flows_dir),
        "--host", "127.0.0.1", "--port", str(port), "--provider", provider, *extra,
    ]  # fmt: skip
    with out.open("wb") as fo, err.open("wb") as fe:
        process = subprocess.Popen(
            cmd, env=dict(env), stdin=subprocess.DEVNULL, stdout=fo, stderr=fe,
            start_new_session=True,
        )  # fmt: skip
    served = Served(f"http://127.0.0.1:{port}", process, out, err)
    try:
        deadline = time.monotonic() + timeout
        # One client for every try: httpx.get makes a client per call, and each loads the CA
        # bundle into a new SSL context (about 40 ms of CPU), unused on plain loopback HTTP.
        with httpx.Client(timeout=2) as http:
            while True:
                if process.poll() is not None:
                    raise RuntimeError(
                        f"flownb serve exited ({process.returncode}):\n{served.logs()}"
                    )
                try:
                    if http.get(f"{served.url}/healthz").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"flownb serve did not come up in {timeout}s:\n{served.logs()}"
                    )
                time.sleep(0.2)
        yield served
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)
