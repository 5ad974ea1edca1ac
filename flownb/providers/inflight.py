"""Calls sent and not yet answered: how many this process is waiting for, and how a stopped run
lets them finish (a request sent is billed, so its answer is kept; see :func:`finish`)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Protocol

from ..infra.aio import settled

__all__ = ["SENT", "Stoppable", "calls_in_flight", "finish"]


class Stoppable(Protocol):
    """What :func:`finish` stops: a run's call runner (it sends nothing more once stopped)."""

    def stop(self) -> None:
        """Send nothing more; end what waits to be sent."""

    def abandon(self) -> None:
        """Note that the calls in flight are being abandoned too (a second cancellation):
        what the run waits for ends now, not when its answers come."""


# One entry for each provider request this process has sent and not yet had answered, over
# every run: a call appends one as it sends and pops one when its attempt ends. A list rather
# than a count under a lock: the loop threads of several runs change it, and an append or a pop
# is whole on its own (under the GIL, and under the list's own lock on a free-threaded build)
# at a fraction of the cost of taking a lock twice for every call.
SENT: list[None] = []


def calls_in_flight() -> int:
    """Return how many provider requests this process has sent and is waiting for."""
    return len(SENT)


async def finish(runner: Stoppable, tasks: Sequence[asyncio.Task[Any]]) -> None:
    """Wait for a run's ``tasks``; return when they are done.

    Cancelling the wait stops the run, not the requests it sent (a request sent is billed):
    ``runner`` sends nothing more and ends what waits to be sent, the calls in flight go on to
    their answers (cached, and their elements reported, as usual; each is bounded by its
    attempt's timeout), and the cancellation is raised once they are done. A sync caller is
    told when the rest may finish without it (see :func:`flownb.infra.aio.settled`). Cancelling
    again abandons the calls in flight.

    Raises:
        CancelledError: the wait was cancelled (after the calls in flight ended).
        Exception: what a task raised (after every task ended).
    """
    try:
        await asyncio.wait(tasks)  # never cancels the tasks: they go on if this wait is cancelled
    except asyncio.CancelledError:
        runner.stop()
        settled()
        try:
            await asyncio.wait(tasks)
        except asyncio.CancelledError:  # cancelled again: abandon what is in flight
            runner.abandon()
            for task in tasks:
                task.cancel()
            await asyncio.wait(tasks)
        for task in tasks:
            if not task.cancelled():
                task.exception()  # looked at: the cancellation is what this run reports
        raise
    for task in tasks:
        task.result()  # an unexpected error in a worker (elements' errors were reported)
