"""A real Jupyter kernel for a test (ipykernel via jupyter_client): started in a folder with an
environment of the test's choosing, driven cell by cell, stopped on exit. Shared by every test
that checks what a notebook front end receives on the wire.

Kernels start beside the suite's other workers (and other suites on the same machine), so
nothing of a kernel's start-up is shared with them:

- its sockets are Unix sockets in a folder of its own (jupyter_client's ``ipc`` transport), not
  TCP ports: jupyter_client picks free ports, releases them and lets the kernel bind them, and
  another process may take one in between, so that the kernel dies before it answers;
- its IPython folder is its own, with the command history kept in memory (IPython's default
  is one SQLite file under ``~/.ipython`` that every kernel on the machine opens), and its
  Jupyter runtime folder (connection files) is its own too (:func:`isolated`).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from jupyter_client.manager import KernelManager

__all__ = [
    "KERNEL_OPTIONS",
    "execute",
    "isolated",
    "jupyter_app",
    "kernel_env",
    "outputs",
    "running_kernel",
]

# What a kernel-starting command line (``jupyter nbconvert --execute``) is given: Unix sockets
# rather than TCP ports picked then released (see above), and a start-up timeout for a machine
# under load (nbclient's default is 60 s).
KERNEL_OPTIONS = ("--KernelManager.transport=ipc", "--ExecutePreprocessor.startup_timeout=300")

# ``python -m MODULE`` with rfc3987_syntax kept out. A Jupyter server or nbconvert imports
# jsonschema (jupyter_events, nbformat), whose format checker imports rfc3987_syntax when it is
# installed, and that builds Lark parsers for the "iri" formats: about 1.3 CPU-s a process.
# Nothing these apps validate for the tests uses an IRI format, and jsonschema leaves those
# formats unchecked when the import fails (the root conftest.py does the same for pytest's own
# processes).
_WITHOUT_IRI_PARSERS = (
    "import runpy, sys; sys.modules['rfc3987_syntax'] = None; "
    "runpy.run_module({module!r}, run_name='__main__', alter_sys=True)"
)


def jupyter_app(module: str) -> list[str]:
    """Return the command line that runs ``python -m module`` (a Jupyter app: ``jupyterlab``,
    ``nbconvert``) in this interpreter without rfc3987_syntax's parsers; append its arguments."""
    return [sys.executable, "-c", _WITHOUT_IRI_PARSERS.format(module=module)]


# An IPython profile whose history lives in memory: no file shared with other kernels.
_PROFILE = "c.HistoryManager.hist_file = ':memory:'\n"


@contextmanager
def isolated(env: dict[str, str]) -> Iterator[dict[str, str]]:
    """Yield ``env`` with an IPython folder (history in memory) and a Jupyter runtime folder of
    their own, removed on exit. The runtime folder is short (under the system's temporary
    folder): a Unix socket's path is at most 107 bytes, and the kernel's sockets live there."""
    scratch = Path(tempfile.mkdtemp(prefix="fk-"))
    try:
        profile = scratch / "ipython" / "profile_default"
        profile.mkdir(parents=True)
        (profile / "ipython_config.py").write_text(_PROFILE, encoding="utf-8")
        (profile / "ipython_kernel_config.py").write_text(_PROFILE, encoding="utf-8")
        runtime = scratch / "rt"
        runtime.mkdir()
        yield {**env, "IPYTHONDIR": str(scratch / "ipython"), "JUPYTER_RUNTIME_DIR": str(runtime)}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def kernel_env(work: Path, **extra: str) -> dict[str, str]:
    """Return this process's environment without flownb/OpenAI settings nor a Jupyter session
    name (so the kernel decides as nbclient's would unless the test says otherwise), with
    FLOWNB_HOME under ``work`` and ``extra`` on top."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("FLOWNB_", "OPENAI_")) and k != "JPY_SESSION_NAME"
    }
    env["FLOWNB_HOME"] = str(work / "home")
    env.update(extra)
    return env


@contextmanager
def running_kernel(work: Path, env: dict[str, str]) -> Iterator[Any]:
    """Start a python3 kernel in ``work`` with environment ``env``; yield a ready client, and
    shut the kernel down on exit.

    Raises:
        RuntimeError: the kernel did not become ready within five minutes.
    """
    with isolated(env) as own:
        runtime = Path(own["JUPYTER_RUNTIME_DIR"])
        km = KernelManager(
            kernel_name="python3", transport="ipc", connection_file=str(runtime / "k.json")
        )
        km.start_kernel(cwd=str(work), env=own)
        kc = km.client()
        kc.start_channels()
        try:
            kc.wait_for_ready(timeout=300)
            yield kc
        finally:
            kc.stop_channels()
            km.shutdown_kernel(now=True)


def execute(
    kc: Any,
    code: str,
    on_message: Callable[[dict[str, Any]], None] | None = None,
    timeout: float = 180,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Run ``code`` in the kernel; return the execute reply's content and the iopub messages
    it caused, each also handed to ``on_message`` as it arrives."""
    messages: list[dict[str, Any]] = []

    def hook(msg: dict[str, Any]) -> None:
        messages.append(msg)
        if on_message is not None:
            on_message(msg)

    reply = kc.execute_interactive(code, output_hook=hook, timeout=timeout)
    return reply["content"], messages


def outputs(messages: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    """Return the contents of the messages of type ``kind`` (``stream``, ``error``...)."""
    return [m["content"] for m in messages if m["msg_type"] == kind]


def printed(messages: list[dict[str, Any]]) -> str:
    """Return what the cell printed to stdout, whole: one ``print`` may reach the client as
    several stream messages (ipykernel flushes on its own schedule)."""
    return "".join(
        m["content"]["text"]
        for m in messages
        if m["msg_type"] == "stream" and m["content"].get("name") == "stdout"
    )
