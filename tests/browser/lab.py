"""A JupyterLab server: loopback only, token auth, every Jupyter directory temporary, started
once per pytest process and shared by its real-browser tests (``jupyterlab`` in
tests/conftest.py); each test reaches it through a :class:`Lab` of its own (:func:`lab_for`).

The server runs ``python -m jupyterlab`` in ``sys.executable`` (``tests.kernels.jupyter_app``),
so its kernels run the server's interpreter and import the installed flownb. A test's own
environment (FLOWNB_HOME, a fake vendor's URL and key) reaches its kernels through a kernelspec
of its own, whose ``env`` jupyter_client adds to the server's environment when it starts a
kernel of that spec; the test's notebooks name that spec. A server per test gave each its
environment too, at about 3.5 CPU-s a start.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

from tests.kernels import jupyter_app

from .procs import descendants, reap

__all__ = ["Lab", "lab_for", "running_lab"]

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
# No "build recommended" check: with it on, every page load asked the server whether its
# assets need a rebuild, and the server ran node three times to answer (about 0.5 CPU-s a
# page); the tests use the installed, prebuilt JupyterLab and never build it.
_PAGE_CONFIG = {"disabledExtensions": _DISABLED, "buildCheck": False, "buildAvailable": False}


@dataclass
class Lab:
    """A running JupyterLab server, as one test sees it: its folder ``root`` (the server's own
    root, or a folder under it, ``prefix`` from there) and its kernelspec ``kernel`` (``None``:
    any kernel is its)."""

    url: str
    token: str
    root: Path
    process: subprocess.Popen[bytes]
    log: Path
    data_dir: Path
    env: Mapping[str, str]
    seen: set[int] = field(default_factory=set)
    prefix: str = ""
    kernel: str | None = None

    # ``data_dir``: the server's Jupyter data folder (its kernelspecs under kernels/); ``env``:
    # the environment its kernels inherit, before their kernelspec's own.

    def path(self, name: str) -> str:
        """Return notebook ``name`` (relative to ``root``) as a path on the server."""
        return f"{self.prefix}/{name}" if self.prefix else name

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
        return any(s.get("path") == self.path(name) and s.get("kernel") for s in sessions)

    def kernels(self) -> list[dict[str, object]]:
        """Return the server's kernels of this test's kernelspec (all of them without one).

        Raises:
            urllib.error.URLError: the server did not answer.
        """
        kernels = self.api("/api/kernels")
        assert isinstance(kernels, list)
        return [k for k in kernels if self.kernel is None or k.get("name") == self.kernel]

    def track(self) -> None:
        """Record the server's current descendants (kernels), so shutdown can check them."""
        self.seen |= descendants(self.process.pid)

    def wait_idle(self, timeout: float) -> None:
        """Wait until the test has a kernel and every kernel of its is idle (all queued cells ran).

        Raises:
            TimeoutError: some kernel was still busy (or none had started) after ``timeout`` s.
        """
        deadline = time.monotonic() + timeout
        states: list[str] = []
        while time.monotonic() < deadline:
            try:
                kernels = self.kernels()
            except urllib.error.URLError as exc:  # HTTPError too: a busy server may answer 500
                states = [f"API error: {exc}"]
                time.sleep(1)
                continue
            states = [str(k.get("execution_state", "")) for k in kernels]
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
    (labconfig / "page_config.json").write_text(json.dumps(_PAGE_CONFIG), encoding="utf-8")


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
    dirs = {name: scratch / name for name in ("config", "data", "settings", "workspaces")}
    # The kernels talk to the server over Unix sockets in the runtime folder (jupyter_client's
    # ``ipc`` transport), not TCP ports: jupyter_client picks free ports and releases them for
    # the kernel to bind, and on a machine running other suites another process took one in
    # between often enough that a kernel failed to start several times in a row (see
    # tests/kernels.py). A socket's path is at most 107 bytes, so the folder is a short one
    # under the system's temporary folder rather than under ``scratch``.
    dirs["runtime"] = Path(tempfile.mkdtemp(prefix="lab-rt-"))
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
            *jupyter_app("jupyterlab"),
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
            # window.jupyterapp: the shared tab (tests/browser/notebook.py) is reset through it
            # between tests, and refreshes its list of kernelspecs before opening a notebook.
            "--LabApp.expose_app_in_browser=True",
            "--KernelManager.transport=ipc",  # the kernels' sockets: see the runtime folder
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
        return Lab(f"http://127.0.0.1:{port}", token, root, process, log, dirs["data"], env)

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
        shutil.rmtree(dirs["runtime"], ignore_errors=True)
    if killed:
        raise RuntimeError(f"processes outlived JupyterLab's shutdown and were killed: {killed}")


def _point_notebooks(root: Path, kernel: str) -> None:
    """Make every notebook under ``root`` (outside hidden folders) name kernelspec ``kernel``."""
    for path in root.rglob("*.ipynb"):
        if any(part.startswith(".") for part in path.relative_to(root).parts):
            continue
        nb = json.loads(path.read_text(encoding="utf-8"))
        nb.setdefault("metadata", {})["kernelspec"] = {
            "name": kernel,
            "display_name": "Python 3 (ipykernel)",
            "language": "python",
        }
        path.write_text(json.dumps(nb, indent=1), encoding="utf-8")


def _end_kernels(lab: Lab) -> set[int]:
    """Shut down the test's sessions and kernels through the API; return the pids of its kernel
    processes that were still alive after that (and were killed)."""
    lab.track()
    with contextlib.suppress(urllib.error.URLError, ConnectionError, TimeoutError):
        sessions = lab.api("/api/sessions")
        assert isinstance(sessions, list)
        for session in sessions:
            if str(session.get("path", "")).startswith(f"{lab.prefix}/"):
                with contextlib.suppress(urllib.error.URLError):  # 404: it ended meanwhile
                    lab.api(f"/api/sessions/{session['id']}", method="DELETE")
        for kernel in lab.kernels():  # one started without a session
            with contextlib.suppress(urllib.error.URLError):
                lab.api(f"/api/kernels/{kernel['id']}", method="DELETE")
    return reap(lab.seen, timeout=20)


@contextmanager
def lab_for(server: Lab, root: Path, env: Mapping[str, str]) -> Iterator[Lab]:
    """Yield ``server`` as the test serving ``root`` (a folder under the server's root) with the
    environment ``env`` sees it: a kernelspec of its own, whose kernels get ``env``, named by
    every notebook under ``root`` (written before this is entered).
    On exit its kernels are shut down through the API and its kernelspec removed; any of its
    kernel processes still alive after that is killed and reported by raising
    ``RuntimeError`` (only if the body itself succeeded), as a server of its own reported them.

    Raises:
        ValueError: ``root`` is not under the server's root, or ``env`` lacks a variable the
            server's environment has (a kernelspec adds and changes variables, never removes).
    """
    missing = sorted(set(server.env) - set(env))
    if missing:
        raise ValueError(f"the kernels would inherit {missing} from the shared JupyterLab server")
    prefix = root.resolve().relative_to(server.root.resolve()).as_posix()
    name = f"flownb-test-{secrets.token_hex(6)}"
    spec_dir = server.data_dir / "kernels" / name
    spec_dir.mkdir(parents=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (ipykernel)",
        "language": "python",
        "env": {k: v for k, v in env.items() if server.env.get(k) != v},
        "metadata": {"debugger": True},
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec), encoding="utf-8")
    _point_notebooks(root, name)
    lab = replace(server, root=root, prefix=prefix, kernel=name, seen=set())
    try:
        yield lab
    finally:
        killed = _end_kernels(lab)
        shutil.rmtree(spec_dir, ignore_errors=True)
    if killed:
        raise RuntimeError(f"kernel processes outlived their shutdown and were killed: {killed}")
