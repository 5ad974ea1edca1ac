"""A real Jupyter kernel for a test (ipykernel via jupyter_client): started in a folder with an
environment of the test's choosing, driven cell by cell, stopped on exit. Shared by every test
that checks what a notebook front end receives on the wire."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from jupyter_client.manager import KernelManager

__all__ = ["execute", "kernel_env", "outputs", "running_kernel"]


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
        RuntimeError: the kernel did not become ready within two minutes.
    """
    km = KernelManager(kernel_name="python3")
    km.start_kernel(cwd=str(work), env=env)
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=120)
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
