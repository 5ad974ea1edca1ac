"""A JupyterLab server for one test: loopback only, token auth, every Jupyter directory temporary.

The server runs ``sys.executable -m jupyter lab`` so its kernels (the ``python3`` spec resolves
``python`` to the server's interpreter) import the installed flownb; the environment passed in
(FLOWNB_HOME and friends) reaches the kernels because they inherit the server's environment.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from .procs import descendants, reap

__all__ = ["Lab", "running_lab"]

# User settings that keep the page quiet and deterministic: no news/update toasts (they would
# try the network and cover the notebook), and every cell attached to the DOM (JupyterLab's
# default windowing may leave off-screen outputs unrendered).
_SETTINGS = {
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
        "fetchNews": "false",
        "checkForUpdates": False,
    },
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
}
# Extensions that would reach PyPI or the news feed from the page.
_DISABLED = {
    "@jupyterlab/extensionmanager-extension": True,
    "@jupyterlab/apputils-extension:announcements": True,
}


@dataclass
class Lab:
    """A running JupyterLab server."""

    url: str
    token: str
    root: Path
    process: subprocess.Popen[bytes]
    log: Path
    seen: set[int] = field(default_factory=set)

    def notebook_url(self, name: str) -> str:
        """Return the URL that opens notebook ``name`` (relative to the root) in the Lab UI."""
        return f"{self.url}/lab/tree/{name}?token={self.token}"

    def api(self, path: str, method: str = "GET") -> object:
        """Call the server's REST API and return the decoded JSON (``None`` for an empty body).

        Raises:
            urllib.error.URLError: the server did not answer.
        """
        req = urllib.request.Request(
            f"{self.url}{path}",
            method=method,
            headers={"Authorization": f"token {self.token}"},
        )
        with urllib.request.urlopen(req, timeout=10) as resp:
            body = resp.read()
        return json.loads(body) if body else None

    def has_kernel(self, name: str) -> bool:
        """Return whether notebook ``name`` (relative to the root) has a session with a kernel.

        Raises:
            urllib.error.URLError: the server did not answer.
        """
        sessions = self.api("/api/sessions")
        assert isinstance(sessions, list)
        return any(s.get("path") == name and s.get("kernel") for s in sessions)

    def track(self) -> None:
        """Record the server's current descendants (kernels), so shutdown can check them."""
        self.seen |= descendants(self.process.pid)

    def wait_idle(self, timeout: float) -> None:
        """Wait until the server has a kernel and every kernel is idle (all queued cells ran).

        Raises:
            TimeoutError: some kernel was still busy (or none had started) after ``timeout`` s.
        """
        deadline = time.monotonic() + timeout
        states: list[str] = []
        while time.monotonic() < deadline:
            try:
                kernels = self.api("/api/kernels")
            except urllib.error.URLError as exc:  # HTTPError too: a busy server may answer 500
                states = [f"API error: {exc}"]
                time.sleep(1)
                continue
            assert isinstance(kernels, list)
            states = [k.get("execution_state", "") for k in kernels]
            if states and all(s == "idle" for s in states):
                self.track()
                return
            # A tenth of a second: each answer costs the server a few milliseconds, and a test
            # waits for its kernel several times (a half-second poll lost a quarter on average).
            time.sleep(0.1)
        raise TimeoutError(
            f"kernel not idle after {timeout:.0f}s (states {states}):\n{self.log_tail()}"
        )

    def log_tail(self, chars: int = 4000) -> str:
        """Return the end of the server's log, for failure messages."""
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _write_settings(settings_dir: Path, config_dir: Path) -> None:
    for rel, values in _SETTINGS.items():
        path = settings_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values), encoding="utf-8")
    labconfig = config_dir / "labconfig"
    labconfig.mkdir(parents=True, exist_ok=True)
    (labconfig / "page_config.json").write_text(
        json.dumps({"disabledExtensions": _DISABLED}), encoding="utf-8"
    )


class PortTaken(RuntimeError):
    """JupyterLab could not listen on its port: another process took it after :func:`free_port`
    released it (on a busy machine, often a kernel's ZeroMQ socket, whose ports are picked the
    same way)."""


def _wait_ready(lab: Lab, timeout: float) -> None:
    """Wait until the server answers ``/api/status``.

    Raises:
        PortTaken: the server exited because its port was in use.
        RuntimeError: it exited for another reason.
        TimeoutError: it did not answer within ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if lab.process.poll() is not None:
            tail = lab.log_tail()
            kind = PortTaken if "already in use" in tail else RuntimeError
            raise kind(f"JupyterLab exited early ({lab.process.returncode}):\n{tail}")
        try:
            lab.api("/api/status")
            return
        # HTTPException: what answers on the port is not (yet) this server, e.g. the process
        # that took the port before it could bind (a ZeroMQ socket answers with binary); the
        # server then exits, which the next round sees.
        except (urllib.error.URLError, ConnectionError, TimeoutError, http.client.HTTPException):
            time.sleep(0.1)
    raise TimeoutError(f"JupyterLab did not answer within {timeout:.0f}s:\n{lab.log_tail()}")


def _shutdown(lab: Lab) -> set[int]:
    """Stop the server and its kernels; return the pids that had to be killed."""
    lab.track()
    if lab.process.poll() is None:
        # Shuts every kernel down cleanly, then the server itself.
        with contextlib.suppress(urllib.error.URLError, ConnectionError, TimeoutError):
            lab.api("/api/shutdown", method="POST")
        try:
            lab.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(lab.process.pid, signal.SIGTERM)
            try:
                lab.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(lab.process.pid, signal.SIGKILL)
                lab.process.wait(timeout=10)
    return reap(lab.seen, timeout=10)


@contextmanager
def running_lab(
    root: Path,
    scratch: Path,
    env: Mapping[str, str],
    timeout: float = 60,
    starting: Callable[[], object] | None = None,
) -> Iterator[Lab]:
    """Start JupyterLab serving ``root``, keep its state under ``scratch``, and stop it on exit.
    ``starting``, when given, is called once the server process runs, before waiting for it to
    answer (work that can overlap its start-up, such as launching the browser).

    ``env`` is the whole environment of the server and its kernels. On exit the server is shut
    down through its API, and any descendant still alive after that is killed; the names of such
    leftovers are reported by raising ``RuntimeError`` (only if the body itself succeeded).

    Raises:
        RuntimeError, TimeoutError: the server did not start.
    """
    token = secrets.token_hex(24)
    dirs = {
        name: scratch / name for name in ("runtime", "config", "data", "settings", "workspaces")
    }
    for d in dirs.values():
        d.mkdir(parents=True, exist_ok=True)
    _write_settings(dirs["settings"], dirs["config"])
    # The kernels' IPython folder is the server's own, history in memory: IPython's default is
    # one SQLite file under ~/.ipython that every kernel on the machine opens.
    profile = scratch / "ipython" / "profile_default"
    profile.mkdir(parents=True, exist_ok=True)
    (profile / "ipython_kernel_config.py").write_text(
        "c.HistoryManager.hist_file = ':memory:'\n", encoding="utf-8"
    )
    full_env = {
        **env,
        "IPYTHONDIR": str(scratch / "ipython"),
        "JUPYTER_RUNTIME_DIR": str(dirs["runtime"]),
        "JUPYTER_CONFIG_DIR": str(dirs["config"]),
        "JUPYTER_DATA_DIR": str(dirs["data"]),
        "JUPYTERLAB_SETTINGS_DIR": str(dirs["settings"]),
        "JUPYTERLAB_WORKSPACES_DIR": str(dirs["workspaces"]),
        "JUPYTER_PLATFORM_DIRS": "1",
        "PYDEVD_DISABLE_FILE_VALIDATION": "1",
    }

    def start() -> Lab:
        port = free_port()
        log = scratch / "jupyterlab.log"
        cmd = [
            sys.executable,
            "-m",
            "jupyterlab",
            "--no-browser",
            "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={port}",
            "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={token}",
            f"--ServerApp.root_dir={root}",
            "--ServerApp.allow_remote_access=False",
            "--LabApp.news_url=",
            "--ServerApp.terminals_enabled=False",
            "--ServerApp.allow_root=True",  # CI containers run as root; the server is loopback-only
            "--LabApp.extension_manager=readonly",  # no PyPI queries from the extension manager
        ]
        with log.open("wb") as out:
            process = subprocess.Popen(
                cmd,
                cwd=root,
                env=full_env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group, so shutdown can signal it all
            )
        return Lab(f"http://127.0.0.1:{port}", token, root, process, log)

    lab = start()
    killed: set[int] = set()
    try:
        if starting is not None:
            starting()
        # A port picked free can be taken before the server binds it: a few fresh ones.
        for attempt in range(3):
            try:
                _wait_ready(lab, timeout)
                break
            except PortTaken:
                if attempt == 2:
                    raise
                killed |= _shutdown(lab)
                lab = start()
        yield lab
    finally:
        killed |= _shutdown(lab)
    if killed:
        raise RuntimeError(f"processes outlived JupyterLab's shutdown and were killed: {killed}")
