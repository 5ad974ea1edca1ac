"""Decoding request bodies too costly for the server's process: in a worker process.

Python's JSON decoder holds the GIL for the whole decode, and its cost grows with the number of
object members: a 10 MB body of a million members holds it for over half a second, during which
the event loop (``/healthz`` included) cannot run, whichever thread decodes. A body whose colon
count (an upper bound on its members, counted at C speed) is over :data:`MEMBERS_IN_PROCESS` is
therefore decoded and checked in a separate process; the answer (the variables, or the error's
fields, with its problem list already capped) comes back pickled.
"""

from __future__ import annotations

import multiprocessing
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from ..errors import ApiError, Problem

__all__ = ["MEMBERS_IN_PROCESS", "DecodePool", "needs_worker"]

# Bodies with at most this many colons are decoded in a thread of the server (about 40 ms of
# GIL); a valid batch of 1,000 elements of 40 variables is under it.
MEMBERS_IN_PROCESS = 50_000
# Problems sent back from a worker: an error body lists at most 100.
_PROBLEMS_BACK = 100


def needs_worker(body: bytes) -> bool:
    """Return whether ``body`` may have too many members to decode in the server's process."""
    return body.count(b":") > MEMBERS_IN_PROCESS


Check = Callable[[bytes, int, Sequence[str]], Any]


def _run(check: Check, body: bytes, max_batch: int, names: Sequence[str]) -> tuple[str, Any]:
    """In the worker: run ``check``; return ``("ok", variables)`` or ``("error", fields)``."""
    try:
        return "ok", check(body, max_batch, names)
    except ApiError as exc:
        problems = [p.to_dict() for p in exc.problems[:_PROBLEMS_BACK]]
        return "error", (exc.status, exc.code, exc.message, problems, exc.total)


class DecodePool:
    """A lazily started pool of worker processes (spawned, never forked from the server)."""

    def __init__(self, workers: int = 2) -> None:
        self.workers = workers
        self._pool: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()

    def submit(self, check: Check, body: bytes, max_batch: int, names: Sequence[str]) -> Any:
        """Return the future of ``check(body, max_batch, names)`` run in a worker."""
        with self._lock:
            if self._pool is None:
                self._pool = ProcessPoolExecutor(
                    self.workers,
                    mp_context=multiprocessing.get_context("spawn"),
                    max_tasks_per_child=100,  # a worker's memory after a hostile body goes back
                )
            return self._pool.submit(_run, check, body, max_batch, list(names))

    def shutdown(self) -> None:
        """Stop the workers (if any were started), after the task each is on."""
        with self._lock:
            if self._pool is not None:
                self._pool.shutdown(wait=True, cancel_futures=True)
                self._pool = None


def raise_from(fields: tuple[int, str, str, list[dict[str, Any]], int]) -> None:
    """Raise the :class:`ApiError` a worker reported.

    Raises:
        ApiError: always.
    """
    status, code, message, problems, total = fields
    raise ApiError(
        message,
        status=status,
        code=code,
        problems=[Problem(**p) for p in problems],
        total=total,
    )
