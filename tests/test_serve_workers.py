"""``flownb serve --workers 2`` as a real subprocess: two worker processes behind one port that
share keys (created and revoked while serving), media and hot reload through FLOWNB_HOME."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.conftest import ROOT
from tests.serving import free_port, sample_flows

ROUNDS = 24  # fresh connections per check: the kernel spreads them over both workers


def cli(*args: str, env: dict[str, str]) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "flownb", *args], env=env, capture_output=True, text=True, check=True
    )
    return out.stdout.strip()


def children(pid: int) -> list[int]:
    """The pids of ``pid``'s child processes (from /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


@pytest.fixture
def server(
    tmp_path: Path, flownb_env: Path
) -> Iterator[tuple[str, dict[str, str], Path, int, Path]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "FLOWNB_EVENT_LOOP": "uvloop"}  # the default
    flows = sample_flows(tmp_path)
    port = free_port()
    # Its log lines (info: each worker's start-up, not the access log, which goes to stdout)
    # in a file, read when needed: nothing waits on a pipe no one reads.
    logged = tmp_path / "serve.log"
    with logged.open("w") as log_file:
        proc = subprocess.Popen(
            [sys.executable, "-m", "flownb", "serve", "--flows", str(flows), "--port", str(port),
             "--workers", "2", "--log-level", "info"],
            env=env, stdout=subprocess.DEVNULL, stderr=log_file, start_new_session=True,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, logged.read_text()[-2000:]
            assert time.monotonic() < deadline, "serve --workers 2 did not start"
            try:
                if requests.get(f"{url}/healthz", timeout=1).ok:
                    break
            except requests.ConnectionError:
                time.sleep(0.2)
        yield url, env, flows, proc.pid, logged
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)


def each(url: str, key: str, flow_id: str = "echo", body: object = None) -> list[int]:
    """POST the run route ROUNDS times, each on a new connection; return the statuses."""
    body = body if body is not None else {"variables": {"a": "x", "b": "y"}}
    statuses = []
    for _ in range(ROUNDS):
        with requests.Session() as s:
            r = s.post(f"{url}/api/flows/run/{flow_id}", json=body, headers={"x-api-key": key})
            statuses.append(r.status_code)
    return statuses


def test_two_workers_share_keys_media_and_new_flows(
    server: tuple[str, dict[str, str], Path, int, Path],
) -> None:
    url, env, flows, pid, logged = server
    spawned = [p for p in children(pid) if b"spawn_main" in Path(f"/proc/{p}/cmdline").read_bytes()]
    assert len(spawned) == 2  # two uvicorn worker processes
    # Each worker runs the loop the single process runs (asyncio's, though uvloop is installed
    # where it can be), as each found it at start-up (the other may still be starting: /healthz
    # needs only one).
    deadline = time.monotonic() + 60
    while logged.read_text().count("event loop: ") < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    loops = re.findall(r"event loop: (\w+)", logged.read_text())
    assert loops == ["asyncio", "asyncio"], logged.read_text()[-2000:]

    # A key made while serving is accepted by every worker, and refused by all once revoked.
    key = cli("keys", "create", "--name", "live", env=env)
    assert set(each(url, key)) == {200}
    cli("keys", "revoke", "live", env=env)
    # Each worker looks at the key file about once a second: refused by all soon (the deadline
    # only stops a worker that never sees the revocation).
    deadline = time.monotonic() + 30
    while set(each(url, key)) != {401} and time.monotonic() < deadline:
        time.sleep(0.1)
    assert set(each(url, key)) == {401}

    # A flow file added while serving is served by every worker (hot reload per process).
    key = cli("keys", "create", "--name", "second", env=env)
    (flows / "late.json").write_text((flows / "echo.json").read_text())
    assert set(each(url, key, "late")) == {200}

    # An image made by one worker is served by every worker.
    body = {"variables": {"topic": "owls", "tone": "dry"}}
    with requests.Session() as s:
        run = s.post(f"{url}/api/flows/run/blog-intro", json=body, headers={"x-api-key": key})
    assert run.status_code == 200
    image = next(item["output"] for item in run.json() if item["name"] == "header_image")
    for _ in range(ROUNDS):
        with requests.Session() as s:
            got = s.get(image)
            assert got.status_code == 200 and got.content.startswith(b"\x89PNG")


def test_the_worker_app_factory_names_its_missing_config(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from flownb.errors import ConfigError
    from flownb.server.app import app_from_env

    monkeypatch.delenv("FLOWNB_SERVE_CONFIG", raising=False)
    with pytest.raises(ConfigError, match="FLOWNB_SERVE_CONFIG"):
        app_from_env()
    monkeypatch.setenv("FLOWNB_SERVE_CONFIG", '{"provider": "offline"}')
    with pytest.raises(ConfigError, match="flows_dir"):
        app_from_env()
