"""Process-tree bookkeeping from /proc, so a test can prove it left no process behind.

Jupyter starts each kernel in a new session (its own process group), so killing the server's
group does not reach the kernels; the test records every descendant while the server is up and
checks (and, as a last resort, kills) them after shutdown.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

__all__ = ["alive", "descendants", "reap"]


def _parents() -> dict[int, int]:
    """Return pid -> parent pid for every process visible in /proc."""
    table: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # the process ended while we looked
            continue
        # The command name (field 2) may hold spaces and parentheses; fields after its closing
        # parenthesis are space-separated: state, ppid, ...
        rest = stat[stat.rindex(")") + 2 :].split()
        table[int(entry.name)] = int(rest[1])
    return table


def descendants(pid: int) -> set[int]:
    """Return the pids of every live descendant of ``pid`` (not ``pid`` itself)."""
    table = _parents()
    found: set[int] = set()
    frontier = [pid]
    while frontier:
        parent = frontier.pop()
        for child, ppid in table.items():
            if ppid == parent and child not in found:
                found.add(child)
                frontier.append(child)
    return found


def alive(pid: int) -> bool:
    """Return whether ``pid`` exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return state[state.rindex(")") + 2 :].split()[0] != "Z"


def reap(pids: set[int], timeout: float = 10.0) -> set[int]:
    """Wait up to ``timeout`` s for ``pids`` to end; SIGKILL the ones still alive.

    Returns:
        The pids that were still alive at the deadline (and were killed).
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.2)
    leftovers = {p for p in pids if alive(p)}
    for p in leftovers:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p, signal.SIGKILL)
    return leftovers
