"""Issue 10 items 6 and 15: ``flownb serve`` binds before it announces, and ``flownb gc`` prunes
what the server keeps under FLOWNB_HOME. Real subprocesses (``python -m flownb``)."""

from __future__ import annotations

import os
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from flownb.providers.base import Generation
from flownb.runtime.cache import CACHE_FILE, CallCache
from flownb.runtime.runlog import RUNLOG_FILE, RunLog
from tests.cli_inprocess import run_cli
from tests.serving import sample_flows

pytestmark = pytest.mark.timeout(60)

DAY = 86400.0


def _flownb(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "flownb", *args],
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_serve_on_a_busy_port_is_one_error_line_and_exit_2(tmp_path: Path) -> None:
    flows = sample_flows(tmp_path)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        done = _flownb("serve", "--flows", str(flows), "--port", str(port))
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"flownb: error: cannot listen on 127.0.0.1:{port}: ")
    assert "in use" in lines[0]
    assert "listening on" not in done.stderr + done.stdout


def _serving(
    flows: Path, *python_args: str, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    """Start ``python PYTHON_ARGS serve --flows FLOWS --port 0`` (``-m flownb`` by default)
    with its log lines on a pipe."""
    command = [*(python_args or ("-m", "flownb")), "serve", "--flows", str(flows)]
    return subprocess.Popen(
        [sys.executable, *command, "--port", "0"],
        env={**os.environ, **(env or {})},
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )


def _line_with(proc: subprocess.Popen[str], needle: str) -> str:
    """Return the first line of ``proc``'s stderr that holds ``needle``."""
    assert proc.stderr is not None
    line = ""
    deadline = time.monotonic() + 120  # a process start on a busy machine
    while needle not in line and time.monotonic() < deadline:
        line = proc.stderr.readline()
        assert line or proc.poll() is None, "serve exited"
    return line


def test_serve_announces_the_bound_port_and_answers_there(tmp_path: Path) -> None:
    pytest.importorskip("uvloop")  # a dependency, but not on Windows
    proc = _serving(sample_flows(tmp_path), env={"FLOWNB_EVENT_LOOP": "uvloop"})  # the default
    try:
        url = _line_with(proc, "listening on ").split("listening on ", 1)[1].split()[0]
        assert not url.endswith(":0")
        # The loop that really runs, as the app found it when it started: asyncio's, though
        # uvloop is installed (uvicorn's "auto" would pick it) and is the background loop's.
        assert _line_with(proc, "event loop: ").split("event loop: ", 1)[1].strip() == "asyncio"
        # Announced after binding: the port accepts at once (uvicorn serves it when ready).
        r = httpx.get(f"{url}/healthz", timeout=20)
        assert r.status_code == 200
    finally:
        proc.terminate()
        proc.wait(20)


# As on Windows, where uvloop is not installed: its import fails, and serve starts the same.
BLOCKED = "import sys; sys.modules['uvloop'] = None; import runpy; "
BLOCKED += "runpy.run_module('flownb', run_name='__main__', alter_sys=True)"


@pytest.mark.parametrize(
    ("python_args", "env"),
    [(("-c", BLOCKED), {}), ((), {"FLOWNB_EVENT_LOOP": "asyncio"})],
    ids=["uvloop-not-installed", "FLOWNB_EVENT_LOOP=asyncio"],
)
def test_serve_runs_on_asyncio_without_uvloop_and_whatever_the_background_loop(
    tmp_path: Path, python_args: tuple[str, ...], env: dict[str, str]
) -> None:
    proc = _serving(sample_flows(tmp_path), *python_args, env=env)
    try:
        url = _line_with(proc, "listening on ").split("listening on ", 1)[1].split()[0]
        assert _line_with(proc, "event loop: ").split("event loop: ", 1)[1].strip() == "asyncio"
        assert httpx.get(f"{url}/healthz", timeout=20).status_code == 200
    finally:
        proc.terminate()
        proc.wait(20)


def _aged(path: Path, days: float) -> None:
    when = time.time() - days * DAY
    os.utime(path, (when, when))


def _home_with_history(home: Path) -> None:
    """Two old images and one new; two old cache entries and one new; an old and a new run."""
    media = home / "media"
    media.mkdir(parents=True)
    for name, days, size in (("a" * 40, 40, 3000), ("b" * 40, 35, 2000), ("c" * 40, 1, 1000)):
        path = media / f"{name}.png"
        path.write_bytes(b"x" * size)
        _aged(path, days)
    (media / "notes.txt").write_text("not an image flownb made")
    _aged(media / "notes.txt", 99)
    cache = CallCache(home / CACHE_FILE)
    for key in ("old1", "old2", "new"):
        cache.put(key, Generation(key))
    cache.close()
    with sqlite3.connect(home / CACHE_FILE) as db:
        db.execute("UPDATE calls SET created = ? WHERE key LIKE 'old%'", (time.time() - 40 * DAY,))
    log = RunLog(home / RUNLOG_FILE)
    row = [0, 0.0, None, {"v": "1"}, None, None, None, None, None, None, None]
    log.write("old-run", "f", "offline", [[0, time.time() - 40 * DAY, *row[2:]]] * 3)
    log.write("new-run", "f", "offline", [[0, time.time(), *row[2:]]] * 2)
    log.sync()


def _runs(home: Path) -> int:
    with sqlite3.connect(home / RUNLOG_FILE) as db:
        return int(db.execute("SELECT coalesce(sum(n), 0) FROM chunks").fetchone()[0])


def test_gc_prunes_media_cache_and_run_log_by_age(flownb_env: Path) -> None:
    _home_with_history(flownb_env)
    dry = run_cli("gc", "--older-than", "30d", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "would remove 2 image(s)" in dry.stdout
    assert "would remove 2 entry(ies)" in dry.stdout
    assert "would remove 3 run(s)" in dry.stdout
    assert len(list((flownb_env / "media").iterdir())) == 4  # nothing removed
    done = run_cli("gc", "--older-than", "30d")
    assert done.returncode == 0, done.stderr
    left = sorted(p.name for p in (flownb_env / "media").iterdir())
    assert left == ["c" * 40 + ".png", "notes.txt"]
    assert len(CallCache(flownb_env / CACHE_FILE)) == 1
    assert _runs(flownb_env) == 2


def test_gc_max_size_removes_the_oldest_images_first(flownb_env: Path) -> None:
    _home_with_history(flownb_env)
    done = run_cli("gc", "--max-size", "3500")
    assert done.returncode == 0, done.stderr
    left = sorted(p.name for p in (flownb_env / "media").glob("*.png"))
    assert left == ["b" * 40 + ".png", "c" * 40 + ".png"]
    assert len(CallCache(flownb_env / CACHE_FILE)) == 3  # size applies to media only


def test_gc_needs_to_be_told_what_to_prune(flownb_env: Path) -> None:
    done = run_cli("gc")
    assert done.returncode == 2
    bad = run_cli("gc", "--older-than", "soon")
    assert bad.returncode == 2 and "not an age" in bad.stderr
