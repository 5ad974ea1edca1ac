"""Black box: ``flownb serve`` as a subprocess, a key made with ``flownb keys create --name NAME``
while it runs, then the contract over HTTP, a flow file added live, and logs free of keys."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from tests.conftest import FLOWS, make_flow, write_flow
from tests.serving import free_port

pytestmark = pytest.mark.timeout(90)


def _flownb() -> list[str]:
    exe = shutil.which("flownb")
    return [exe] if exe else [sys.executable, "-m", "flownb"]


def test_serve_end_to_end(tmp_path: Path) -> None:
    flows = tmp_path / "flows"
    flows.mkdir()
    shutil.copy(FLOWS / "blog-intro.json", flows / "blog-intro.json")
    env = {**os.environ, "FLOWNB_HOME": str(tmp_path / "home")}
    port = free_port()
    log_path = tmp_path / "serve.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [*_flownb(), "serve", "--flows", str(flows), "--port", str(port)],
            env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120  # a process start on a busy machine
        while True:
            assert proc.poll() is None, log_path.read_text()
            try:
                if requests.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            assert time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.1)
        banner = log_path.read_text()
        assert "offline" in banner and "blog-intro" in banner and base in banner
        assert "flownb keys create --name NAME" in banner

        # No key yet: refused, with the way out.
        refused = requests.get(f"{base}/api/flows/getFlowInfo/blog-intro", timeout=10)
        assert refused.status_code == 401
        assert "flownb keys create --name NAME" in refused.json()["message"]

        created = subprocess.run(
            [*_flownb(), "keys", "create", "--name", "blackbox"],
            env=env, capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        key = created.stdout.strip()
        headers = {"x-api-key": key}

        info = requests.get(f"{base}/api/flows/getFlowInfo/blog-intro", headers=headers, timeout=10)
        assert info.status_code == 200
        assert [i["type"] for i in info.json()] == ["variable", "variable", "output", "output"]

        batch = [{"topic": "owls", "tone": "dry"}, {"topic": "bees", "tone": "wry"}]
        run = requests.post(
            f"{base}/api/flows/run/blog-intro",
            json={"variables": batch}, headers=headers, timeout=30,
        )  # fmt: skip
        assert run.status_code == 200
        body = run.json()
        assert len(body) == 2 and body[1][0]["output"].endswith("about bees.")
        image = requests.get(body[0][1]["output"], timeout=10)
        assert image.status_code == 200 and image.content[:4] == b"\x89PNG"

        # A flow dropped into the folder is served at once.
        write_flow(flows / "late.json", make_flow({"o": "<{v}>"}, ["v"]))
        late = requests.post(
            f"{base}/api/flows/run/late",
            json={"variables": {"v": "x"}},
            headers=headers,
            timeout=10,
        )
        assert late.json() == [{"name": "o", "output": "<x>", "type": "output"}]

        wrong = requests.get(
            f"{base}/api/flows/getFlowInfo/late", headers={"x-api-key": key + "x"}, timeout=10
        )
        assert wrong.status_code == 401
        # A key pasted into a URL by mistake is refused and kept out of the access log.
        pasted = requests.get(
            f"{base}/api/flows/getFlowInfo/late", params={"x-api-key": key}, timeout=10
        )
        assert pasted.status_code == 401
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=20)
    logs = log_path.read_text()
    assert "POST /api/flows/run/blog-intro" in logs  # the access log is on...
    assert key not in logs and key[12:] not in logs  # ...and never shows a key
    assert "Traceback" not in logs
    assert "GET /api/flows/getFlowInfo/late?[redacted]" in logs
    listed = subprocess.run(
        [*_flownb(), "keys", "list"], env=env, capture_output=True, text=True, timeout=60
    )
    row = next(line for line in listed.stdout.splitlines() if line.startswith("blackbox"))
    assert "never" not in row  # last used was recorded on shutdown
