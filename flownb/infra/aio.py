"""Running async work from sync code, including inside Jupyter where a loop already runs.

All sync entry points run their coroutines on one long-lived event loop in a daemon thread.
That works whether or not the calling thread has a running loop (never ``asyncio.run`` in a
kernel), and lets providers keep HTTP connection pools alive across calls, since every
coroutine they serve from sync code runs on the same loop.

Ctrl-C while waiting cancels the coroutine on the loop and waits (up to :data:`INTERRUPT_WAIT`
seconds) until it has :func:`settled`: stopped starting work and handed over what it finished.
A run's requests already sent are billed, so the engine lets them end after that, in the
background (see :func:`flownb.runtime.engine.Engine.run_async`); callers that collect results
close their hand-over first (see :class:`flownb.runtime.pipeline.Observers`), so nothing it
reports later reaches what they return. A caller that would rather wait for them (the command
line, before it exits) says so with :func:`patience`: Ctrl-C then waits for the coroutine to
end, a bounded time, and a second Ctrl-C abandons it.

A process forked while the loop runs (multiprocessing's ``fork``, a pre-forking server, a
Dask/joblib worker) inherits the loop object but not its thread: the child forgets it and
starts its own on first use (``os.register_at_fork``), so ``run_sync`` works there too.

The loop is uvloop's where it is installed (libuv's loop spends less CPU a call than asyncio's;
``FLOWNB_EVENT_LOOP=asyncio`` chooses asyncio's). At interpreter exit it winds down before
Python finalizes: its tasks are cancelled, its async generators (the HTTP sessions' closers)
finalized and its thread joined, so no loop runs in a daemon thread while the interpreter
tears down the objects it uses.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import os
import queue
import threading
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar

from ..config.settings import event_loop_kind

__all__ = [
    "INTERRUPT_WAIT",
    "Patience",
    "Stopper",
    "patience",
    "run_sync",
    "settled",
    "stream_async",
    "stream_sync",
]

T = TypeVar("T")
R = TypeVar("R")

# Seconds between checks for Ctrl-C while a sync call waits for its coroutine.
_WAKE = 0.1
# Seconds Ctrl-C waits for the cancelled coroutine to unwind before raising anyway.
INTERRUPT_WAIT = 10.0

# Seconds the exit wind-down waits for the loop's tasks to end, and then for its thread.
_EXIT_WAIT = 2.0

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None
_thread: threading.Thread | None = None
_shut = False  # the interpreter is exiting and the loop has wound down: no new one
# What a forked child inherited from its parent and must neither use nor close: the parent's
# loop (its selector and self-pipe are shared with the parent) stays referenced, never closed.
_inherited: list[object] = []


def _forget_loop_in_child() -> None:
    """In a forked child: drop the parent's loop (its thread did not survive the fork) and the
    lock, which another thread of the parent may have held at the moment of the fork."""
    global _loop, _lock, _thread
    if _loop is not None:
        _inherited.append(_loop)
    _loop = None
    _thread = None
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_loop_in_child)

_local = threading.local()


class Stopper:
    """Lets another thread stop the work a thread runs through :func:`run_sync`, as Ctrl-C does.

    ``with stopper:`` on the working thread; :meth:`stop` from any thread (a widget's Stop
    button, a signal handler) cancels what runs and makes ``run_sync`` raise
    ``KeyboardInterrupt`` there once it :func:`settled`, so callers keep what finished exactly
    as after Ctrl-C. Work started after ``stop()`` is stopped at once.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._futures: set[concurrent.futures.Future[Any]] = set()
        self.stopped = False

    def __enter__(self) -> Stopper:
        _local.stopper = self
        return self

    def __exit__(self, *exc: object) -> None:
        _local.stopper = None

    def stop(self) -> None:
        """Cancel the work running under this stopper (and any started later)."""
        with self._lock:
            self.stopped = True
            futures = list(self._futures)
        for future in futures:
            future.cancel()

    def watch(self, future: concurrent.futures.Future[Any]) -> None:
        """Cancel ``future`` on :meth:`stop` (at once if already stopped)."""
        with self._lock:
            self._futures.add(future)
            stopped = self.stopped
        if stopped:
            future.cancel()

    def forget(self, future: concurrent.futures.Future[Any]) -> None:
        """Stop watching ``future``."""
        with self._lock:
            self._futures.discard(future)


# Set by run_sync/stream_sync for the coroutine they run: the event its caller waits for after
# Ctrl-C (see settled()).
_settled: ContextVar[threading.Event | None] = ContextVar("flownb_settled", default=None)


def settled() -> None:
    """Tell the sync caller of the running coroutine (if any) that after its cancellation the
    coroutine stopped starting work and handed over what it finished: what it still does
    (requests in flight ending) can go on without the caller (see the module docstring)."""
    event = _settled.get()
    if event is not None:
        event.set()


@dataclass(frozen=True)
class Patience:
    """How a sync caller waits after Ctrl-C for the interrupted coroutine to end (see
    :func:`patience`): ``grace`` seconds at most; ``waiting()`` returns the line to announce
    when the wait starts (``None``: nothing is in flight, so nothing to wait for)."""

    grace: float
    waiting: Callable[[], str | None]
    say: Callable[[str], None]


@contextmanager
def patience(wait: Patience) -> Iterator[None]:
    """Inside this block, Ctrl-C during :func:`run_sync` / :func:`stream_sync` on this thread
    waits up to ``wait.grace`` seconds for the coroutine to end (announced with
    ``wait.say(wait.waiting())``), and a second Ctrl-C abandons it at once."""
    before = getattr(_local, "patience", None)
    _local.patience = wait
    try:
        yield
    finally:
        _local.patience = before


def _after_interrupt(
    cancel: Callable[[], None], finished: threading.Event, settle: threading.Event
) -> None:
    """After the first Ctrl-C cancelled the coroutine: wait until it :func:`settled` (or
    ended); with :func:`patience`, also until it ended, a second Ctrl-C cancelling it again."""
    settle.wait(timeout=INTERRUPT_WAIT)
    wait: Patience | None = getattr(_local, "patience", None)
    if wait is None or finished.is_set():
        return
    line = wait.waiting()
    if line is None:
        finished.wait(timeout=INTERRUPT_WAIT)
        return
    wait.say(line)
    try:
        # In slices, so a second Ctrl-C lands promptly (see run_sync).
        deadline = time.monotonic() + wait.grace
        while not finished.is_set() and time.monotonic() < deadline:
            finished.wait(timeout=_WAKE)
    except KeyboardInterrupt:
        pass
    if not finished.is_set():
        cancel()  # Ctrl-C again, or the grace period is over: abandon what is in flight
        finished.wait(timeout=INTERRUPT_WAIT)


def _new_loop() -> asyncio.AbstractEventLoop:
    """Return a new event loop: uvloop's if it is installed and ``FLOWNB_EVENT_LOOP`` does
    not say ``asyncio``, asyncio's otherwise.

    Raises:
        ConfigError: ``FLOWNB_EVENT_LOOP`` says neither.
    """
    if event_loop_kind() == "uvloop":
        try:
            import uvloop
        except ImportError:
            pass
        else:
            return uvloop.new_event_loop()
    return asyncio.new_event_loop()


def _background_loop() -> asyncio.AbstractEventLoop:
    """Return the background loop, started in its thread if there is none yet.

    Raises:
        RuntimeError: the interpreter is exiting and the loop has already wound down.
    """
    global _loop, _thread
    with _lock:
        if _loop is None or _loop.is_closed():
            if _shut:
                raise RuntimeError("flownb's event loop has shut down: the interpreter is exiting")
            loop = _new_loop()
            thread = threading.Thread(
                target=loop.run_forever, name="flownb-event-loop", daemon=True
            )
            thread.start()
            _loop, _thread = loop, thread
        return _loop


async def _wind_down() -> None:
    """Cancel the loop's other tasks, wait (a bounded time) for them to end, then finalize its
    async generators (which close the HTTP sessions opened on it)."""
    current = asyncio.current_task()
    tasks = [t for t in asyncio.all_tasks() if t is not current]
    for task in tasks:
        task.cancel()
    if tasks:
        await asyncio.wait(tasks, timeout=_EXIT_WAIT)
    await asyncio.get_running_loop().shutdown_asyncgens()


@atexit.register
def _shut_down() -> None:
    """At interpreter exit: wind the background loop down, stop it and join its thread (then
    close it), before Python finalizes the objects a still-running loop would touch."""
    global _shut
    with _lock:
        _shut = True
        loop, thread = _loop, _thread
    if loop is None or thread is None or loop.is_closed() or not thread.is_alive():
        return
    # A loop stuck in a callback times out here; it is asked to stop all the same.
    with suppress(Exception):
        asyncio.run_coroutine_threadsafe(_wind_down(), loop).result(_EXIT_WAIT * 2)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(_EXIT_WAIT)
    if not thread.is_alive():
        loop.close()


def _loop_for_sync() -> asyncio.AbstractEventLoop:
    """Return the background loop, for a sync call to wait on.

    Raises:
        RuntimeError: the caller is a coroutine on that loop (waiting would deadlock).
    """
    loop = _background_loop()
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        raise RuntimeError(
            "flownb's sync API was called from its own event loop; use the async API"
        )
    return loop


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion on flownb's background loop and return its result.

    Raises:
        Whatever ``coro`` raises. ``KeyboardInterrupt`` while waiting cancels ``coro`` first;
            so does a :class:`Stopper` stopped from another thread, which then raises
            ``KeyboardInterrupt`` here too.
        RuntimeError: called from a coroutine already running on the background loop (that
            would deadlock; await the async API instead).
    """
    try:
        loop = _loop_for_sync()
    except RuntimeError:
        coro.close()  # never started: no "never awaited" warning
        raise
    finished = threading.Event()
    settle = threading.Event()
    task: list[asyncio.Task[Any]] = []

    async def tracked() -> T:
        current = asyncio.current_task()
        if current is not None:
            task.append(current)
        _settled.set(settle)
        try:
            return await coro
        finally:
            finished.set()
            settle.set()

    def cancel_again() -> None:
        if task:
            loop.call_soon_threadsafe(task[0].cancel)

    def never_started(fut: concurrent.futures.Future[T]) -> None:
        if fut.cancelled() and not task:  # tracked() may never run: nothing else sets them
            finished.set()
            settle.set()

    future = asyncio.run_coroutine_threadsafe(tracked(), loop)
    future.add_done_callback(never_started)
    stopper: Stopper | None = getattr(_local, "stopper", None)
    if stopper is not None:
        stopper.watch(future)
    try:
        # Waited for in slices: a wait blocked in the kernel wakes for Ctrl-C only when the
        # signal lands on this thread, which libraries running threads of their own (polars,
        # once imported) make unlikely; a woken thread runs the pending handler at once.
        while not future.done():
            concurrent.futures.wait((future,), timeout=_WAKE)
        return future.result()
    except concurrent.futures.CancelledError:
        if stopper is None or not stopper.stopped:
            raise
        # Stopped from another thread: the same unwinding, and the same exception, as Ctrl-C.
        settle.wait(timeout=INTERRUPT_WAIT)
        raise KeyboardInterrupt from None
    except KeyboardInterrupt:
        future.cancel()
        # Let the coroutine hand over finished work (and, with patience, end) before raising.
        _after_interrupt(cancel_again, finished, settle)
        raise
    finally:
        if stopper is not None:
            stopper.forget(future)


_running: set[asyncio.Task[Any]] = set()  # stream_async's runs (see there)
_END = object()  # what the runner puts last: (_END, its result or exception)


def stream_sync(
    run: Callable[[Callable[[T], None]], Coroutine[Any, Any, R]],
) -> Iterator[T | R]:
    """Run the coroutine ``run(emit)`` on flownb's background loop (as :func:`run_sync`
    does), yielding each item it passes to ``emit`` the moment it does (``emit`` may be called
    from the loop's thread only), then its return value.

    Closing the generator early (``break``) cancels the run there. Ctrl-C while waiting, or a
    :class:`Stopper` stopped from another thread, cancels it too and raises
    ``KeyboardInterrupt`` once it unwound (up to :data:`INTERRUPT_WAIT` seconds).

    Raises:
        Whatever the coroutine raises (after the items emitted before).
        RuntimeError: called from a coroutine running on the background loop.
    """
    loop = _loop_for_sync()
    found: queue.SimpleQueue[tuple[Any, Any]] = queue.SimpleQueue()
    finished = threading.Event()
    settle = threading.Event()
    task: list[asyncio.Task[Any]] = []

    def emit(item: T) -> None:
        found.put((item, None))

    def cancel_again() -> None:
        if task:
            loop.call_soon_threadsafe(task[0].cancel)

    async def runner() -> None:
        current = asyncio.current_task()
        if current is not None:
            task.append(current)
        _settled.set(settle)
        try:
            result = await run(emit)
        except asyncio.CancelledError:
            found.put((_END, KeyboardInterrupt()))
            raise
        except BaseException as exc:
            found.put((_END, exc))
        else:
            found.put((_END, (result,)))
        finally:
            finished.set()
            settle.set()

    def cancelled(fut: concurrent.futures.Future[None]) -> None:
        if fut.cancelled():  # stopped: the consumer ends now, whatever the run still finishes
            found.put((_END, KeyboardInterrupt()))
            if not task:  # before runner started: nothing else will set them
                finished.set()
                settle.set()

    future = asyncio.run_coroutine_threadsafe(runner(), loop)
    future.add_done_callback(cancelled)
    stopper: Stopper | None = getattr(_local, "stopper", None)
    if stopper is not None:
        stopper.watch(future)
    done = False
    try:
        while True:
            item, end = found.get()
            if item is not _END:
                yield item
                continue
            done = True
            if isinstance(end, BaseException):
                raise end
            yield end[0]
            return
    except KeyboardInterrupt:
        if not done:
            done = True
            future.cancel()
            _after_interrupt(cancel_again, finished, settle)
        raise
    finally:
        if not done:  # closed early, or stopped: cancel, let it hand over what it finished
            future.cancel()
            settle.wait(timeout=INTERRUPT_WAIT)
        if stopper is not None:
            stopper.forget(future)


async def stream_async(
    run: Callable[[Callable[[T], None]], Coroutine[Any, Any, R]],
) -> AsyncIterator[T | R]:
    """Run the coroutine ``run(emit)`` on the caller's loop, yielding each item it passes to
    ``emit`` (from this loop) as it comes, then its return value. Closing the iterator early
    cancels the run (and waits for it).

    Raises:
        Whatever the coroutine raises (after the items emitted before).
    """
    items: asyncio.Queue[T] = asyncio.Queue()
    task = asyncio.ensure_future(run(items.put_nowait))
    # Kept until it ends: cancelled with this iterator, a run may go on finishing the requests
    # it sent (see settled) after nothing awaits it any more.
    _running.add(task)
    task.add_done_callback(_running.discard)
    try:
        while not task.done() or not items.empty():
            if items.empty():
                getter = asyncio.ensure_future(items.get())
                await asyncio.wait({task, getter}, return_when=asyncio.FIRST_COMPLETED)
                if not getter.done():
                    getter.cancel()
                    continue
                yield getter.result()
            else:
                yield items.get_nowait()
        result = task.result()  # raises the run's exception, if it failed
    finally:
        if not task.done():  # the consumer stopped early: the run stops too
            task.cancel()
            await asyncio.wait({task})
    yield result
