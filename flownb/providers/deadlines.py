"""One time limit per provider attempt, on one timer per run.

Every attempt of a run gets the same number of seconds (the run's ``timeout``), so the attempts'
deadlines come in the order the attempts started: a run keeps them in an insertion-ordered dict
and one event-loop timer, set for the earliest deadline still open. ``asyncio.timeout`` would
make, schedule and cancel a timer of its own for every attempt (with the heap of cancelled
timers the loop then sifts), several microseconds of every call on the loop; here an attempt
costs a dict entry.

The rule is ``asyncio.timeout``'s: an attempt whose deadline passes has its task cancelled,
and when that cancellation is what ends it (no other cancellation of the task came meanwhile),
it ends in :class:`TimeoutError` instead (see :meth:`Deadlines.leave`).
"""

from __future__ import annotations

import asyncio

__all__ = ["Deadline", "Deadlines"]


class Deadline:
    """One attempt's time limit: its task, its deadline on the loop's clock, the cancellations
    of its task pending when it began, and whether it has expired (its task was cancelled)."""

    __slots__ = ("cancelling", "expired", "task", "when")

    def __init__(self, task: asyncio.Task[object], when: float) -> None:
        self.task = task
        self.when = when
        self.cancelling = task.cancelling()
        self.expired = False


class Deadlines:
    """The time limits (``seconds`` each) of one run's attempts, on one event loop."""

    __slots__ = ("_loop", "_open", "_timer", "_timer_at", "seconds")

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        # Open limits, oldest first: with one length for all, the earliest deadline first too.
        self._open: dict[Deadline, None] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0

    def enter(self, task: asyncio.Task[object]) -> Deadline:
        """Start a time limit for the attempt running in ``task`` (on the running loop); return
        it, to be given to :meth:`leave` when the attempt ends, however it ends."""
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        limit = Deadline(task, loop.time() + self.seconds)
        self._open[limit] = None
        if self._timer is None:
            self._schedule(limit.when)
        return limit

    def leave(self, limit: Deadline) -> bool:
        """End ``limit``; return whether the attempt's task was cancelled by it alone (its
        deadline passed and no other cancellation came meanwhile): a ``CancelledError`` ending
        the attempt is then a :class:`TimeoutError`, as ``asyncio.timeout`` says."""
        open_ = self._open
        del open_[limit]
        if not open_ and self._timer is not None:
            # Nothing left to time: no timer is kept on the loop past its run's last attempt.
            self._timer.cancel()
            self._timer = None
        if not limit.expired:
            return False
        return limit.task.uncancel() <= limit.cancelling

    def _schedule(self, when: float) -> None:
        assert self._loop is not None
        self._timer_at = when
        self._timer = self._loop.call_at(when, self._expire)

    def _expire(self) -> None:
        """Cancel the tasks of the limits whose deadline has come; set the timer for the next."""
        self._timer = None
        assert self._loop is not None
        # The loop runs a timer up to its clock's resolution early: what was due at the time
        # the timer was set for is due now.
        now = max(self._loop.time(), self._timer_at)
        for limit in self._open:
            if limit.expired:
                continue  # cancelled already; its attempt has not ended yet
            if limit.when > now:
                self._schedule(limit.when)
                return
            limit.expired = True
            limit.task.cancel()
